"""Routing: ready traces into the scoring queue (``online_scores``), one transaction a batch.

Contract (docs/online.md, "How it works"; :meth:`~evaluator_host.store.online.scores.ScoreQueue.route` calls
:func:`route`): up to ``limit`` ``ready`` traces are taken and, in ONE transaction, one row is inserted per
(rule, target) the ``decide`` callback names (a trace-level rule: the trace, its target id the trace id; a
span-level rule: each span it names, ``<trace id>/<span id>``) — ``queued``, or ``dropped`` once the backlog
(rows ``queued`` or ``running``, every workspace) is at ``backlog_max`` — and each trace is set ``routed``
(``routed_at``: now). With ``explain``, each rule of the trace's workspace that got no target of it — ``decide``
named none and it joined no session for it, or it is paused — gets an ``online_decisions`` row in the same
transaction: ``explain``'s (decision, reason), or ``dropped`` for a paused rule. With ``sessions``, each routed
trace joins the sessions it names (:func:`~evaluator_host.store.online.sessions.record`). A trace is routed by
one service only: ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, and on either database the ``ready`` → ``routed``
update is conditional, so a trace another router took in between gets no rows here; the (rule, target id)
primary key makes a second row for a pair impossible. Each trace's sessions and targets are decided before
that update, the batch's first write: SQLite's write lock (and the process's: ``store/sqlite_writer.py``) is
held for the writes alone, not for the rules' filters. Portable SQL; blocking: call from a thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, case, func, insert, literal, or_, select, update
from sqlalchemy.engine import Engine

from evaluator_host.observability.tracing import MARKER
from evaluator_host.store import sqlite_bulk
from evaluator_host.store.db import as_utc, utcnow
from evaluator_host.store.online import sessions as online_sessions
from evaluator_host.store.online.refs import SpanRef, TraceRef, keyed, session_keys, target_id
from evaluator_host.store.online.rows import (
    OnlineDecisionRow,
    OnlineRuleRow,
    OnlineScoreRow,
    OnlineSpanRow,
    OnlineTraceRow,
)
from evaluator_host.store.online.rules import RuleRecord, rule_record

__all__ = ["BACKLOG", "Decide", "Explain", "JoinSessions", "Routed", "backlog_of", "route", "spans_of"]

BACKLOG = ("queued", "running")
S = OnlineScoreRow


@dataclass(frozen=True)
class Routed:
    """What one :meth:`ScoreQueue.route` did."""

    traces: int = 0
    queued: int = 0
    dropped: dict[str, int] = field(default_factory=dict)  # rule id -> rows stored dropped
    backlog: int = 0  # rows queued or running after it


Decide = Callable[[TraceRef, Sequence[RuleRecord]], list[tuple[RuleRecord, str | None]]]
Explain = Callable[[TraceRef, RuleRecord], tuple[str, str]]  # a rule decide() gave no target: (decision, reason)
# the sessions a trace joins: (session id, the session-level rules it matched for it)
JoinSessions = Callable[[TraceRef, Sequence[RuleRecord]], list[tuple[str, tuple[str, ...]]]]


def route(
    engine: Engine,
    limit: int,
    backlog_max: int,
    decide: Decide,
    *,
    explain: Explain | None = None,
    sessions: JoinSessions | None = None,
) -> Routed:
    """Route up to ``limit`` ready traces (oldest ready first): see the module docstring. With ``explain``,
    each rule that got no target of a trace says why (``online_decisions``); with ``sessions``, each routed
    trace also joins the sessions it names (:func:`online_sessions.record`)."""
    t = OnlineTraceRow
    with engine.begin() as conn:
        query = select(t.workspace_id, t.trace_id, t.root_span_id, t.last_span_at).where(t.state == "ready")
        query = query.order_by(t.ready_at, t.trace_id).limit(limit)
        if engine.dialect.name == "postgresql":
            query = query.with_for_update(skip_locked=True)
        ready = conn.execute(query).all()
        if not ready:
            return Routed(backlog=backlog_of(conn))
        rules = _rules(conn, {r.workspace_id for r in ready})
        live = {ws: [r for r in rs if r.enabled] for ws, rs in rules.items()}
        bodies = any(r.filter for rs in live.values() for r in rs)
        keys_wanted = session_keys(live) if sessions is not None else ()
        spans = spans_of(conn, ready, bodies=bodies, needles=keys_wanted)
        backlog = backlog_of(conn)
        keys = [(r.workspace_id, r.trace_id) for r in ready]
        now = utcnow()
        quiet_of = {r.id: int((r.target or {}).get("quiet_s") or 300) for rs in live.values() for r in rs}
        decided = []  # each trace's sessions and targets, decided before the write lock is taken (below)
        for ws, trace_id, root, last_span_at in ready:
            last = as_utc(last_span_at)
            ref = TraceRef(ws, trace_id, root, spans.get((ws, trace_id), []), last)
            joins = list(sessions(ref, live.get(ws, []))) if sessions is not None and ref.spans else []
            picks = decide(ref, live[ws]) if rules.get(ws) else []
            decided.append((ref, last, joins, picks))
        took = conn.execute(  # conditional: a trace another router took in between is not ours; the first write
            update(t)
            .where(keyed(t.workspace_id, t.trace_id, keys), t.state == "ready")
            .values(state="routed", routed_at=now)
            .returning(t.workspace_id, t.trace_id)
        )
        ours = {(ws, trace_id) for ws, trace_id in took}
        rows, said, queued, dropped = [], list[dict[str, Any]](), 0, dict[str, int]()
        joined: list[online_sessions.Joined] = []
        for ref, last, joins, picks in decided:
            ws, trace_id = ref.workspace_id, ref.trace_id
            if (ws, trace_id) not in ours:
                continue
            targeted: set[str] = set()  # the rules that got a target of it (a score row, a session joined)
            if joins:
                start = min(s.start_ns for s in ref.spans)
                for sid, rule_ids in joins:
                    quiet = tuple((r, quiet_of.get(r, 300)) for r in rule_ids)
                    joined.append(online_sessions.Joined(ws, sid, trace_id, start, last, quiet))
                    targeted.update(rule_ids)
            if not rules.get(ws):
                continue
            for rule, span_id in picks:
                targeted.add(rule.id)
                state = "queued" if backlog < backlog_max else "dropped"
                if state == "queued":
                    backlog, queued = backlog + 1, queued + 1
                else:
                    dropped[rule.id] = dropped.get(rule.id, 0) + 1
                rows.append(_row(rule, trace_id, span_id, state, now))
            if explain is not None:
                said.extend(_decisions(ref, rules[ws], targeted, explain, now))
        if rows and conn.dialect.name == "sqlite":  # multi-row statements: no GIL hand-over a row
            sqlite_bulk.insert(conn, S.__tablename__, _ROUTED, sqlite_bulk.params(rows, _ROUTED))
        elif rows:
            conn.execute(insert(S), rows)
        if said:
            _insert_decisions(conn, said)
        online_sessions.record(conn, joined, now)
        return Routed(len(ours), queued, dropped, backlog)


def _rules(conn: Connection, workspaces: set[str]) -> dict[str, list[RuleRecord]]:
    """The workspaces' rules not deleted, enabled or paused (a paused rule's decision is ``dropped``)."""
    r = OnlineRuleRow
    query = select(r).where(r.workspace_id.in_(workspaces), r.deleted_at.is_(None))
    out: dict[str, list[RuleRecord]] = {}
    for row in conn.execute(query.order_by(r.created_at, r.id)):
        out.setdefault(row.workspace_id, []).append(rule_record(row))
    return out


def spans_of(
    conn: Connection, ready: Sequence[Any], bodies: bool, needles: Sequence[str] = ()
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
    for ws, trace_id, span_id, name, service, start_ns, body in conn.execute(query).all():  # one fetch
        out.setdefault((ws, trace_id), []).append(SpanRef(span_id, name, service, int(start_ns), body))
    return out


_DECISION_COLUMNS = ("workspace_id", "trace_id", "rule_id", "decision", "reason", "at")
_PG_MARKS = ", ".join(["%s"] * len(_DECISION_COLUMNS))


def _insert_decisions(conn: Connection, said: list[dict[str, Any]]) -> None:
    """``said``'s ``online_decisions`` rows by driver SQL (about one a routed trace: SQLAlchemy's per-row
    parameter processing cost more than the insert); ``at`` as SQLAlchemy binds it on the dialect."""
    table: Any = OnlineDecisionRow.__table__
    bind = table.c.at.type._cached_bind_processor(conn.dialect)
    times: dict[datetime, Any] = {}  # a batch's rows share the routing time
    rows = []
    for d in said:
        at = d["at"]
        if bind is not None and at is not None:
            at = times[at] if at in times else times.setdefault(at, bind(at))
        rows.append((d["workspace_id"], d["trace_id"], d["rule_id"], d["decision"], d["reason"], at))
    if conn.dialect.name == "sqlite":  # multi-row statements: no GIL hand-over a row
        sqlite_bulk.insert(conn, "online_decisions", _DECISION_COLUMNS, rows)
        return
    conn.exec_driver_sql(f"INSERT INTO online_decisions ({', '.join(_DECISION_COLUMNS)}) VALUES ({_PG_MARKS})", rows)


def backlog_of(conn: Connection) -> int:
    return int(conn.scalar(select(func.count()).select_from(S).where(S.state.in_(BACKLOG))) or 0)


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


_ROUTED = ("rule_id", "target_id", "trace_id", "workspace_id", "span_id", "state", "attempts", "enqueued_at",
           "evaluator_id", "revision")  # fmt: skip  # a routed row's columns (_row's keys)


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
