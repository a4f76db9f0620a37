"""A backfill's dry count made by the database (issue 50: a dry run "answers at once").

Contract (docs/online.md, "Backfill"; the caller is ``online/backfill/runs.py``'s ``dry_run``):

* Only a trace-level rule without filter (:func:`~evaluator_host.store.online.case_hashes.hashable`) is counted
  here: its targets are its *routed* traces — those with a span that is not the service's own telemetry (as
  routing decides: a body carrying the evaluation marker) — one target each, in the rule's sample. For any other
  rule both functions answer None and the pages count (``backfills.count``: every trace's spans read).
* :func:`fresh_count` — such a rule without sampling or budgets and without any score row (nothing to skip):
  ``(traces, targets)`` counted by the database in one walk of the window's spans.
* :func:`counted` — any such rule: the routed traces' ids read in one statement, in the window's order, each
  with whether the rule's rows already score it with ``revision`` — a row of the trace (its id, or its id with a
  revision's suffix) queued or running, or done with that revision; or, beside the trace's own row (not dropped),
  the row a backfill with the revision would write (``<trace>@r<revision>``, not dropped): what the pages count as
  ``already_scored`` (``backfills.count``) — the caller's sample (``keep``, by trace id: routing's, which this layer
  does not make) taken of them; ``(traces, targets, already_scored)`` up to ``limit`` targets to score, no span
  read into the service.
* Both stop at the first target to score past ``limit`` (the targets already scored before it are counted, as the
  pages count them); ``traces`` counts the window's traces (routed or not) before it — all of them when the window
  holds no such target. The pages stop there too, or at the end of their page (``DRY_RUN_PAGE`` traces) when that
  comes first: past a page's end the two can differ in ``traces`` and ``already_scored``, never in the targets to
  score.
* As the pages' count did for a new rule before, a span is the service's own telemetry when its body carries the
  marker's text (routing reads the attribute), and a trace with no span stored (retention between its spans' and
  its row's deletes) is no target. On PostgreSQL the statement's rows are fetched whole (a small ``limit`` still
  checks every routed trace of the window: one index probe each).

Portable SQL. Blocking: call from a thread.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import Select, and_, exists, func, or_, select
from sqlalchemy.engine import Connection

from evaluator_host.observability.tracing import MARKER
from evaluator_host.store.online.backfills import variant
from evaluator_host.store.online.case_hashes import eligible, hashable, traces_in
from evaluator_host.store.online.refs import targets_of
from evaluator_host.store.online.rows import OnlineScoreRow, OnlineSpanRow, OnlineTraceRow
from evaluator_host.store.online.rules import RuleRecord

__all__ = ["counted", "fresh_count"]

S, T = OnlineScoreRow, OnlineTraceRow
Window = tuple[datetime | None, datetime | None]


def _routed(rule: RuleRecord, window: Window) -> Select[str, int, datetime]:
    """The window's traces with a span that is not the service's own telemetry, in the window's order (first seen,
    then id)."""
    sp = OnlineSpanRow
    own = sp.body.contains(MARKER, autoescape=True)
    routed = exists().where(sp.workspace_id == T.workspace_id, sp.trace_id == T.trace_id, ~own)
    return traces_in(rule, window).where(routed).order_by(T.first_seen_at, T.trace_id)


def _traces_before(conn: Connection, rule: RuleRecord, window: Window, cut: tuple[Any, str] | None) -> int:
    """The window's traces (routed or not) before ``cut`` (first seen, id); None: all of them."""
    everything = traces_in(rule, window)
    if cut is not None:
        at, trace_id = cut
        everything = everything.where(or_(T.first_seen_at < at, and_(T.first_seen_at == at, T.trace_id < trace_id)))
    return int(conn.scalar(select(func.count()).select_from(everything.subquery())) or 0)


def fresh_count(conn: Connection, rule: RuleRecord, window: Window, limit: int) -> tuple[int, int] | None:
    """(traces, targets) of a backfill of an :func:`~evaluator_host.store.online.case_hashes.eligible` rule without
    any score row, up to ``limit`` targets, and the traces before the first target past them; None for any other
    rule."""
    if not eligible(rule) or conn.scalar(select(S.target_id).where(S.rule_id == rule.id).limit(1)) is not None:
        return None
    # the targets up to the limit and the one after them (where a backfill of the limit stops) in ONE walk of the
    # spans: their count over the window, the last kept by a top-1 sort (the walk, a span lookup a trace, is the cost)
    targets = _routed(rule, window).limit(limit + 1).subquery()
    tail = select(func.count().over(), targets.c.first_seen_at, targets.c.trace_id)
    got = conn.execute(tail.order_by(targets.c.first_seen_at.desc(), targets.c.trace_id.desc()).limit(1)).first()
    n = 0 if got is None else int(got[0])
    cut = (got[1], str(got[2])) if got is not None and n > limit else None
    return _traces_before(conn, rule, window, cut), min(n, limit)


def counted(
    conn: Connection, rule: RuleRecord, revision: int | None, window: Window, limit: int, keep: Callable[[str], bool]
) -> tuple[int, int, int] | None:
    """(traces, targets, already scored) of a backfill of a :func:`~evaluator_host.store.online.case_hashes.hashable`
    rule with ``revision``, up to ``limit`` targets to score (see the module docstring); None for any other rule."""
    if not hashable(rule):
        return None
    same = S.revision == revision if revision is not None else S.revision.is_(None)
    # any row of the rule for the trace: its id, or the id with a suffix ("@r<revision>"); a range the key answers
    of_trace = targets_of(S.target_id, T.trace_id)
    busy = or_(S.state.in_(("queued", "running")), and_(S.state == "done", same))
    # or the row a backfill would write for the revision exists already (not dropped), beside the trace's own
    own = exists().where(S.rule_id == rule.id, S.target_id == T.trace_id, S.state != "dropped")
    again = exists().where(
        S.rule_id == rule.id, S.target_id == T.trace_id + variant("", revision), S.state != "dropped"
    )
    held = or_(exists().where(S.rule_id == rule.id, of_trace, busy), and_(own, again)).label("held")
    n = scored = 0
    cut: tuple[Any, str] | None = None
    with conn.execute(_routed(rule, window).with_only_columns(T.first_seen_at, T.trace_id, held)) as rows:
        for at, trace_id, already in rows:
            if not keep(str(trace_id)):
                continue
            if n - scored >= limit and not already:  # the first target to score past the limit: where it stops
                cut = (at, str(trace_id))
                break
            n, scored = n + 1, scored + bool(already)
    return _traces_before(conn, rule, window, cut), n, scored
