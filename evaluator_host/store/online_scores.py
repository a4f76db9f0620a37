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
  ``UPDATE`` (attempts + 1); rows another service claimed in between are not this one's.
* :meth:`ScoreQueue.finish` / :meth:`ScoreQueue.retry` / :meth:`ScoreQueue.discard` change a row
  only ``WHERE state = 'running' AND claimed_by = me``: a result is written by its claim's holder
  only, once (``done`` is final).
* :meth:`ScoreQueue.release_own` puts back the rows a killed predecessor with the same service id
  held (the data dir lock makes it the only process with that id), so they need not wait out the claim.

Every statement is portable SQL (SQLite and PostgreSQL). Blocking: call from a thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    and_,
    bindparam,
    case,
    func,
    insert,
    literal,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from evaluator_host.observability.tracing import MARKER
from evaluator_host.store import online_sessions
from evaluator_host.store.db import as_utc, utcnow
from evaluator_host.store.online_refs import DEFAULT_KEYS, SpanRef, TraceRef, keyed, session_keys, target_id
from evaluator_host.store.online_rows import (
    OnlineDecisionRow,
    OnlineRuleRow,
    OnlineScoreRow,
    OnlineSpanRow,
    OnlineTraceRow,
)
from evaluator_host.store.online_rules import RuleRecord, rule_record

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


BACKLOG = ("queued", "running")
S = OnlineScoreRow


@dataclass(frozen=True)
class Routed:
    """What one :meth:`ScoreQueue.route` did."""

    traces: int = 0
    queued: int = 0
    dropped: dict[str, int] = field(default_factory=dict)  # rule id -> rows stored dropped
    backlog: int = 0  # rows queued or running after it


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


Decide = Callable[[TraceRef, Sequence[RuleRecord]], list[tuple[RuleRecord, str | None]]]
Explain = Callable[[TraceRef, RuleRecord], tuple[str, str]]  # a rule decide() gave no target: (decision, reason)
# the sessions a trace joins: (session id, the session-level rules it matched for it)
JoinSessions = Callable[[TraceRef, Sequence[RuleRecord]], list[tuple[str, tuple[str, ...]]]]


class ScoreQueue:
    """The queue half of ``online_scores`` in one database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._pg = engine.dialect.name == "postgresql"

    # -- routing -------------------------------------------------------------------------
    def route(
        self,
        limit: int,
        backlog_max: int,
        decide: Decide,
        explain: Explain | None = None,
        sessions: JoinSessions | None = None,
    ) -> Routed:
        """Route up to ``limit`` ready traces (oldest ready first): see the module docstring. With ``explain``,
        each rule that got no target of a trace says why (``online_decisions``); with ``sessions``, each routed
        trace also joins the sessions it names (:func:`online_sessions.record`)."""
        t = OnlineTraceRow
        with self.engine.begin() as conn:
            query = select(t.workspace_id, t.trace_id, t.root_span_id, t.last_span_at).where(t.state == "ready")
            query = query.order_by(t.ready_at, t.trace_id).limit(limit)
            if self._pg:
                query = query.with_for_update(skip_locked=True)
            ready = conn.execute(query).all()
            if not ready:
                return Routed(backlog=self._backlog(conn))
            rules = self._rules(conn, {r.workspace_id for r in ready})
            live = {ws: [r for r in rs if r.enabled] for ws, rs in rules.items()}
            bodies = any(r.filter for rs in live.values() for r in rs)
            keys_wanted = session_keys(live) if sessions is not None else ()
            spans = self._spans(conn, ready, bodies=bodies, needles=keys_wanted)
            backlog = self._backlog(conn)
            keys = [(r.workspace_id, r.trace_id) for r in ready]
            now = utcnow()
            took = conn.execute(  # conditional: a trace another router took in between is not ours
                update(t)
                .where(keyed(t.workspace_id, t.trace_id, keys), t.state == "ready")
                .values(state="routed", routed_at=now)
                .returning(t.workspace_id, t.trace_id)
            )
            ours = {(ws, trace_id) for ws, trace_id in took}
            rows, said, queued, dropped = [], list[dict[str, Any]](), 0, dict[str, int]()
            joined: list[online_sessions.Joined] = []
            quiet_of = {r.id: int((r.target or {}).get("quiet_s") or 300) for rs in live.values() for r in rs}
            for ws, trace_id, root, last_span_at in ready:
                if (ws, trace_id) not in ours:
                    continue
                ref = TraceRef(ws, trace_id, root, spans.get((ws, trace_id), []), as_utc(last_span_at))
                targeted: set[str] = set()  # the rules that got a target of it (a score row, a session joined)
                if sessions is not None and ref.spans:
                    start = min(s.start_ns for s in ref.spans)
                    for sid, rule_ids in sessions(ref, live.get(ws, [])):
                        quiet = tuple((r, quiet_of.get(r, 300)) for r in rule_ids)
                        joined.append(online_sessions.Joined(ws, sid, trace_id, start, as_utc(last_span_at), quiet))
                        targeted.update(rule_ids)
                if not rules.get(ws):
                    continue
                for rule, span_id in decide(ref, live[ws]):
                    targeted.add(rule.id)
                    state = "queued" if backlog < backlog_max else "dropped"
                    if state == "queued":
                        backlog, queued = backlog + 1, queued + 1
                    else:
                        dropped[rule.id] = dropped.get(rule.id, 0) + 1
                    rows.append(_row(rule, trace_id, span_id, state, now))
                if explain is not None:
                    said.extend(_decisions(ref, rules[ws], targeted, explain, now))
            if rows:
                conn.execute(insert(S), rows)
            if said:
                conn.execute(insert(OnlineDecisionRow), said)
            online_sessions.record(conn, joined, now)
            return Routed(len(ours), queued, dropped, backlog)

    def _rules(self, conn: Connection, workspaces: set[str]) -> dict[str, list[RuleRecord]]:
        """The workspaces' rules not deleted, enabled or paused (a paused rule's decision is ``dropped``)."""
        r = OnlineRuleRow
        query = select(r).where(r.workspace_id.in_(workspaces), r.deleted_at.is_(None))
        out: dict[str, list[RuleRecord]] = {}
        for row in conn.execute(query.order_by(r.created_at, r.id)):
            out.setdefault(row.workspace_id, []).append(rule_record(row))
        return out

    def _spans(
        self, conn: Connection, ready: Sequence[Any], bodies: bool, needles: Sequence[str] = ()
    ) -> dict[tuple[str, str], list[SpanRef]]:
        """The spans of ``ready`` traces in start order; without ``bodies`` (no rule filters) only the bodies
        carrying the evaluation marker or one of ``needles`` (session keys) are read (the others ``""``:
        routing needs to know them only)."""
        s = OnlineSpanRow
        keys = [(r.workspace_id, r.trace_id) for r in ready]
        wanted = or_(*(s.body.contains(n, autoescape=True) for n in (MARKER, *needles)))
        body = s.body if bodies else case((wanted, s.body), else_=literal(""))
        query = select(s.workspace_id, s.trace_id, s.span_id, s.name, s.service_name, s.start_ns, body)
        query = query.where(keyed(s.workspace_id, s.trace_id, keys)).order_by(s.start_ns, s.span_id)
        out: dict[tuple[str, str], list[SpanRef]] = {}
        for ws, trace_id, span_id, name, service, start_ns, body in conn.execute(query):
            out.setdefault((ws, trace_id), []).append(SpanRef(span_id, name, service, int(start_ns), body))
        return out

    @staticmethod
    def _backlog(conn: Connection) -> int:
        return int(conn.scalar(select(func.count()).select_from(S).where(S.state.in_(BACKLOG))) or 0)

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
            t, r = OnlineTraceRow, OnlineRuleRow
            got = (
                select(S, t.last_span_at, r)
                .join(t, and_(t.workspace_id == S.workspace_id, t.trace_id == S.trace_id), isouter=True)
                .join(r, r.id == S.rule_id, isouter=True)
                .where(mine, S.state == "running", S.claimed_by == me, S.claimed_until == until)
            )
            return [_claimed(row) for row in Session(bind=conn).execute(got)]

    def finish(self, me: str, results: Sequence[tuple[str, str, dict[str, Any]]]) -> list[bool]:
        """Store results (``(rule id, target id, result columns)``, each with the same columns) on rows
        ``me`` holds, in one transaction (one statement, executed for every row); for each, whether it
        was stored (False: not held by ``me`` any more). When fewer rows changed than given, the ones
        stored are those now ``done`` by ``me`` with this call's ``scored_at``."""
        if not results:
            return []
        at = utcnow()  # each call's own: which rows *this* call stored is exact (see below)
        results = [(r, t, {**v, "scored_at": v.get("scored_at") or at}) for r, t, v in results]
        names = list(results[0][2])
        statement = (
            update(S)
            .where(
                S.rule_id == bindparam("k_rule"),
                S.target_id == bindparam("k_target"),
                S.state == "running",
                S.claimed_by == me,
            )
            .values(state="done", claimed_until=None, **{n: bindparam(f"v_{n}") for n in names})
        )
        params = [{"k_rule": r, "k_target": t, **{f"v_{n}": v[n] for n in names}} for r, t, v in results]
        with self.engine.begin() as conn:
            done = conn.execute(statement, params)
            if done.rowcount == len(results):
                online_sessions.supersede(conn, me, [(r, t) for r, t, _ in results if _replaces(t)])
                return [True] * len(results)
            mine = select(S.rule_id, S.target_id).where(
                keyed(S.rule_id, S.target_id, [(r, t) for r, t, _ in results]),
                S.state == "done",
                S.claimed_by == me,
                S.scored_at == results[0][2].get("scored_at"),
            )
            stored = {tuple(k) for k in conn.execute(mine)}
            online_sessions.supersede(conn, me, [(r, t) for r, t, _ in results if (r, t) in stored and _replaces(t)])
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
            .where(
                S.rule_id == bindparam("k_rule"),
                S.target_id == bindparam("k_target"),
                S.state == "running",
                S.claimed_by == me,
            )
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

    def release_own(self, me: str) -> int:
        """Put back in the queue the rows a previous process of this service held (at start-up)."""
        with self.engine.begin() as conn:
            done = conn.execute(
                update(S)
                .where(S.state == "running", S.claimed_by == me)
                .values(state="queued", claimed_by=None, claimed_until=None)
            )
            return int(done.rowcount)


def _decisions(
    ref: TraceRef, rules: Sequence[RuleRecord], targeted: set[str], explain: Explain, now: datetime
) -> list[dict[str, Any]]:
    """The ``online_decisions`` rows of a routed trace: each rule that got no score row, and why."""
    out = []
    for rule in rules:
        if rule.id in targeted:
            continue
        if rule.enabled:
            decision, reason = explain(ref, rule)
        else:
            decision, reason = "dropped", "the rule was paused when the trace was routed"
        out.append(
            {
                "workspace_id": ref.workspace_id,
                "trace_id": ref.trace_id,
                "rule_id": rule.id,
                "decision": decision,
                "reason": reason,
                "at": now,
            }
        )
    return out


def _replaces(target: str) -> bool:
    """Whether a score of ``target`` may supersede others: a session's (``<id>#<generation>``) or a target
    scored again with another revision (``<target>@r<revision>``); trace and span ids are hex."""
    return "#" in target or "@r" in target


def _row(rule: RuleRecord, trace_id: str, span_id: str | None, state: str, now: datetime) -> dict[str, Any]:
    return {
        "rule_id": rule.id,
        "target_id": target_id(rule, trace_id, span_id),
        "trace_id": trace_id,
        "workspace_id": rule.workspace_id,
        "span_id": span_id,
        "state": state,
        "attempts": 0,
        "enqueued_at": now,
        "evaluator_id": rule.evaluator_id,
        "revision": rule.revision,
    }


def _claimed(row: Any) -> Claimed:
    score = row[0]
    rule = row[2]
    return Claimed(
        rule_id=score.rule_id,
        trace_id=score.trace_id,
        workspace_id=score.workspace_id,
        span_id=score.span_id,
        evaluator_id=score.evaluator_id,
        target_id=score.target_id,
        attempts=score.attempts,
        enqueued_at=as_utc(score.enqueued_at),
        last_span_at=None if row[1] is None else as_utc(row[1]),
        rule=None if rule is None or rule.deleted_at is not None else rule_record(rule),
        session_id=score.session_id,
        generation=score.generation,
        backfill_id=score.backfill_id,
    )
