"""The durable scoring queue (``online_scores``): route ready traces into it, claim, store results.

Contract (docs/online.md, "How it works"):

* :meth:`ScoreQueue.route` takes up to ``limit`` ``ready`` traces and, in ONE transaction, inserts
  one row per (rule, target) the ``decide`` callback names (a trace-level rule: the trace, its
  target id the trace id; a span-level rule: each span it names, ``<trace id>/<span id>``) —
  ``queued``, or ``dropped`` once the backlog (rows ``queued`` or ``running``, every workspace) is
  at ``backlog_max`` — and sets each
  trace ``routed`` (``routed_at``: now). With an ``explain`` callback, each rule of the trace's workspace
  that got no row — ``decide`` named no target of it, or it is paused — gets an ``online_decisions`` row
  in the same transaction: ``explain``'s (decision, reason), or ``dropped`` for a paused rule.
  A trace is routed by one service only: ``FOR UPDATE SKIP LOCKED`` on PostgreSQL
  (concurrent routers take different traces), and on either database the ``ready`` → ``routed``
  update is conditional, so a trace another router took in between gets no rows here. The
  (rule, target id) primary key makes a second row for a pair impossible. Rows are named by
  ``(rule id, target id)`` everywhere below.
* :meth:`ScoreQueue.claim` takes up to ``n`` rows ``queued`` (past any retry back-off) or ``running``
  with an expired claim (their service died), for ``claim_s`` seconds, in one conditional
  ``UPDATE`` (attempts + 1); rows another service claimed in between are not this one's. The rows held
  (with their traces' and rules' columns) are read once that update is committed, so SQLite's write lock is
  held for the update alone: they are this claim's (``claimed_by`` and ``claimed_until`` its own) until
  the claim expires.
* :meth:`ScoreQueue.finish` / :meth:`ScoreQueue.retry` / :meth:`ScoreQueue.discard` change a row
  only ``WHERE state = 'running' AND claimed_by = me``: a result is written by its claim's holder
  only, once (``done`` is final).
* :meth:`ScoreQueue.release_own` puts back the rows a killed predecessor with the same service id
  held (the data dir lock makes it the only process with that id), so they need not wait out the claim.

Every statement is portable SQL (SQLite and PostgreSQL). Blocking: call from a thread.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    and_,
    bindparam,
    func,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.engine import Engine

from evaluator_host.store import sqlite_bulk
from evaluator_host.store.db import EvaluatorRow, as_utc, utcnow
from evaluator_host.store.online import sessions as online_sessions
from evaluator_host.store.online.refs import DEFAULT_KEYS, SpanRef, TraceRef, keyed, session_keys, target_id
from evaluator_host.store.online.routing import BACKLOG, Decide, Explain, JoinSessions, Routed, backlog_of, route
from evaluator_host.store.online.rows import (
    OnlineBackfillRow,
    OnlineRuleRow,
    OnlineScoreRow,
    OnlineTraceRow,
)
from evaluator_host.store.online.rules import RuleRecord, rule_record
from evaluator_host.store.review import fill as review_fill

__all__ = [
    "BACKLOG",
    "DEFAULT_KEYS",
    "Claimed",
    "JoinSessions",
    "Routed",
    "ScoreQueue",
    "SpanRef",
    "TraceRef",
    "keyed",
    "session_keys",
    "target_id",
]


S = OnlineScoreRow


@dataclass(frozen=True)
class Claimed:
    """One row this service now holds, with its rule (None: deleted since) and its trace's last span time."""

    rule_id: str
    trace_id: str
    workspace_id: str
    span_id: str | None
    evaluator_id: str
    target_id: str
    attempts: int
    enqueued_at: datetime
    last_span_at: datetime | None
    rule: RuleRecord | None
    session_id: str | None = None  # a session score's session and generation
    generation: int | None = None
    backfill_id: str | None = None  # the backfill that queued it
    revision: int | None = None  # the revision it runs: its rule's pinned one, else its evaluator's latest then


class ScoreQueue:
    """The queue half of ``online_scores`` in one database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._pg = engine.dialect.name == "postgresql"

    # -- routing (store/online/routing.py) ---------------------------------------------------
    def route(
        self,
        limit: int,
        backlog_max: int,
        decide: Decide,
        *,
        explain: Explain | None = None,
        sessions: JoinSessions | None = None,
    ) -> Routed:
        """:func:`~evaluator_host.store.online.routing.route` on this queue's database."""
        return route(self.engine, limit, backlog_max, decide, explain=explain, sessions=sessions)

    @staticmethod
    def _backlog(conn: Connection) -> int:
        return backlog_of(conn)

    def counts(self) -> dict[str, int]:
        """Rows per state (``queued``, ``running``, ``dropped``; ``done`` is not counted: it only grows)."""
        with self.engine.connect() as conn:
            query = select(S.state, func.count()).where(S.state.in_((*BACKLOG, "dropped"))).group_by(S.state)
            found = {state: int(n) for state, n in conn.execute(query)}
        return {state: found.get(state, 0) for state in (*BACKLOG, "dropped")}

    # -- scoring -------------------------------------------------------------------------
    def claim(self, me: str, n: int, claim_s: float) -> list[Claimed]:
        """Hold up to ``n`` claimable rows for ``claim_s`` seconds (oldest first): see the module docstring."""
        now = utcnow()
        until = now + timedelta(seconds=claim_s)
        claimable = or_(
            and_(S.state == "queued", or_(S.claimed_until.is_(None), S.claimed_until <= now)),
            and_(S.state == "running", S.claimed_until <= now),
        )
        with self.engine.begin() as conn:
            if self._pg:
                query = select(S.rule_id, S.target_id).where(claimable).order_by(S.enqueued_at).limit(n)
                query = query.with_for_update(skip_locked=True)
            else:  # each half in index order, n at most: not every queued row read and sorted per claim
                queued = and_(S.state == "queued", or_(S.claimed_until.is_(None), S.claimed_until <= now))
                halves = [
                    select(S.rule_id, S.target_id, S.enqueued_at).where(cond).order_by(S.enqueued_at).limit(n)
                    for cond in (queued, and_(S.state == "running", S.claimed_until <= now))
                ]
                both = union_all(*(h.subquery().select() for h in halves)).subquery()
                query = select(both.c.rule_id, both.c.target_id).order_by(both.c.enqueued_at).limit(n)
            keys = [(str(r), str(t)) for r, t in conn.execute(query)]
            if not keys:
                return []
            mine = keyed(S.rule_id, S.target_id, keys)
            conn.execute(
                update(S)
                .where(mine, claimable)
                .values(state="running", claimed_by=me, claimed_until=until, attempts=S.attempts + 1)
            )
        with self.engine.connect() as conn:  # committed: the rows held are read without the write lock
            t = OnlineTraceRow
            got = conn.execute(
                select(*_CLAIMED, t.last_span_at)
                .join(t, and_(t.workspace_id == S.workspace_id, t.trace_id == S.trace_id), isouter=True)
                .where(mine, S.state == "running", S.claimed_by == me, S.claimed_until == until)
                .order_by(S.enqueued_at)
            ).all()
            rules = _rules(conn, {row.rule_id for row in got})  # each rule read once, not once per row
            return [_claimed(row, *rules.get(row.rule_id, (None, None))) for row in got]

    def finish(
        self,
        me: str,
        results: Sequence[tuple[str, str, dict[str, Any]]],
        cached: Mapping[tuple[str, str], str] | None = None,
    ) -> list[bool]:
        """:meth:`_finish`, then the scores stored go into their rules' review queues (``store/review/fill.py``,
        issue 53: its own transaction, never raising). ``cached``: (rule id, target id) → backfill id of the rows
        the result cache answered — counted in their backfill's ``cached`` with the results, once stored."""
        stored = self._finish(me, results, cached or {})
        review_fill.admit_scores(self.engine, [(r, t) for (r, t, _), ok in zip(results, stored, strict=True) if ok])
        return stored

    def _finish(
        self, me: str, results: Sequence[tuple[str, str, dict[str, Any]]], cached: Mapping[tuple[str, str], str]
    ) -> list[bool]:
        """Store results (``(rule id, target id, result columns)``, each with the same columns) on rows
        ``me`` holds, in one transaction (on SQLite multi-row statements, elsewhere one statement executed for
        every row); for each, whether it was stored (False: not held by ``me`` any more). When fewer rows
        changed than given, the ones stored are those now ``done`` by ``me`` with this call's ``scored_at``."""
        if not results:
            return []
        at = utcnow()  # each call's own: which rows *this* call stored is exact (see below)
        results = [(r, t, {**v, "scored_at": v.get("scored_at") or at}) for r, t, v in results]
        names = list(results[0][2])
        with self.engine.begin() as conn:
            if conn.dialect.name == "sqlite":  # multi-row statements: no GIL hand-over a row (store/sqlite_bulk.py)
                once: dict[tuple[str, str], dict[str, Any]] = {}
                for r, t, v in results:
                    once.setdefault((r, t), v)  # a key twice: its first stored, as one statement a row did
                values = ({"k_rule": r, "k_target": t, **v} for (r, t), v in once.items())
                rows = sqlite_bulk.params(values, ["k_rule", "k_target", *names])
                count = sqlite_bulk.update(conn, S.__tablename__, _KEYS, names, rows, _DONE, _HELD_BY, (me,))
            else:
                statement = (
                    update(S)
                    .where(*_held_row(me))
                    .values(state="done", claimed_until=None, **{n: bindparam(f"v_{n}") for n in names})
                )
                params = [{"k_rule": r, "k_target": t, **{f"v_{n}": v[n] for n in names}} for r, t, v in results]
                count = conn.execute(statement, params).rowcount
            if count == len(results):
                online_sessions.supersede(conn, me, [(r, t) for r, t, _ in results if _replaces(t)])
                _count_cached(conn, cached, set(cached))
                return [True] * len(results)
            mine = select(S.rule_id, S.target_id).where(
                keyed(S.rule_id, S.target_id, [(r, t) for r, t, _ in results]),
                S.state == "done",
                S.claimed_by == me,
                S.scored_at == results[0][2].get("scored_at"),
            )
            stored = {tuple(k) for k in conn.execute(mine)}
            online_sessions.supersede(conn, me, [(r, t) for r, t, _ in results if (r, t) in stored and _replaces(t)])
            _count_cached(conn, cached, stored)
        return [(r, t) in stored for r, t, _ in results]

    def retry(self, me: str, keys: Sequence[tuple[str, str]], after_s: float, error: str | None = None) -> int:
        """Put rows ``me`` holds back in the queue, claimable again in ``after_s`` seconds; ``error`` (the
        infrastructure error that made them fail, at most 2,000 characters) is kept as ``last_error``."""
        values = {
            "state": "queued",
            "claimed_by": None,
            "claimed_until": utcnow() + timedelta(seconds=after_s),
            "last_error": None if error is None else error[:2000],
            "delayed_by": None,
        }
        return self._held(me, keys, values)

    def defer(
        self, me: str, keys: Sequence[tuple[str, str]], after_s: Sequence[float], by: str = "max_evaluations_per_s"
    ) -> int:
        """Put rows ``me`` holds back in the queue, each claimable again in its ``after_s`` seconds (same
        order), their claim not counted as an attempt (a budget — ``by``, kept as ``delayed_by``: the
        workspace's evaluation rate by default — paces them: delayed, never failed). One transaction;
        how many rows went back."""
        if not keys:
            return 0
        now = utcnow()
        statement = (
            update(S)
            .where(*_held_row(me))
            .values(
                state="queued",
                claimed_by=None,
                claimed_until=bindparam("v_until"),
                attempts=S.attempts - 1,
                delayed_by=by,
            )
        )
        params = [
            {"k_rule": r, "k_target": t, "v_until": now + timedelta(seconds=after)}
            for (r, t), after in zip(keys, after_s, strict=True)
        ]
        with self.engine.begin() as conn:
            return int(conn.execute(statement, params).rowcount)

    def discard(self, me: str, keys: Sequence[tuple[str, str]], status: str) -> int:
        """Store rows ``me`` holds as ``dropped`` with ``status`` (their rule was deleted meanwhile)."""
        return self._held(me, keys, {"state": "dropped", "status": status, "claimed_until": None})

    def _held(self, me: str, keys: Sequence[tuple[str, str]], values: dict[str, Any]) -> int:
        if not keys:
            return 0
        with self.engine.begin() as conn:
            done = conn.execute(
                update(S)
                .where(keyed(S.rule_id, S.target_id, keys), S.state == "running", S.claimed_by == me)
                .values(**values)
            )
            return int(done.rowcount)

    def give_back(self, me: str, keys: Sequence[tuple[str, str]]) -> int:
        """Put rows ``me`` holds back in the queue, claimable at once, their claim not counted as an attempt (a
        claim took more than its round runs: ``online/scoring/sizing.py``); how many went back."""
        values = {"state": "queued", "claimed_by": None, "claimed_until": None, "attempts": S.attempts - 1}
        return self._held(me, keys, values)

    def release_own(self, me: str) -> int:
        """Put back in the queue the rows a previous process of this service held (at start-up)."""
        with self.engine.begin() as conn:
            done = conn.execute(
                update(S)
                .where(S.state == "running", S.claimed_by == me)
                .values(state="queued", claimed_by=None, claimed_until=None)
            )
            return int(done.rowcount)


def _held_row(me: str) -> tuple[Any, ...]:
    """The conditions of an executemany's row ``(k_rule, k_target)`` that ``me`` still holds."""
    return (S.rule_id == bindparam("k_rule"), S.target_id == bindparam("k_target"), S.state == "running",
            S.claimed_by == me)  # fmt: skip


def _replaces(target: str) -> bool:
    """Whether a score of ``target`` may supersede others: a session's (``<id>#<generation>``) or a target
    scored again with another revision (``<target>@r<revision>``); trace and span ids are hex."""
    return "#" in target or "@r" in target


# SQLite's store of a round's results (sqlite_bulk.update): matched on the key, on rows still held by the service
_KEYS = ("rule_id", "target_id")
_DONE = "state = 'done', claimed_until = NULL"
_HELD_BY = "online_scores.state = 'running' AND online_scores.claimed_by = ?"

# the columns of a claimed row (Core: an ORM entity per row cost a tenth of the scorer's CPU, issue 55 §2)
_CLAIMED = (
    S.rule_id,
    S.trace_id,
    S.workspace_id,
    S.span_id,
    S.evaluator_id,
    S.target_id,
    S.attempts,
    S.enqueued_at,
    S.session_id,
    S.generation,
    S.backfill_id,
)


def _rules(conn: Connection, ids: Collection[str]) -> dict[str, tuple[RuleRecord, int | None]]:
    """The live rules of ``ids`` (a deleted or missing one is absent), each with the revision its rows run: its
    pinned one, else its evaluator's latest (one statement)."""
    if not ids:
        return {}
    r, e = OnlineRuleRow, EvaluatorRow
    query = select(r, e.latest_revision).outerjoin(e, e.id == r.evaluator_id)
    found = conn.execute(query.where(r.id.in_(sorted(ids)), r.deleted_at.is_(None))).all()
    return {row.id: (rule_record(row), row.latest_revision if row.revision is None else row.revision) for row in found}


def _claimed(row: Any, rule: RuleRecord | None, revision: int | None) -> Claimed:
    return Claimed(
        rule_id=row.rule_id,
        trace_id=row.trace_id,
        workspace_id=row.workspace_id,
        span_id=row.span_id,
        evaluator_id=row.evaluator_id,
        target_id=row.target_id,
        attempts=row.attempts,
        enqueued_at=as_utc(row.enqueued_at),
        last_span_at=None if row.last_span_at is None else as_utc(row.last_span_at),
        rule=rule,
        session_id=row.session_id,
        generation=row.generation,
        backfill_id=row.backfill_id,
        revision=revision,
    )


def _count_cached(conn: Connection, cached: Mapping[tuple[str, str], str], stored: Collection[Any]) -> None:
    """Add the stored rows the result cache answered to their backfills' ``cached`` (issue 50)."""
    per: dict[str, int] = {}
    for key, backfill_id in cached.items():
        if key in stored:
            per[backfill_id] = per.get(backfill_id, 0) + 1
    for backfill_id, n in per.items():
        conn.execute(
            update(OnlineBackfillRow)
            .where(OnlineBackfillRow.id == backfill_id)
            .values(cached=OnlineBackfillRow.cached + n)
        )
