"""The tables of online evaluation (migration ``0006``): raw spans, assembled traces, rules, scores.

The contract between the parts of ``evaluator_host/online`` is these tables (docs/online.md, "How
it works"):

* ``online_spans`` — every span received, one row per (workspace, trace, span); a span received
  twice keeps its first row. ``body`` is the span's JSON (kind, status, attributes flat by dotted
  key, events, links, resource attributes, scope) in the shape :mod:`evaluator_host.online` writes.
* ``online_traces`` — one row per (workspace, trace): what assembly knows. ``state`` moves
  ``open`` → ``ready`` (root span ended and no span for the quiet period: assembly) → ``routed``
  (a score row made for each matching, sampled rule: the router). A span arriving after ``routed``
  is stored and shown, and never scores the trace again.
* ``online_usage`` — per workspace, its stored spans and their bodies' UTF-8 bytes (what they count
  against its storage quota and its share of the span store), kept with every write and deletion.
* ``online_rules`` — a workspace's rules (soft-deleted, so stored scores keep their rule).
* ``online_scores`` — the durable scoring queue *and* its results: one row per (rule, target), so a
  target is scored at most once per rule whatever restarts (migration ``0013``). ``target_id`` is the
  trace id for a trace-level rule, ``<trace id>/<span id>`` for a span-level one (room for session
  ids). ``state``: ``queued`` → ``running``
  (claimed by one service until ``claimed_until``; an expired claim is claimed again) → ``done``;
  or ``dropped`` (the backlog was full when the trace was routed: counted, never scored).
  ``last_error`` is a retried row's last infrastructure error, ``delayed_by`` the budget that put it
  back in the queue (migration ``0015``).
* ``online_model_calls`` — a rule's calls to its judges: per scoring round of the rule that made any,
  when, how many rows ran and how many connections the egress proxy counted for them (migration
  ``0019_model_call_budget``); what ``model_calls_per_minute`` is measured against, kept 10 minutes.
* ``online_decisions`` — what routing decided for a (rule, trace) that got no score row:
  ``not_matched``, ``sampled_out``, or ``dropped`` (the rule was paused), with its reason (migration
  ``0015``); deleted by the span retention sweep.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, Float, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from evaluator_host.store.db import Base

__all__ = [
    "LABEL_CHARS",
    "OnlineBackfillRow",
    "OnlineDecisionRow",
    "OnlineModelCallsRow",
    "OnlineRuleRow",
    "OnlineScoreRow",
    "OnlineSessionRow",
    "OnlineSessionRuleRow",
    "OnlineSessionTraceRow",
    "OnlineShadowScoreRow",
    "OnlineSpanRow",
    "OnlineTraceRow",
    "OnlineUsageRow",
    "SinkDeliveryRow",
]

_TZ = DateTime(timezone=True)
LABEL_CHARS = 200  # a stored score's label, at most (longer ones are cut)


class OnlineSpanRow(Base):
    """One received span (hex ids); ``body`` is its JSON. Kept for ``online_span_retention_s``.

    A rowid table on SQLite (migration ``0008``): its rows are large, and a ``WITHOUT ROWID`` table
    keeps whole rows in its key's B-tree (an insert cost ~6x as much)."""

    __tablename__ = "online_spans"
    __table_args__ = (Index("ix_online_spans_received_at", "received_at"),)

    workspace_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    trace_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    span_id: Mapped[str] = mapped_column(String(16), primary_key=True)
    parent_span_id: Mapped[str | None] = mapped_column(String(16), nullable=True)
    name: Mapped[str] = mapped_column(Text)
    service_name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    start_ns: Mapped[int] = mapped_column(BigInteger)
    end_ns: Mapped[int] = mapped_column(BigInteger)
    body: Mapped[str] = mapped_column(Text)
    received_at: Mapped[datetime] = mapped_column(_TZ)


class OnlineUsageRow(Base):
    """What one workspace's stored spans add up to (migration ``0012``): how many, and the UTF-8 bytes of
    their bodies — kept in the transactions that store and delete them (``store/online/spans.py``)."""

    __tablename__ = "online_usage"

    workspace_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    spans: Mapped[int] = mapped_column(BigInteger)
    bytes: Mapped[int] = mapped_column(BigInteger)


class OnlineTraceRow(Base):
    """What assembly knows of one trace; ``state`` is ``open``, ``ready`` or ``routed``."""

    __tablename__ = "online_traces"
    __table_args__ = (
        Index("ix_online_traces_state_last", "state", "last_span_at"),
        Index("ix_online_traces_workspace_seen", "workspace_id", "first_seen_at", "trace_id"),  # 0009
        Index("ix_online_traces_state_ready", "state", "ready_at", "trace_id"),  # 0009
    )

    workspace_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    trace_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    service_name: Mapped[str | None] = mapped_column(String(200), nullable=True)  # the root span's
    root_span_id: Mapped[str | None] = mapped_column(String(16), nullable=True)
    root_name: Mapped[str | None] = mapped_column(Text, nullable=True)
    span_count: Mapped[int] = mapped_column(Integer)
    first_seen_at: Mapped[datetime] = mapped_column(_TZ)
    last_span_at: Mapped[datetime] = mapped_column(_TZ)
    root_ended_at: Mapped[datetime | None] = mapped_column(_TZ, nullable=True)  # null: no ended root yet
    state: Mapped[str] = mapped_column(String(12))
    ready_at: Mapped[datetime | None] = mapped_column(_TZ, nullable=True)
    routed_at: Mapped[datetime | None] = mapped_column(_TZ, nullable=True)  # 0015; null: routed before it, or not yet


class OnlineRuleRow(Base):
    """A rule: which traces an evaluator scores online (``revision`` null: the latest at scoring time)."""

    __tablename__ = "online_rules"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    workspace_id: Mapped[str] = mapped_column(String(40), index=True)
    name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    evaluator_id: Mapped[str] = mapped_column(String(40), index=True)
    revision: Mapped[int | None] = mapped_column(Integer, nullable=True)
    filter: Mapped[dict[str, Any]] = mapped_column(JSON)
    sampling_rate: Mapped[float] = mapped_column(Float)
    mapping: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    target: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)  # 0013; null: {"level": "trace"}
    limits: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)  # 0015: budgets; null: none
    sinks: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)  # 0016; null: none (issue 52)
    # 0021_shadow_revisions (issue 53): a revision scored beside the live one (online_shadow_scores); null: none
    candidate_revision: Mapped[int | None] = mapped_column(Integer, nullable=True)
    enabled: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[datetime] = mapped_column(_TZ)
    updated_at: Mapped[datetime] = mapped_column(_TZ)
    deleted_at: Mapped[datetime | None] = mapped_column(_TZ, nullable=True)


def _trace_target(context: Any) -> str:
    """An inserted score row's default ``target_id``: its trace id (a trace-level rule's target)."""
    return str(context.get_current_parameters()["trace_id"])


class OnlineScoreRow(Base):
    """One (rule, target): queued, running, done or dropped; when done, the evaluator's result."""

    __tablename__ = "online_scores"
    __table_args__ = (
        Index("ix_online_scores_state", "state", "claimed_until"),
        Index("ix_online_scores_rule_scored", "rule_id", "scored_at"),
        Index("ix_online_scores_trace", "workspace_id", "trace_id"),
        Index("ix_online_scores_rule_enqueued", "rule_id", "enqueued_at", "target_id"),  # 0009, 0013
        Index("ix_online_scores_state_enqueued", "state", "enqueued_at"),  # 0009
        Index("ix_online_scores_session", "workspace_id", "session_id"),  # 0014
        Index("ix_online_scores_backfill_status", "backfill_id", "state", "status"),  # 0025 (was 0014's without status)
    )

    rule_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    target_id: Mapped[str] = mapped_column(  # 0013: the trace id (the default: a trace-level row), or trace id/span id
        String(200), primary_key=True, default=_trace_target
    )
    trace_id: Mapped[str] = mapped_column(String(32))
    workspace_id: Mapped[str] = mapped_column(String(40))
    span_id: Mapped[str | None] = mapped_column(String(16), nullable=True)  # the evaluated span
    state: Mapped[str] = mapped_column(String(12))
    claimed_by: Mapped[str | None] = mapped_column(String(80), nullable=True)  # a service id
    claimed_until: Mapped[datetime | None] = mapped_column(_TZ, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    enqueued_at: Mapped[datetime] = mapped_column(_TZ)
    scored_at: Mapped[datetime | None] = mapped_column(_TZ, nullable=True)
    evaluator_id: Mapped[str] = mapped_column(String(40))
    revision: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the revision that scored it
    runtime_id: Mapped[str | None] = mapped_column(String(80), nullable=True)
    status: Mapped[str | None] = mapped_column(String(20), nullable=True)  # the result's status
    score: Mapped[float | None] = mapped_column(Float, nullable=True)
    passed: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    label: Mapped[str | None] = mapped_column(String(LABEL_CHARS), nullable=True)
    duration_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    result: Mapped[str | None] = mapped_column(Text, nullable=True)  # the EvaluationResult JSON
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)  # 0015: the last infrastructure error
    delayed_by: Mapped[str | None] = mapped_column(String(40), nullable=True)  # 0015: the budget that deferred it
    session_id: Mapped[str | None] = mapped_column(String(128), nullable=True)  # 0014: a session score's
    generation: Mapped[int | None] = mapped_column(Integer, nullable=True)  # 0014: the session's traces then
    superseded_by: Mapped[str | None] = mapped_column(String(200), nullable=True)  # 0014: null: current
    backfill_id: Mapped[str | None] = mapped_column(String(40), nullable=True)  # 0014: the backfill that queued it


class OnlineShadowScoreRow(Base):
    """A candidate revision's score of a target its rule's live revision scored at the same moment, on the
    same case (issue 53, migration ``0021_shadow_revisions``): one row per (rule, target, candidate revision),
    with the live answer beside it. Its own table: no read of ``online_scores`` (scores, stats, decisions,
    review queues, exports, sinks) ever sees it."""

    __tablename__ = "online_shadow_scores"
    __table_args__ = (Index("ix_online_shadow_scores_rule", "rule_id", "revision", "scored_at"),)

    rule_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    target_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    revision: Mapped[int] = mapped_column(Integer, primary_key=True)  # the candidate's
    workspace_id: Mapped[str] = mapped_column(String(40))
    trace_id: Mapped[str] = mapped_column(String(32))
    span_id: Mapped[str | None] = mapped_column(String(16), nullable=True)
    session_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    evaluator_id: Mapped[str] = mapped_column(String(40))
    status: Mapped[str] = mapped_column(String(20))
    score: Mapped[float | None] = mapped_column(Float, nullable=True)
    passed: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    label: Mapped[str | None] = mapped_column(String(LABEL_CHARS), nullable=True)
    duration_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    result: Mapped[str] = mapped_column(Text)  # the candidate's EvaluationResult JSON
    live_revision: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the live answer, as stored
    live_status: Mapped[str | None] = mapped_column(String(20), nullable=True)
    live_score: Mapped[float | None] = mapped_column(Float, nullable=True)
    live_passed: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    live_label: Mapped[str | None] = mapped_column(String(LABEL_CHARS), nullable=True)
    scored_at: Mapped[datetime] = mapped_column(_TZ)


class OnlineDecisionRow(Base):
    """What routing decided for a (rule, trace) that got no score row (``not_matched``, ``sampled_out``,
    ``dropped`` when paused) and why; ``at`` the routing time (migration ``0015``)."""

    __tablename__ = "online_decisions"
    __table_args__ = (Index("ix_online_decisions_rule_at", "rule_id", "at"), {"sqlite_with_rowid": False})

    workspace_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    trace_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    rule_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    decision: Mapped[str] = mapped_column(String(12))
    reason: Mapped[str] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(_TZ)


class OnlineModelCallsRow(Base):
    """One scoring round's calls of a rule through the egress proxy (migration ``0019_model_call_budget``):
    ``rows`` scored (or refused for their rate) and the ``calls`` they made (``store/online/calls.py``)."""

    __tablename__ = "online_model_calls"
    __table_args__ = (Index("ix_online_model_calls_rule_at", "rule_id", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    rule_id: Mapped[str] = mapped_column(String(40))
    at: Mapped[datetime] = mapped_column(_TZ)
    rows: Mapped[int] = mapped_column(Integer)
    calls: Mapped[int] = mapped_column(Integer)


class SinkDeliveryRow(Base):
    """One score's delivery to one of its rule's sinks (issue 52, migration 0016): recorded once per
    (source, rule, target, sink index), retried until ``delivered`` or ``failed`` (``store/sinks/deliveries.py``).

    ``source`` (0017): ``rule`` — an online score, ``rule_id``/``target_id`` its rule and target; ``job`` — a
    job's row result, ``rule_id`` the job's id and ``target_id`` the row's index, the row's ids in ``trace_id``,
    ``span_id`` and ``session_id`` (``store/jobs/sink_deliveries.py``). The source is part of the key: a job's
    delivery never meets a score's."""

    __tablename__ = "online_sink_deliveries"
    __table_args__ = (Index("ix_online_sink_deliveries_due", "state", "due_at"),)

    source: Mapped[str] = mapped_column(String(8), primary_key=True, default="rule", server_default="rule")
    rule_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    target_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    sink: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)  # index in the rule's sinks
    workspace_id: Mapped[str] = mapped_column(String(40))
    type: Mapped[str] = mapped_column(String(20))
    key: Mapped[str] = mapped_column(String(80))  # the idempotency key sent (Langfuse id, Phoenix identifier)
    state: Mapped[str] = mapped_column(String(12))  # pending | sending | delivered | failed | skipped
    attempts: Mapped[int] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    due_at: Mapped[datetime] = mapped_column(_TZ)
    claimed_by: Mapped[str | None] = mapped_column(String(80), nullable=True)
    claimed_until: Mapped[datetime | None] = mapped_column(_TZ, nullable=True)
    created_at: Mapped[datetime] = mapped_column(_TZ)
    delivered_at: Mapped[datetime | None] = mapped_column(_TZ, nullable=True)
    trace_id: Mapped[str | None] = mapped_column(String(128), nullable=True)  # 0017: a job row's ids
    span_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    session_id: Mapped[str | None] = mapped_column(String(128), nullable=True)


class OnlineSessionRow(Base):
    """A session (migration ``0014``): traces grouped by a session id; ``num_traces`` is its generation."""

    __tablename__ = "online_sessions"
    __table_args__ = (
        Index("ix_online_sessions_workspace_seen", "workspace_id", "first_seen_at", "session_id"),
        Index("ix_online_sessions_last", "last_span_at"),
    )

    workspace_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    session_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    first_seen_at: Mapped[datetime] = mapped_column(_TZ)
    last_span_at: Mapped[datetime] = mapped_column(_TZ)  # the latest last span of its traces, as routed
    num_traces: Mapped[int] = mapped_column(Integer)


class OnlineSessionTraceRow(Base):
    """One trace of a session (``start_ns``: the trace's first span's start, the session's order)."""

    __tablename__ = "online_session_traces"

    workspace_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    session_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    trace_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    start_ns: Mapped[int] = mapped_column(BigInteger)


class OnlineSessionRuleRow(Base):
    """A session-level rule targets a session; ``queued_generation``: the generation last queued (0: none);
    ``ready_at``: when the session is quiet for the rule (its last span + ``quiet_s``; null: nothing new)."""

    __tablename__ = "online_session_rules"
    __table_args__ = (
        Index("ix_online_session_rules_session", "workspace_id", "session_id"),
        Index("ix_online_session_rules_ready", "ready_at"),
    )

    rule_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    session_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    workspace_id: Mapped[str] = mapped_column(String(40))
    queued_generation: Mapped[int] = mapped_column(Integer)
    quiet_s: Mapped[int] = mapped_column(Integer)
    ready_at: Mapped[datetime | None] = mapped_column(_TZ, nullable=True)


class OnlineBackfillRow(Base):
    """A backfill (migration ``0014``): a rule's stored traces in ``[since, until)`` scored on demand;
    ``status`` ``planning`` (pages of traces being queued from the cursor), ``planned`` or ``cancelled``."""

    __tablename__ = "online_backfills"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    rule_id: Mapped[str] = mapped_column(String(40), index=True)
    workspace_id: Mapped[str] = mapped_column(String(40))
    since: Mapped[datetime | None] = mapped_column(_TZ, nullable=True)
    until: Mapped[datetime | None] = mapped_column(_TZ, nullable=True)
    max_targets: Mapped[int] = mapped_column(Integer)
    revision: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the revision a target is skipped for
    status: Mapped[str] = mapped_column(String(12))
    cursor_at: Mapped[datetime | None] = mapped_column(_TZ, nullable=True)  # the last trace planned (first seen)
    cursor_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    total: Mapped[int] = mapped_column(Integer)  # targets to score (the estimate, then what was queued)
    queued: Mapped[int] = mapped_column(Integer)  # rows queued so far
    skipped: Mapped[int] = mapped_column(Integer)  # targets already scored with the revision
    cached: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # 0025: of queued, from the cache
    claimed_by: Mapped[str | None] = mapped_column(String(80), nullable=True)
    claimed_until: Mapped[datetime | None] = mapped_column(_TZ, nullable=True)
    created_at: Mapped[datetime] = mapped_column(_TZ)
    updated_at: Mapped[datetime] = mapped_column(_TZ)
