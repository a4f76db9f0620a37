"""The online API's shapes (``/v1/online-rules``, ``/v1/traces``): rules, scores, traces, stats.

Contract: a rule's ``filter`` matches a *span* (docs/online.md, "How it works"): every condition
given must hold of one span — its resource's ``service.name``, its name, each attribute condition
(``equals`` a JSON scalar, or ``exists`` true/false) — and a trace matches when one of its spans
does. An empty filter matches every trace (the root span is evaluated). ``mapping`` names trace
paths for the case's ``inputs`` / ``outputs`` (checked by :func:`evaluator_host.online.reading.mapping.check_path`);
a field it leaves out comes from the evaluated span. A rule's ``target`` says what one score is of:
``{"level": "trace"}`` (the default), ``{"level": "span"}`` (every matching span, each scored once) or
``{"level": "session", "session_key"?, "quiet_s"?}`` (a conversation's traces together, once quiet, again
when it grows). Nothing here touches the database.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from evaluator_host.definitions.models import MAX_REVISION
from evaluator_host.online.backfill.models import Backfill, BackfillCreate, BackfillDryRun
from evaluator_host.online.deciding.decision_models import Decision, RuleLimits
from evaluator_host.online.reading import mapping
from evaluator_host.shared.bounds import Int64
from evaluator_host.sinks.models import MAX_SINKS, Sink, SinkState

__all__ = [
    "AttributeCondition",
    "Decision",
    "Backfill",
    "BackfillCreate",
    "BackfillDryRun",
    "Rule",
    "RuleCreate",
    "RuleLimits",
    "RuleFilter",
    "RuleList",
    "RuleMapping",
    "RulePatch",
    "RuleStats",
    "RuleTarget",
    "RuleTest",
    "RuleTestAnswer",
    "RuleTestResult",
    "Score",
    "ScoreList",
    "SessionDetail",
    "SessionList",
    "SessionSummary",
    "StatsBucket",
    "TraceDetail",
    "TraceList",
    "TraceSummary",
]

Scalar = str | Int64 | float | bool  # (an integer past 64 bits is a float, as OTLP has no such integer)


class AttributeCondition(BaseModel):
    """One attribute of a span: ``equals`` a value, or ``exists`` (true: present; false: absent)."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(min_length=1, max_length=256, description="The flat dotted key, e.g. `deployment.environment`.")
    equals: Scalar | None = Field(None, description="The attribute's value must be this (a JSON scalar).")
    exists: bool | None = Field(None, description="true: the span has the attribute; false: it has not.")

    @model_validator(mode="after")
    def _one(self) -> AttributeCondition:
        if (self.equals is None) == (self.exists is None):
            raise ValueError("an attribute condition gives exactly one of 'equals' and 'exists'")
        return self


class RuleFilter(BaseModel):
    """Which spans a rule matches (all conditions given must hold of one span); empty: every trace."""

    model_config = ConfigDict(extra="forbid")

    service_name: str | None = Field(None, max_length=200, description="The span's resource `service.name`.")
    span_name: str | None = Field(None, max_length=1000, description="The span's name.")
    attributes: list[AttributeCondition] = Field(default_factory=list, max_length=20)

    @property
    def empty(self) -> bool:
        """No condition: the rule scores every trace, on its root span."""
        return self.service_name is None and self.span_name is None and not self.attributes


class RuleMapping(BaseModel):
    """Trace paths the case's fields come from (docs/online.md, "Mapping"); a field left out comes from
    the evaluated span (``ag.data``, else ``gen_ai.*``, else OpenInference)."""

    model_config = ConfigDict(extra="forbid")

    inputs: str | None = Field(None, max_length=1000, description="e.g. `span.attributes.ag.data.inputs`.")
    outputs: str | None = Field(None, max_length=1000, description="e.g. `root.attributes.ag.data.outputs`.")

    @field_validator("inputs", "outputs")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        if value is not None:
            mapping.check_path(value)
        return value


DEFAULT_QUIET_S = 300  # a session is ready when no span of it came for this long (as peers)
MAX_QUIET_S = 7 * 86400


class RuleTarget(BaseModel):
    """What one score of a rule is of (issue 50): ``trace`` (one per trace, on its evaluated span),
    ``span`` (one per span that matches the filter; the evaluator gets that span's inputs/outputs and
    the whole trace as ``trace``) or ``session`` (one per session and generation: the traces that share
    a session id, scored together once no span of them came for ``quiet_s``; docs/online.md, "Session
    level"). ``session_key`` and ``quiet_s`` belong to the session level only (422 elsewhere)."""

    model_config = ConfigDict(extra="forbid")

    level: Literal["trace", "span", "session"] = Field("trace", description="trace (default) | span | session.")
    session_key: str | None = Field(
        None,
        exclude_if=lambda v: v is None,  # a stored target shows the fields it has
        min_length=1,
        max_length=256,
        description="session level: the attribute naming a trace's session (on any span, or its resource); "
        "default: the first of session.id, gen_ai.conversation.id, langfuse.session.id.",
    )
    quiet_s: int | None = Field(
        None,
        exclude_if=lambda v: v is None,
        ge=1,
        le=MAX_QUIET_S,
        description=f"session level: a session is scored once no span of it came for this long (default "
        f"{DEFAULT_QUIET_S} s); new traces after that score it again.",
    )

    @model_validator(mode="after")
    def _session_fields(self) -> RuleTarget:
        if self.level != "session":
            given = [n for n in ("session_key", "quiet_s") if getattr(self, n) is not None]
            if given:
                raise ValueError(f"{' and '.join(given)} belong to target level 'session' only")
        elif self.quiet_s is None:
            self.quiet_s = DEFAULT_QUIET_S
        return self


class _RuleFields(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, max_length=200, description="A name to show (optional).")
    revision: int | None = Field(
        None, ge=1, le=MAX_REVISION, description="The evaluator revision that scores; null: the latest."
    )
    filter: RuleFilter = Field(default_factory=RuleFilter)
    sampling_rate: float = Field(1.0, ge=0.0, le=1.0, description="The share of matching traces scored (0..1).")
    mapping: RuleMapping | None = None
    enabled: bool = Field(True, description="false: paused (traces finished meanwhile are not scored).")
    sinks: list[Sink] = Field(
        default_factory=list,
        max_length=MAX_SINKS,
        description="Where its scores are also written: Phoenix span annotations, Langfuse scores (docs/online.md).",
    )
    limits: RuleLimits | None = Field(None, description="Budgets; over one, work is delayed (never dropped).")
    candidate_revision: int | None = Field(
        None, ge=1, le=MAX_REVISION, description="Scored beside the live revision, stored apart (shadow); null: none."
    )


class RuleCreate(_RuleFields):
    """``POST /v1/online-rules``; the smallest is ``{"evaluator_id": "..."}`` (every trace, latest revision)."""

    evaluator_id: str = Field(min_length=1, max_length=40)
    target: RuleTarget = Field(default_factory=RuleTarget, description="What one score is of (set at creation).")


MAX_TEST_LIMIT = 100


class RuleTest(RuleCreate):
    """``POST /v1/online-rules/test``: a rule's body plus ``limit`` — scored now on the latest matching
    stored targets, nothing stored."""

    limit: int = Field(20, ge=1, le=MAX_TEST_LIMIT, description="At most this many targets (default 20, max 100).")


class RuleTestResult(BaseModel):
    """One target scored by ``POST /v1/online-rules/test``."""

    trace_id: str
    span_id: str | None = None
    session_id: str | None = None
    status: str
    score: float | None = None
    passed: bool | None = None
    label: str | None = None
    reason: str | None = None
    inputs: Any = None
    outputs: Any = None
    duration_ms: float | None = None


class RuleTestAnswer(BaseModel):
    """``POST /v1/online-rules/test``'s answer: ``matched`` 0 is no success (``message`` says why)."""

    results: list[RuleTestResult]
    matched: int = Field(description="Targets that matched the rule's filter (scored: the first `limit`).")
    scanned_traces: int = Field(description="Stored traces looked at, newest first.")
    message: str | None = Field(None, description="Set when nothing matched: what was looked at.")


class RulePatch(BaseModel):
    """``PATCH /v1/online-rules/{id}``: the fields given change (``revision``/``mapping`` null: latest/none)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, max_length=200)
    revision: int | None = Field(None, ge=1, le=MAX_REVISION)
    filter: RuleFilter | None = None
    sampling_rate: float | None = Field(None, ge=0.0, le=1.0)
    mapping: RuleMapping | None = None
    enabled: bool | None = None
    limits: RuleLimits | None = None
    sinks: list[Sink] | None = Field(None, max_length=MAX_SINKS, description="Replaced ([]: none).")
    candidate_revision: int | None = Field(
        None, ge=1, le=MAX_REVISION, description="A revision scored beside the live one (shadow); null: none."
    )

    @model_validator(mode="after")
    def _not_null(self) -> RulePatch:
        for name in ("filter", "sampling_rate", "enabled"):
            if name in self.model_fields_set and getattr(self, name) is None:
                raise ValueError(f"{name} cannot be null")
        return self


class Rule(_RuleFields):
    """A stored rule."""

    id: str
    evaluator_id: str
    target: RuleTarget = Field(default_factory=RuleTarget)
    created_at: datetime
    updated_at: datetime


class RuleList(BaseModel):
    """A page of rules, newest first."""

    data: list[Rule]
    count: int
    next_cursor: str | None = None


class Score(BaseModel):
    """One (rule, target): queued, running, done or dropped; when done, what the evaluator said."""

    rule_id: str
    trace_id: str
    span_id: str | None = Field(None, description="The evaluated span (at span level: the scored span).")
    target_id: str | None = Field(None, description="What was scored: the trace id, or `<trace id>/<span id>`.")
    state: str = Field(description="queued | running | done | dropped")
    status: str | None = Field(None, description="The result's status (ok, error, timeout, ...) once done.")
    score: float | None = None
    passed: bool | None = None
    label: str | None = None
    evaluator_id: str
    revision: int | None = Field(None, description="The revision that scored it (the rule's, or the latest then).")
    runtime_id: str | None = None
    attempts: int = 0
    enqueued_at: datetime
    scored_at: datetime | None = None
    duration_ms: float | None = None
    result: dict[str, Any] | None = Field(None, description="The full EvaluationResult (as /v1/evaluate answers).")
    sinks: list[SinkState] = Field(
        default_factory=list, description="Its delivery to each sink of the rule (none until it is done)."
    )
    session_id: str | None = Field(None, description="At session level: the scored session.")
    generation: int | None = Field(None, description="At session level: the session's traces when it was scored.")
    current: bool = Field(True, description="false: a later score of the same (rule, session) superseded it.")
    superseded_by: str | None = Field(None, description="The target id of the score that superseded this one.")


class ScoreList(BaseModel):
    """A page of a rule's scores, newest first."""

    data: list[Score]
    count: int
    next_cursor: str | None = None


class TraceSummary(BaseModel):
    """A trace as the live feed lists it."""

    trace_id: str
    state: str = Field(description="open | ready | routed")
    service_name: str | None = None
    root_name: str | None = None
    span_count: int
    first_seen_at: datetime
    last_span_at: datetime
    scores: list[Score]


class TraceList(BaseModel):
    """The workspace's latest traces (first seen newest first) with their scores."""

    data: list[TraceSummary]
    count: int
    next_cursor: str | None = None


class TraceDetail(BaseModel):
    """``GET /v1/traces/{trace_id}``: the trace dict evaluators get, its inputs/outputs, its scores."""

    trace_id: str
    state: str
    service_name: str | None = None
    root_span_id: str | None = None
    trace: dict[str, Any]
    inputs: Any = None
    outputs: Any = None
    scores: list[Score]
    decisions: list[Decision] = Field(default_factory=list, description="One per (rule, target): see Decision.")


class StatsBucket(BaseModel):
    """One time bucket of a rule's scores (by ``scored_at``)."""

    start: datetime
    count: int = Field(description="Scores stored in the bucket (any status).")
    ok: int = Field(description="Of them, results with status ok.")
    errors: int = Field(description="Of them, results with another status (error, timeout, ...).")
    mean_score: float | None = Field(None, description="The mean of the numeric scores (null: none).")
    pass_rate: float | None = Field(None, description="passed / (results with passed set) (null: none).")
    labels: dict[str, int] = Field(default_factory=dict, description="Results per label.")
    decisions: dict[str, int] = Field(
        default_factory=dict,
        description="Decisions made in the bucket: scored, failed (by scoring time), not_matched, sampled_out "
        "(by routing time), dropped (by routing time); only those that occurred.",
    )


class RuleStats(BaseModel):
    """``GET /v1/online-rules/{id}/stats``: buckets from ``since`` to ``until`` (empty ones included)."""

    rule_id: str
    since: datetime
    until: datetime
    bucket_s: int
    buckets: list[StatsBucket]
    queued: int = Field(description="Scores of the rule waiting or running now.")
    dropped: int = Field(description="Traces of the rule dropped (backlog full) in the range, by enqueue time.")
    pending: dict[str, int] = Field(
        default_factory=dict, description="The rule's rows waiting now: queued, running, retrying, delayed."
    )
    decisions: dict[str, int] = Field(default_factory=dict, description="The buckets' decisions added up.")
    pace: dict[str, Any] = Field(
        default_factory=dict,
        description="The rule's pace now against its budgets: scores_last_minute, sandbox_seconds_last_hour, "
        "model_calls_last_minute, running, concurrency, concurrency_ceiling, limits.",
    )


class SessionSummary(BaseModel):
    """A session as ``GET /v1/sessions`` lists it."""

    session_id: str
    num_traces: int = Field(description="Traces routed into it (its generation).")
    first_seen_at: datetime
    last_span_at: datetime = Field(description="The last span of its traces, as routed.")


class SessionList(BaseModel):
    """The workspace's sessions, first seen newest first."""

    data: list[SessionSummary]
    count: int
    next_cursor: str | None = None


class SessionDetail(BaseModel):
    """``GET /v1/sessions/{session_id}``: the session dict evaluators get, its inputs/outputs, its scores."""

    session_id: str
    traces: list[dict[str, Any]] = Field(description="Its traces' dicts, in start order.")
    messages: list[dict[str, Any]] = Field(description="The conversation: each trace's input and output messages.")
    num_traces: int
    duration_ms: float | None = None
    truncated: bool = Field(False, description="true: only its latest traces are in `traces`/`messages`.")
    inputs: Any = None
    outputs: Any = None
    first_seen_at: datetime
    last_span_at: datetime
    scores: list[Score]
