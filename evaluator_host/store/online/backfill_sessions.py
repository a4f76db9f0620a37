"""A session-level rule's backfill (issue 50): the sessions stored in the window are its targets.

Contract (docs/online.md, "Backfill"), as :func:`~evaluator_host.store.online.backfills.count` is for traces:

* The page is the workspace's next ``n`` sessions (``online_sessions``) first seen in the window, oldest first
  (cursor: first seen, session id). A session is a *target* of the rule when one of its traces, read as routing
  reads it, joins it for the rule (``joins``: routing's :func:`~evaluator_host.online.deciding.router.join_sessions` —
  the session id under the rule's ``session_key``, its filter, its sampling per (rule, session)).
* A target's id is the session's current generation, ``<session id>#<traces>``, as live scoring names it; it is
  *already scored* when the (rule, session) has a row queued or running, or a row of that generation done with
  the backfill's revision; scored with another revision, the new row is ``<session id>#<traces>@r<revision>``
  (its score supersedes the generation's earlier ones). The row reads the session (``session_id``,
  ``generation``; ``trace_id``: its latest trace) as live session scoring does.

Portable SQL. Blocking: call from a thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, or_, select

from evaluator_host.store.db import as_utc, utcnow
from evaluator_host.store.online import sessions as online_sessions
from evaluator_host.store.online.refs import TraceRef, keyed
from evaluator_host.store.online.rows import OnlineScoreRow, OnlineSessionRow, OnlineTraceRow
from evaluator_host.store.online.rules import RuleRecord
from evaluator_host.store.online.sessions import session_target

__all__ = ["Joins", "count_sessions"]

S, SS, T = OnlineScoreRow, OnlineSessionRow, OnlineTraceRow
Joins = Callable[[TraceRef, Sequence[RuleRecord]], list[tuple[str, tuple[str, ...]]]]
SpansOf = Callable[[Connection, Sequence[Any]], dict[tuple[str, str], Any]]
MAX_MEMBERS = 10_000  # a session's traces read to decide whether it is a target (its first ones)


def count_sessions(
    conn: Connection, rule: RuleRecord, revision: int | None, window: tuple[datetime | None, datetime | None],
    after: tuple[datetime, str] | None, n: int, room: int, joins: Joins, spans_of: SpansOf, backfill_id: str | None,
    strict: bool, out: Any,
) -> Any:  # fmt: skip
    """Fill ``out`` (a :class:`~evaluator_host.store.online.backfills.Counted`: ``traces`` counts sessions here)
    with the page's targets (see the module docstring); whole sessions while they fit in ``room``."""
    since, until = window
    query = select(SS.session_id, SS.num_traces, SS.first_seen_at).where(SS.workspace_id == rule.workspace_id)
    if since is not None:
        query = query.where(SS.first_seen_at >= since)
    if until is not None:
        query = query.where(SS.first_seen_at < until)
    if after is not None:
        at, last = after
        query = query.where(or_(SS.first_seen_at > at, and_(SS.first_seen_at == at, SS.session_id > last)))
    page = conn.execute(query.order_by(SS.first_seen_at, SS.session_id).limit(n)).all()
    if not page:
        return out
    ws = rule.workspace_id
    listed = online_sessions.members(conn, [(ws, str(p.session_id)) for p in page], MAX_MEMBERS, latest=False)
    members = {str(p.session_id): listed.get((ws, str(p.session_id)), ([], 0))[0] for p in page}
    keys = {(ws, t) for ts in members.values() for t in ts}
    of_traces = select(T.workspace_id, T.trace_id, T.root_span_id).where(keyed(T.workspace_id, T.trace_id, keys))
    heads: Sequence[Any] = conn.execute(of_traces).all() if keys else []
    roots: dict[str, str | None] = {str(h.trace_id): h.root_span_id for h in heads}
    spans = spans_of(conn, heads)
    family: dict[tuple[str, int], list[tuple[str, str, int | None]]] = {}
    busy: set[str] = set()  # sessions with a row queued or running (any generation): being scored
    # the page's sessions' rows of every rule, by the (workspace, session) index, the rule's kept here: with the rule
    # in the statement SQLite read every row of the rule by its ``scored_at`` index, a page after a page
    held = select(S.rule_id, S.target_id, S.state, S.revision, S.session_id, S.generation).where(
        S.workspace_id == ws, S.session_id.in_([p.session_id for p in page])
    )
    for rule_id, target, state, rev, of_session, gen in conn.execute(held):
        if rule_id != rule.id:
            continue
        family.setdefault((str(of_session), int(gen or 0)), []).append((str(target), str(state), rev))
        if state in ("queued", "running"):
            busy.add(str(of_session))
    now = utcnow()
    for sid, generation, first_seen in page:
        traces = [t for t in members[sid] if t in roots]
        targeted = any(
            s == sid and rule.id in ids
            for t in traces
            for s, ids in joins(TraceRef(ws, t, roots[t], spans.get((ws, t), [])), [rule])
        )
        row: dict[str, Any] | None = None
        requeue: str | None = None
        if targeted:
            base = session_target(sid, int(generation))
            rows = family.get((sid, int(generation)), [])
            scored = sid in busy or any(s == "done" and r == revision for _, s, r in rows)
            states = {t: s for t, s, _ in rows}
            wanted = base if states.get(base, "dropped") == "dropped" else f"{base}@r{revision}"
            found = states.get(wanted)
            if scored or (found is not None and found != "dropped"):
                pass
            elif found == "dropped":
                requeue = wanted
            else:
                row = {
                    "rule_id": rule.id, "target_id": wanted, "trace_id": traces[-1] if traces else "",
                    "workspace_id": ws, "span_id": None, "state": "queued", "attempts": 0, "enqueued_at": now,
                    "evaluator_id": rule.evaluator_id, "revision": revision, "backfill_id": backfill_id,
                    "session_id": sid, "generation": int(generation),
                }  # fmt: skip
        if (row is not None or requeue is not None) and out.queued + 1 > room and (out.traces or strict):
            out.cut = True
            return out
        out.traces += 1
        out.last = (as_utc(first_seen), str(sid))
        if targeted:
            out.targets += 1
            if row is not None:
                out.rows.append(row)
            elif requeue is not None:
                out.requeue.append(requeue)
            else:
                out.already_scored += 1
    return out
