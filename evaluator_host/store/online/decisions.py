"""What ``GET /v1/traces/{id}`` and a rule's stats read to say why each (rule, target) was or wasn't scored
(issue 51; the decisions themselves are derived in :mod:`evaluator_host.online.deciding.decisions`).

Contract:

* :meth:`DecisionStore.facts` — in one connection: the trace row's times, its ``online_decisions``
  rows, its ``online_scores`` rows (with ``last_error``, ``delayed_by`` and the claim), and the
  workspace's rules — those not deleted, and deleted ones that left a row of this trace.
* :meth:`DecisionStore.counts` — per bucket of a rule's decision time: ``not_matched``,
  ``sampled_out`` and ``dropped`` (paused) by ``online_decisions.at``; ``dropped`` score rows (backlog
  full, rule deleted) by ``enqueued_at``; ``scored`` (status ok) and ``failed`` (any other) by
  ``scored_at``. :meth:`DecisionStore.pending` — the rule's rows waiting now: ``queued``, ``running``,
  ``retrying`` (back in the queue after an infrastructure error), ``delayed`` (back in the queue
  by a budget, its resume time ahead).
* :meth:`DecisionStore.sweep` — deletes decisions made before the span retention cutoff (one
  statement per rule, on the (rule_id, at) index): they live no longer than the spans they explain.

Blocking: call from a thread. Portable SQL (SQLite and PostgreSQL).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Integer, and_, case, cast, delete, func, literal, or_, select
from sqlalchemy.engine import Engine
from sqlalchemy.sql.elements import ColumnElement

from evaluator_host.store.db import as_utc, utcnow
from evaluator_host.store.online.refs import waiting_of
from evaluator_host.store.online.rows import OnlineDecisionRow, OnlineRuleRow, OnlineScoreRow, OnlineTraceRow
from evaluator_host.store.online.rules import RuleRecord, rule_record

__all__ = ["DecisionStore", "TraceFacts"]

D, S, T, R = OnlineDecisionRow, OnlineScoreRow, OnlineTraceRow, OnlineRuleRow


@dataclass
class TraceFacts:
    """What the decisions of one trace are derived from (times in UTC)."""

    state: str
    last_span_at: datetime
    root_ended_at: datetime | None
    ready_at: datetime | None
    routed_at: datetime | None
    decided: dict[str, tuple[str, str, datetime]] = field(default_factory=dict)  # rule -> (decision, reason, at)
    scores: list[dict[str, Any]] = field(default_factory=list)
    rules: list[RuleRecord] = field(default_factory=list)  # creation order


def _t(value: Any) -> datetime | None:
    return None if value is None else as_utc(value)


class DecisionStore:
    """Reads and retention of the decisions' tables in one database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._pg = engine.dialect.name == "postgresql"

    def facts(self, workspace_id: str, trace_id: str) -> TraceFacts | None:
        """See the module docstring; None when the trace row does not exist."""
        with self.engine.connect() as conn:
            head = conn.execute(
                select(T.state, T.last_span_at, T.root_ended_at, T.ready_at, T.routed_at).where(
                    T.workspace_id == workspace_id, T.trace_id == trace_id
                )
            ).one_or_none()
            if head is None:
                return None
            facts = TraceFacts(head[0], as_utc(head[1]), _t(head[2]), _t(head[3]), _t(head[4]))
            for rule_id, decision, reason, at in conn.execute(
                select(D.rule_id, D.decision, D.reason, D.at).where(
                    D.workspace_id == workspace_id, D.trace_id == trace_id
                )
            ):
                facts.decided[rule_id] = (decision, reason, as_utc(at))
            query = select(S).where(S.workspace_id == workspace_id, S.trace_id == trace_id)
            for row in conn.execute(query.order_by(S.enqueued_at, S.rule_id, S.target_id)):
                facts.scores.append(
                    {
                        "rule_id": row.rule_id,
                        "span_id": row.span_id,
                        "state": row.state,
                        "status": row.status,
                        "score": row.score,
                        "passed": row.passed,
                        "label": row.label,
                        "result": row.result,
                        "attempts": row.attempts or 0,
                        "enqueued_at": as_utc(row.enqueued_at),
                        "scored_at": _t(row.scored_at),
                        "claimed_until": _t(row.claimed_until),
                        "last_error": row.last_error,
                        "delayed_by": row.delayed_by,
                    }
                )
            seen = set(facts.decided) | {s["rule_id"] for s in facts.scores}
            rules = select(R).where(R.workspace_id == workspace_id, or_(R.deleted_at.is_(None), R.id.in_(seen)))
            facts.rules = [rule_record(r) for r in conn.execute(rules.order_by(R.created_at, R.id))]
        return facts

    def _epoch(self, column: Any) -> ColumnElement[Any]:
        if self._pg:
            return func.extract("epoch", column)
        return (func.julianday(column) - literal(2440587.5)) * literal(86400.0)

    def _index(self, column: Any, since: datetime, bucket_s: int) -> ColumnElement[Any]:
        offset = (self._epoch(column) - literal(since.timestamp())) / literal(float(bucket_s))
        return (func.floor(offset) if self._pg else cast(offset, Integer)).label("bucket")

    def counts(self, rule_id: str, since: datetime, until: datetime, bucket_s: int) -> dict[int, dict[str, int]]:
        """Per bucket index (from ``since``): decisions -> count (see the module docstring)."""
        out: dict[int, dict[str, int]] = {}

        def add(rows: Any) -> None:
            for i, decision, n in rows:
                per = out.setdefault(int(i), {})
                per[decision] = per.get(decision, 0) + int(n)

        with self.engine.connect() as conn:
            i = self._index(D.at, since, bucket_s)
            where = and_(D.rule_id == rule_id, D.at >= since, D.at < until)
            add(conn.execute(select(i, D.decision, func.count()).where(where).group_by(i, D.decision)))
            i = self._index(S.enqueued_at, since, bucket_s)
            where = and_(S.rule_id == rule_id, S.state == "dropped", S.enqueued_at >= since, S.enqueued_at < until)
            add(conn.execute(select(i, literal("dropped"), func.count()).where(where).group_by(i)))
            i = self._index(S.scored_at, since, bucket_s)
            kind = case((S.status == "ok", literal("scored")), else_=literal("failed")).label("kind")
            where = and_(S.rule_id == rule_id, S.state == "done", S.scored_at >= since, S.scored_at < until)
            add(conn.execute(select(i, kind, func.count()).where(where).group_by(i, kind)))
        return out

    def pending(self, rule_id: str) -> dict[str, int]:
        """The rule's rows waiting now: queued, running, retrying, delayed."""
        now = utcnow()
        ahead = and_(S.claimed_until.is_not(None), S.claimed_until > now)
        kind = case(
            (S.state == "running", literal("running")),
            (and_(S.delayed_by.is_not(None), ahead), literal("delayed")),
            (S.last_error.is_not(None), literal("retrying")),
            else_=literal("queued"),
        ).label("kind")
        query = select(kind, func.count()).where(waiting_of(rule_id))
        out = dict.fromkeys(("queued", "running", "retrying", "delayed"), 0)
        with self.engine.connect() as conn:
            for name, n in conn.execute(query.group_by(kind)):
                out[str(name)] = int(n)
        return out

    def sweep(self, cutoff: datetime) -> int:
        """Delete decisions made before ``cutoff``; how many."""
        with self.engine.begin() as conn:
            rule_ids = [r for (r,) in conn.execute(select(R.id))]  # rules are soft-deleted: every one
            return sum(
                int(conn.execute(delete(D).where(D.rule_id == r, D.at < cutoff)).rowcount or 0) for r in rule_ids
            )
