"""The online API's shapes (``/v1/online-rules``, ``/v1/traces``): rules, scores, traces, stats.

Contract: a rule's ``filter`` matches a *span* (docs/online.md, "How it works"): every condition
given must hold of one span — its resource's ``service.name``, its name, each attribute condition
(``equals`` a JSON scalar, or ``exists`` true/false) — and a trace matches when one of its spans
does. An empty filter matches every trace (the root span is evaluated). ``mapping`` names trace
paths for the case's ``inputs`` / ``outputs`` (checked by :func:`evaluator_host.online.mapping.check_path`);
a field it leaves out comes from the evaluated span. A rule's ``target`` says what one score is of:
``{"level": "trace"}`` (the default) or ``{"level": "span"}`` (every matching span, each scored once);
``session`` is refused (422) until it is built. Nothing here touches the database.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from evaluator_host.definitions.models import MAX_REVISION
from evaluator_host.online import mapping
from evaluator_host.shared.bounds import Int64
from evaluator_host.sinks.models import MAX_SINKS, Sink, SinkState

__all__ = [
    "AttributeCondition",
    "Decision",
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


class RuleTarget(BaseModel):
    """What one score of a rule is of (issue 50): ``trace`` (one per trace, on its evaluated span) or
    ``span`` (one per span that matches the filter; the evaluator gets that span's inputs/outputs and
    the whole trace as ``trace``)."""

    model_config = ConfigDict(extra="forbid")

    level: Literal["trace", "span", "session"] = Field(
        "trace", description="trace (default) | span. session is not available yet (422)."
    )

    @field_validator("level")
    @classmethod
    def _available(cls, value: str) -> str:
        if value == "session":
            raise ValueError(
                "target level 'session' is not available yet (only 'trace' and 'span' are); "
                "session-level rules are planned (issue 50)"
            )
        return value


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


class RuleLimits(BaseModel):
    """A rule's budgets (each optional): over one, its work is delayed, never dropped (docs/online.md, Budgets)."""

    model_config = ConfigDict(extra="forbid")

    scores_per_minute: int | None = Field(None, ge=1, le=1_000_000, description="Scores stored in any 60 s.")
    sandbox_seconds_per_hour: float | None = Field(
        None, gt=0, le=10_000_000, description="Evaluator run time (duration_ms) of the scores stored in any hour."
    )
    model_calls_per_minute: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="Accepted and kept; not enforced yet (issue 51: the egress proxy's count).",
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


class Decision(BaseModel):
    """Why a rule did or did not score a target of the trace (docs/online.md, "Why wasn't my trace scored?")."""

    rule_id: str
    target: str | None = Field(None, description="The span id at span level; null: the trace.")
    decision: str = Field(
        description="not_matched | sampled_out | not_ready | queued | running | retrying | delayed | scored | "
        "failed | dropped | not_routed"
    )
    reason: str = Field(description="Why, in one sentence (the failed filter condition, the error, the budget...).")
    at: datetime = Field(description="When this was decided (routed, enqueued, scored...).")
    until: datetime | None = Field(None, description="not_ready, running, retrying, delayed: until when.")
    attempts: int = 0


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
        description="The rule's pace now against its budgets: scores_last_minute, sandbox_seconds_last_hour, limits.",
    )
