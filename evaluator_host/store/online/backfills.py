"""Backfills in the store (migration ``0014``): a rule's stored traces scored on demand.

Contract (docs/online.md, "Backfill"):

* The *targets* of a page of traces are what routing would queue for them (:data:`Decide`: sampling
  included; trace and span levels). A target is *already scored* when its (rule, target) has a row
  queued or running, or done with the backfill's revision; a target scored before with another revision
  gets a second row, target id ``<target id>@r<revision>`` (the first stays; its score is superseded once
  the new one is stored: :func:`~evaluator_host.store.online.sessions.supersede`). A row of the wanted id
  that a cancelled backfill left ``dropped`` is queued again.
* :meth:`BackfillStore.plan_page` queues one page of a backfill in ONE transaction with the move of its
  cursor (the last trace planned, by first-seen time and id): a SIGKILL mid-page leaves neither, so the
  next planner starts at the same page, and the queue's key makes a second row for a target impossible
  whatever happens. A planner holds the backfill by a claim (``claimed_by``/``claimed_until``, a
  conditional update) so two services never plan the same backfill at once.
* :meth:`BackfillStore.cancel` drops the backfill's rows still ``queued`` (status ``cancelled``); rows
  running finish.

Portable SQL. Blocking: call from a thread.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, exists, func, or_, select, update
from sqlalchemy.engine import Engine

from evaluator_host.errors import NotFoundError
from evaluator_host.store.db import as_utc, utcnow
from evaluator_host.store.online import backfill_failures
from evaluator_host.store.online.backfill_sessions import Joins, count_sessions
from evaluator_host.store.online.refs import TraceRef, keyed
from evaluator_host.store.online.rows import OnlineBackfillRow, OnlineScoreRow, OnlineTraceRow
from evaluator_host.store.online.rules import RuleRecord

__all__ = [
    "Backfill",
    "BackfillStore",
    "Counted",
    "Decide",
    "Joins",
    "SpansOf",
    "advance",
    "count",
    "page_room",
    "variant",
]

S, T, B = OnlineScoreRow, OnlineTraceRow, OnlineBackfillRow
Decide = Callable[[TraceRef, Sequence[RuleRecord]], list[tuple[RuleRecord, str | None]]]
SpansOf = Callable[[Connection, Sequence[Any]], dict[tuple[str, str], Any]]


def variant(base: str, revision: int | None) -> str:
    """The target id of a target scored again with ``revision``."""
    return f"{base}@r{revision}"


def _base(target_id: str) -> str:
    return target_id.split("@r", 1)[0]


@dataclass(frozen=True)
class Backfill:
    """A backfill's row."""

    id: str
    rule_id: str
    workspace_id: str
    since: datetime | None
    until: datetime | None
    max_targets: int
    revision: int | None
    status: str
    total: int
    queued: int
    skipped: int
    created_at: datetime
    cached: int = 0  # of queued, answered from the result cache (0025)


@dataclass
class Counted:
    """What a page holds for a rule: traces (planned whole), targets, those already scored, rows to queue
    (new ones, and ids of dropped ones to queue again), the last trace planned, and whether ``room`` cut it."""

    traces: int = 0
    targets: int = 0
    already_scored: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)
    requeue: list[str] = field(default_factory=list)
    last: tuple[datetime, str] | None = None
    cut: bool = False
    span_counts: dict[str, int] = field(default_factory=dict)  # trace id → its span_count, read before its spans
    first_seen: dict[str, datetime] = field(default_factory=dict)  # … its first_seen_at (case_hashes.py: generation)

    @property
    def queued(self) -> int:
        return len(self.rows) + len(self.requeue)


def _record(row: Any) -> Backfill:
    return Backfill(
        id=row.id,
        rule_id=row.rule_id,
        workspace_id=row.workspace_id,
        since=None if row.since is None else as_utc(row.since),
        until=None if row.until is None else as_utc(row.until),
        max_targets=int(row.max_targets),
        revision=row.revision,
        status=row.status,
        total=int(row.total),
        queued=int(row.queued),
        skipped=int(row.skipped),
        created_at=as_utc(row.created_at),
        cached=int(row.cached or 0),
    )


def count(
    conn: Connection,
    rule: RuleRecord,
    revision: int | None,
    window: tuple[datetime | None, datetime | None],
    after: tuple[datetime, str] | None,
    traces: int,
    room: int,
    decide: Decide,
    spans_of: SpansOf,
    backfill_id: str | None = None,
    strict: bool = True,
    joins: Joins | None = None,
    own: bool = False,
) -> Counted:
    """The next ``traces`` stored traces of the rule's workspace in ``window`` (first seen, oldest first;
    not ``open``) after ``after``: their targets, the already scored, and rows to queue — whole traces while
    they fit in ``room``; a first trace that does not fit is cut to ``room`` when ``strict`` (the backfill's
    limit), else taken whole (the backlog's room: a soft bound). A session-level rule's page is of sessions
    (:func:`~evaluator_host.store.online.backfill_sessions.count_sessions`, with routing's ``joins``). ``own``:
    the traces the backfill's own rows already answer (:func:`~evaluator_host.store.online.case_hashes.resolve_cached`,
    trace level) are not read (neither targets nor skipped: they were counted when answered)."""
    if rule.level == "session":
        if joins is None:
            raise ValueError("a session-level rule's backfill needs joins")
        out: Counted = count_sessions(
            conn, rule, revision, window, after, traces, room, joins, spans_of, backfill_id, strict, Counted()
        )
        return out
    since, until = window
    query = select(T.workspace_id, T.trace_id, T.root_span_id, T.first_seen_at, T.span_count).where(
        T.workspace_id == rule.workspace_id, T.state != "open"
    )
    if own and backfill_id is not None:
        query = query.where(
            ~exists().where(S.rule_id == rule.id, S.target_id == T.trace_id, S.backfill_id == backfill_id)
        )
    if since is not None:
        query = query.where(T.first_seen_at >= since)
    if until is not None:
        query = query.where(T.first_seen_at < until)
    if after is not None:
        at, last = after
        query = query.where(or_(T.first_seen_at > at, and_(T.first_seen_at == at, T.trace_id > last)))
    page = conn.execute(query.order_by(T.first_seen_at, T.trace_id).limit(traces)).all()
    out = Counted()
    if not page:
        return out
    spans = spans_of(conn, page)
    family: dict[str, list[tuple[str, str, int | None]]] = {}
    held = select(S.target_id, S.state, S.revision).where(
        S.rule_id == rule.id, keyed(S.workspace_id, S.trace_id, [(rule.workspace_id, p.trace_id) for p in page])
    )
    for target, state, rev in conn.execute(held):
        family.setdefault(_base(target), []).append((target, state, rev))
    now = utcnow()
    for ws, trace_id, root, first_seen, span_count in page:
        out.span_counts[trace_id] = int(span_count or 0)
        out.first_seen[trace_id] = first_seen
        ref = TraceRef(ws, trace_id, root, spans.get((ws, trace_id), []))
        mine = Counted()
        for _, span_id in decide(ref, [rule]):
            base = f"{trace_id}/{span_id}" if rule.level == "span" and span_id is not None else trace_id
            rows = family.get(base, [])
            mine.targets += 1
            scored = any(s in ("queued", "running") or (s == "done" and r == revision) for _, s, r in rows)
            states = {t: s for t, s, _ in rows}
            # the target's own row when it never was scored (a cancelled backfill's), else a row for the revision
            wanted = base if states.get(base, "dropped") == "dropped" else variant(base, revision)
            found = states.get(wanted)
            if scored or (found is not None and found != "dropped"):
                mine.already_scored += 1
            elif found == "dropped":
                mine.requeue.append(wanted)
            else:
                mine.rows.append(
                    {
                        "rule_id": rule.id, "target_id": wanted, "trace_id": trace_id, "workspace_id": ws,
                        "span_id": span_id, "state": "queued", "attempts": 0, "enqueued_at": now,
                        "evaluator_id": rule.evaluator_id, "revision": revision, "backfill_id": backfill_id,
                    }
                )  # fmt: skip
        if out.queued + mine.queued > room:
            if out.traces or not strict:  # planned next time (a first trace over a soft bound goes whole)
                out.cut = out.traces > 0 or mine.queued > 0
                if out.traces:
                    return out
            else:  # the limit: the first trace's targets up to it, and planning ends
                keep = max(room - out.queued, 0)
                mine.requeue = mine.requeue[:keep]
                mine.rows = mine.rows[: max(keep - len(mine.requeue), 0)]
                out.cut = True
        out.traces += 1
        out.targets += mine.targets
        out.already_scored += mine.already_scored
        out.rows += mine.rows
        out.requeue += mine.requeue
        out.last = (as_utc(first_seen), str(trace_id))
        if out.cut:
            return out
    return out


class BackfillStore:
    """The ``online_backfills`` table and the rows backfills queue."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create(
        self, rule: RuleRecord, window: tuple[datetime | None, datetime | None], max_targets: int, revision: int | None,
        total: int, skipped: int,
    ) -> Backfill:  # fmt: skip
        """A new backfill, ``planning``."""
        now = utcnow()
        row = {
            "id": f"bf_{uuid.uuid4().hex[:20]}", "rule_id": rule.id, "workspace_id": rule.workspace_id,
            "since": window[0], "until": window[1], "max_targets": max_targets, "revision": revision,
            "status": "planning", "cursor_at": None, "cursor_id": None, "total": total, "queued": 0,
            "skipped": skipped, "cached": 0, "claimed_by": None, "claimed_until": None, "created_at": now,
            "updated_at": now,
        }  # fmt: skip
        with self.engine.begin() as conn:
            conn.execute(B.__table__.insert(), [row])  # type: ignore[attr-defined]
        return self.get(rule.workspace_id, rule.id, str(row["id"]))

    def get(self, workspace_id: str, rule_id: str, backfill_id: str) -> Backfill:
        """One backfill of the rule (``NotFoundError`` otherwise)."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(B).where(B.id == backfill_id, B.rule_id == rule_id, B.workspace_id == workspace_id)
            ).one_or_none()
        if row is None:
            raise NotFoundError(f"backfill {backfill_id!r} does not exist")
        return _record(row)

    def progress(self, backfill_id: str) -> dict[str, int]:
        """Its rows per state."""
        with self.engine.connect() as conn:
            query = select(S.state, func.count()).where(S.backfill_id == backfill_id).group_by(S.state)
            return {str(state): int(n) for state, n in conn.execute(query)}

    def failures(self, backfill_id: str) -> tuple[int, str | None]:
        """Its rows scored with a status other than ``ok``, and one's result: :func:`.backfill_failures.failures`."""
        return backfill_failures.failures(self.engine, backfill_id)

    def failure(self, backfill_id: str, sample: int = 1000) -> str | None:
        """Why it failed when none of its targets was scored ``ok``: :func:`.backfill_failures.failure`."""
        return backfill_failures.failure(self.engine, backfill_id, sample)

    def cancel(self, workspace_id: str, rule_id: str, backfill_id: str) -> Backfill:
        """Stop planning and drop its rows still queued (status ``cancelled``)."""
        self.get(workspace_id, rule_id, backfill_id)
        with self.engine.begin() as conn:
            conn.execute(
                update(B).where(B.id == backfill_id).values(status="cancelled", claimed_by=None, updated_at=utcnow())
            )
            conn.execute(
                update(S)
                .where(S.backfill_id == backfill_id, S.state == "queued")
                .values(state="dropped", status="cancelled", claimed_until=None)
            )
        return self.get(workspace_id, rule_id, backfill_id)

    def claim(self, me: str, claim_s: float) -> Backfill | None:
        """Hold one backfill still ``planning`` (unclaimed, its claim expired, or ``me``'s) for ``claim_s`` seconds."""
        now = utcnow()
        free = and_(B.status == "planning", or_(B.claimed_until.is_(None), B.claimed_until <= now, B.claimed_by == me))
        with self.engine.begin() as conn:
            found = conn.execute(select(B.id).where(free).order_by(B.created_at).limit(1)).scalar()
            if found is None:
                return None
            took = conn.execute(
                update(B)
                .where(B.id == found, free)
                .values(claimed_by=me, claimed_until=now + timedelta(seconds=claim_s))
            )
            if not took.rowcount:
                return None
            row = conn.execute(select(B).where(B.id == found)).one()
        return _record(row)

    def release_own(self, me: str) -> None:
        """Let go of the backfills a previous process of this service held (at start-up)."""
        with self.engine.begin() as conn:
            conn.execute(update(B).where(B.claimed_by == me).values(claimed_by=None, claimed_until=None))

    def plan_page(
        self, me: str, backfill: Backfill, rule: RuleRecord, traces: int, decide: Decide, spans_of: SpansOf,
        backlog_room: int, claim_s: float = 120.0, joins: Joins | None = None,
    ) -> bool:  # fmt: skip
        """Queue the backfill's next page (see the module docstring); whether more is to plan. Held by ``me``
        only (a claim lost meanwhile plans nothing)."""
        with self.engine.begin() as conn:
            # the claim is pinned first, by a write: the transaction holds the row (PostgreSQL) or the database
            # (SQLite) from here, so a claim that expired before it plans nothing, and one that expires during
            # it cannot be taken over until this page is committed — two holders never plan the same page
            mine = update(B).where(B.id == backfill.id, B.claimed_by == me, B.status == "planning")
            if not conn.execute(mine.values(updated_at=utcnow())).rowcount:
                return False
            row = conn.execute(select(B).where(B.id == backfill.id)).one()
            after = None if row.cursor_at is None else (as_utc(row.cursor_at), str(row.cursor_id))
            room, strict = page_room(row, backlog_room)
            window = (backfill.since, backfill.until)
            got = count(
                conn, rule, backfill.revision, window, after, traces, room, decide, spans_of, backfill.id, strict,
                joins, own=bool(row.cached),
            )  # fmt: skip
            if got.rows:
                conn.execute(S.__table__.insert(), got.rows)  # type: ignore[attr-defined]
            if got.requeue:
                conn.execute(
                    update(S)
                    .where(S.rule_id == rule.id, S.target_id.in_(got.requeue), S.state == "dropped")
                    .values(state="queued", status=None, attempts=0, backfill_id=backfill.id, claimed_until=None)
                )
            return not advance(conn, me, backfill, row, got, traces, claim_s, got.queued, 0)


def page_room(row: Any, backlog_room: int, pending: int = 0) -> tuple[int, bool]:
    """The targets a backfill's next page may queue (``pending``: those of pages read ahead and not stored yet),
    and whether that bound is its limit (strict) rather than the backlog's room (soft: see :func:`count`)."""
    left = max(int(row.max_targets) - int(row.queued) - pending, 0)
    return (left, True) if left <= backlog_room else (max(backlog_room, 0), False)


def advance(
    conn: Connection, me: str, backfill: Backfill, row: Any, got: Counted, traces: int, claim_s: float, queued: int,
    taken: int, cached: int = 0,
) -> bool:  # fmt: skip
    """Move a page's cursor and counters (``queued``: the rows it added or queued again; ``taken``: new targets
    another writer scored first, counted skipped; ``cached``: of the added, those answered from the result cache)
    in the page's transaction; whether planning ended."""
    total = int(row.queued) + queued
    values: dict[str, Any] = {
        "queued": total, "skipped": int(row.skipped) + got.already_scored + taken, "updated_at": utcnow(),
        "cached": int(row.cached or 0) + cached,
    }  # fmt: skip
    if got.last is not None:
        values.update(cursor_at=got.last[0], cursor_id=got.last[1])
    ended = total >= row.max_targets or (not got.cut and got.traces < traces)
    if ended:
        values.update(status="planned", total=total, claimed_by=None, claimed_until=None)
    else:
        values.update(total=max(int(row.total), total), claimed_until=utcnow() + timedelta(seconds=claim_s))
    conn.execute(update(B).where(B.id == backfill.id, B.claimed_by == me).values(**values))
    return ended
