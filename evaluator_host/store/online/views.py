"""What the online API reads of ``online_scores`` and ``online_traces``: pages of scores, the latest
traces, per-bucket statistics computed in SQL. Every read names its workspace (the rule's is checked
by the caller: :class:`~evaluator_host.store.online.rules.RuleStore`). Blocking: call from a thread.

Statistics: current scores (not superseded by a later generation of their session) with a result
(``done``) whose ``scored_at`` is in ``[since, until)`` are grouped
by ``floor((scored_at - since) / bucket_s)`` in the database (an epoch expression per dialect), one
query for the counts and means, one for the label counts; the caller bounds the number of buckets.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Float, Integer, and_, case, cast, func, literal, or_, select
from sqlalchemy.engine import Engine
from sqlalchemy.sql.elements import ColumnElement

from evaluator_host.store.db import as_utc
from evaluator_host.store.online.refs import waiting_of
from evaluator_host.store.online.rows import OnlineScoreRow, OnlineTraceRow

__all__ = ["BucketRow", "ScoreView", "TraceView", "score_fields"]

S, T = OnlineScoreRow, OnlineTraceRow


def score_fields(row: Any) -> dict[str, Any]:
    """The API fields of a score row (``result`` parsed)."""
    return {
        "rule_id": row.rule_id,
        "trace_id": row.trace_id,
        "span_id": row.span_id,
        "target_id": row.target_id,
        "state": row.state,
        "status": row.status,
        "score": row.score,
        "passed": row.passed,
        "label": row.label,
        "evaluator_id": row.evaluator_id,
        "revision": row.revision,
        "runtime_id": row.runtime_id,
        "attempts": row.attempts or 0,
        "enqueued_at": as_utc(row.enqueued_at),
        "scored_at": None if row.scored_at is None else as_utc(row.scored_at),
        "duration_ms": row.duration_ms,
        "result": None if row.result is None else json.loads(row.result),
        "session_id": row.session_id,
        "generation": row.generation,
        "current": row.superseded_by is None,
        "superseded_by": row.superseded_by,
    }


@dataclass
class BucketRow:
    """One bucket's figures as the database computed them."""

    index: int
    count: int = 0
    ok: int = 0
    mean_score: float | None = None
    pass_rate: float | None = None
    labels: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class TraceView:
    """A trace row's fields for the live feed."""

    trace_id: str
    state: str
    service_name: str | None
    root_name: str | None
    span_count: int
    first_seen_at: datetime
    last_span_at: datetime


class ScoreView:
    """Reads of the online tables for the API."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._pg = engine.dialect.name == "postgresql"

    def of_rule(
        self,
        rule_id: str,
        *,
        since: datetime | None,
        until: datetime | None,
        limit: int | None,
        before: tuple[datetime, str] | None,
    ) -> list[dict[str, Any]]:
        """The rule's scores, enqueued newest first (ties: greater target id first: the trace id at trace
        level, ``<trace id>/<span id>`` at span level), in ``[since, until)``."""
        query = select(S).where(S.rule_id == rule_id)
        if since is not None:
            query = query.where(S.enqueued_at >= since)
        if until is not None:
            query = query.where(S.enqueued_at < until)
        if before is not None:
            at, last = before
            query = query.where(or_(S.enqueued_at < at, and_(S.enqueued_at == at, S.target_id < last)))
        query = query.order_by(S.enqueued_at.desc(), S.target_id.desc())
        if limit is not None:
            query = query.limit(limit)
        with self.engine.connect() as conn:
            return [score_fields(r) for r in conn.execute(query)]

    def of_traces(self, workspace_id: str, trace_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """The scores of each of ``trace_ids`` (of ``workspace_id``), by rule creation order of their rows."""
        out: dict[str, list[dict[str, Any]]] = {t: [] for t in trace_ids}
        if not trace_ids:
            return out
        query = select(S).where(S.workspace_id == workspace_id, S.trace_id.in_(list(trace_ids)))
        with self.engine.connect() as conn:
            for row in conn.execute(query.order_by(S.enqueued_at, S.rule_id, S.target_id)):
                out[row.trace_id].append(score_fields(row))
        return out

    def traces(self, workspace_id: str, *, limit: int | None, before: tuple[datetime, str] | None) -> list[TraceView]:
        """The workspace's traces, first seen newest first (ties: greater trace id first)."""
        query = select(
            T.trace_id, T.state, T.service_name, T.root_name, T.span_count, T.first_seen_at, T.last_span_at
        ).where(T.workspace_id == workspace_id)
        if before is not None:
            at, last = before
            query = query.where(or_(T.first_seen_at < at, and_(T.first_seen_at == at, T.trace_id < last)))
        query = query.order_by(T.first_seen_at.desc(), T.trace_id.desc())
        if limit is not None:
            query = query.limit(limit)
        with self.engine.connect() as conn:
            return [
                TraceView(r[0], r[1], r[2], r[3], int(r[4]), as_utc(r[5]), as_utc(r[6])) for r in conn.execute(query)
            ]

    def _epoch(self, column: Any) -> ColumnElement[Any]:
        if self._pg:
            return func.extract("epoch", column)
        return (func.julianday(column) - literal(2440587.5)) * literal(86400.0)

    def stats(self, rule_id: str, since: datetime, until: datetime, bucket_s: int) -> list[BucketRow]:
        """Per bucket (index from ``since``): count, ok, mean score, pass rate, label counts."""
        offset = (self._epoch(S.scored_at) - literal(since.timestamp())) / literal(float(bucket_s))
        index = (func.floor(offset) if self._pg else cast(offset, Integer)).label("bucket")
        where = and_(
            S.rule_id == rule_id,
            S.state == "done",
            S.superseded_by.is_(None),  # current scores only (a session's earlier generations are not)
            S.scored_at >= since,
            S.scored_at < until,
        )
        passed = case((S.passed.is_(True), 1.0), (S.passed.is_(False), 0.0), else_=None)
        main = (
            select(
                index,
                func.count(),
                func.sum(case((S.status == "ok", 1), else_=0)),
                func.avg(cast(S.score, Float)),
                func.avg(passed),
            )
            .where(where)
            .group_by(index)
        )
        labels = select(index, S.label, func.count()).where(where, S.label.is_not(None)).group_by(index, S.label)
        out: dict[int, BucketRow] = {}
        with self.engine.connect() as conn:
            for i, n, ok, mean, rate in conn.execute(main):
                k = int(i)
                out[k] = BucketRow(k, int(n), int(ok or 0), _num(mean), _num(rate))
            for i, label, n in conn.execute(labels):
                out.setdefault(int(i), BucketRow(int(i))).labels[str(label)] = int(n)
        return sorted(out.values(), key=lambda b: b.index)

    def counted(self, rule_id: str, since: datetime, until: datetime) -> tuple[int, int]:
        """The rule's rows waiting or running now, and those dropped with ``enqueued_at`` in the range."""
        waiting = select(func.count()).select_from(S).where(waiting_of(rule_id))
        dropped = select(func.count()).where(
            S.rule_id == rule_id, S.state == "dropped", S.enqueued_at >= since, S.enqueued_at < until
        )
        with self.engine.connect() as conn:
            return int(conn.scalar(waiting) or 0), int(conn.scalar(dropped) or 0)

    def of_session(self, workspace_id: str, session_id: str) -> list[dict[str, Any]]:
        """The scores of a session (every rule, every generation), enqueued oldest first."""
        query = select(S).where(S.workspace_id == workspace_id, S.session_id == session_id)
        with self.engine.connect() as conn:
            return [score_fields(r) for r in conn.execute(query.order_by(S.enqueued_at, S.rule_id, S.target_id))]

    def trace_row(self, workspace_id: str, trace_id: str) -> TraceView | None:
        """One trace row of the workspace, or None."""
        query = select(
            T.trace_id, T.state, T.service_name, T.root_name, T.span_count, T.first_seen_at, T.last_span_at
        ).where(T.workspace_id == workspace_id, T.trace_id == trace_id)
        with self.engine.connect() as conn:
            r = conn.execute(query).one_or_none()
        return None if r is None else TraceView(r[0], r[1], r[2], r[3], int(r[4]), as_utc(r[5]), as_utc(r[6]))


def _num(value: Any) -> float | None:
    return None if value is None else float(value)
