"""The API models of evaluation: one-off and by-id evaluation, stored evaluators and revisions, results
(docs/api.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from evaluator_host.definitions.models import CAPABILITIES_DOC, MAX_REVISION, Capabilities, Language, Packages
from evaluator_host.evaluation.outcomes.result_models import BatchResponse, Case, ErrorInfo, EvaluationResult, Status
from evaluator_host.evaluation.plain_env import MAX_ENV, MAX_ENV_BYTES, MAX_ENV_VALUE, check_env
from evaluator_host.shared.text import StoredText
from evaluator_host.tenancy.models import NetworkEntry, network_entries

__all__ = [
    "BatchResponse",
    "Case",
    "ErrorInfo",
    "EvaluateRequest",
    "EvaluationResult",
    "Evaluator",
    "EvaluatorCreate",
    "EvaluatorEvaluateRequest",
    "EvaluatorList",
    "EvaluatorPatch",
    "EvaluatorSettings",
    "Fixture",
    "FixtureExpect",
    "FixtureOutcome",
    "FixtureReport",
    "RevisionList",
    "Status",
]


class EvaluatorSettings(BaseModel):
    """Per-evaluator settings and their bounds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float = Field(10.0, ge=0.1, le=120, description="Wall clock per evaluation, seconds.")
    memory_mb: int = Field(256, ge=32, le=4096, description="Memory cap of the worker, MiB.")
    threshold: float | None = Field(None, description="When set, passed = score >= threshold.")
    correct_answer_key: str = Field(
        "correct_answer", min_length=1, max_length=256, description="inputs key passed as correct_answer (legacy only)."
    )
    policy: Literal["standard", "restricted"] = Field(
        "standard",
        description="Execution policy: 'restricted' compiles and runs Python under RestrictedPython's guards "
        "(defence in depth; see docs/security.md). The service may run 'restricted' where its isolation is weakest.",
    )
    max_in_flight: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="Async evaluators only: rows one worker runs at once, each awaiting (e.g. an LLM judge's "
        "call); at most the service's max_in_flight (EVALUATOR_HOST_MAX_IN_FLIGHT). Null: the service's.",
    )
    entrypoint: str | None = Field(
        None,
        min_length=1,
        max_length=256,
        description="Metric interface only: the metric class to run when the code defines several "
        "(NeMo Metric classes: docs/metrics.md). Null: the code's only metric class.",
    )
    cache: bool | None = Field(
        None,
        description="Result cache (docs/api.md, Result cache): null caches a job's rows when the code reads no "
        "network, clock, randomness, environment or files (the capability report); false never; true also "
        "where the report is unsure.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description='Plain environment variables its workers get, e.g. {"OPENAI_BASE_URL": '
        '"http://llm.local:8080/v1"}: names [A-Z_][A-Z0-9_]* (not the sandbox\'s own: PATH, HOME, the proxy '
        f"and CA variables, LD_*, PYTHON*, NODE_*), at most {MAX_ENV} of them, {MAX_ENV_VALUE} characters a "
        f"value, {MAX_ENV_BYTES} bytes in all. Stored and shown as given, part of the revision, never redacted: "
        "a value that must stay hidden is a secret (`secrets`).",
    )

    @field_validator("env")
    @classmethod
    def _plain_env(cls, value: dict[str, str]) -> dict[str, str]:
        return check_env(value)


class _Definition(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelled field is a 422, never dropped (docs/api.md)

    language: Language = Field(description="python | javascript | typescript")
    code: str = Field(description="The evaluator's source code.")
    packages: Packages | None = Field(None, description="Exact pins: {name: version} or ['name==1.2.3'].")
    settings: EvaluatorSettings = Field(default_factory=EvaluatorSettings)
    secrets: list[str] = Field(
        default_factory=list,
        max_length=50,
        description="Workspace secrets its workers get as environment variables (PUT /v1/secrets/{name}); "
        "their values are redacted from every answer.",
    )
    network: list[str | NetworkEntry] = Field(
        default_factory=list,
        max_length=50,
        description="'host:port' destinations its workers may open through the egress proxy: a subset of "
        "the workspace's network_allow (set by the operator). Empty: no network. An entry "
        '{"host": "host:port", "headers": {"Authorization": "Bearer {{secret:NAME}}"}} also has the proxy '
        "set those headers on every HTTPS request to that host, with workspace secrets the code never sees.",
    )

    @field_validator("secrets")
    @classmethod
    def _secret_names(cls, value: list[str]) -> list[str]:
        return _unique(value)

    @model_validator(mode="after")
    def _env_is_not_a_secret(self) -> _Definition:
        if both := sorted(set(self.secrets) & set(self.settings.env)):
            raise ValueError(f"{both[0]!r} is both a secret and a plain variable (settings.env): name it once")
        return self

    @field_validator("network")
    @classmethod
    def _destinations(cls, value: list[str | NetworkEntry]) -> list[str | NetworkEntry]:
        return network_entries(value)


def _unique(names: list[str]) -> list[str]:
    return list(dict.fromkeys(names))


class EvaluateRequest(_Definition):
    """``POST /v1/evaluate``: a definition plus one case or ``cases``."""

    inputs: Any = Field(default_factory=dict)
    outputs: Any = None
    trace: Any = None
    app_params: Any = None
    cases: list[Case] | None = Field(None, description="Several cases instead of one.")


MAX_FIXTURES = 200  # fixtures one revision may carry (each runs on every save)


class FixtureExpect(BaseModel):
    """What a fixture's result must be: at least one of ``score``, ``passed``, ``label``, ``status``.
    Without ``status``, the result must be ``ok``; ``score`` agrees within ``tolerance``."""

    model_config = ConfigDict(extra="forbid")

    score: float | None = Field(None, allow_inf_nan=False, description="The expected score (± tolerance).")
    passed: bool | None = Field(None, description="The expected passed.")
    label: str | None = Field(None, max_length=1000, description="The expected label.")
    status: Status | None = Field(None, description="The expected status (default: ok).")
    tolerance: float = Field(1e-9, ge=0, le=1e9, description="|score - expected score| allowed.")

    @model_validator(mode="after")
    def _something(self) -> FixtureExpect:
        if self.score is None and self.passed is None and self.label is None and self.status is None:
            raise ValueError("expect needs at least one of score, passed, label, status")
        return self


class Fixture(BaseModel):
    """A named case and what its result must be: stored with the revision, run on every save."""

    model_config = ConfigDict(extra="forbid")

    name: StoredText = Field(min_length=1, max_length=200)
    inputs: Any = Field(default_factory=dict)
    outputs: Any = None
    trace: Any = None
    expect: FixtureExpect

    def case(self) -> Case:
        """The case it runs."""
        return Case(inputs=self.inputs, outputs=self.outputs, trace=self.trace)


class FixtureOutcome(BaseModel):
    """One fixture's run: whether it met ``expect`` and, when not, what differed."""

    name: str
    passed: bool
    problems: list[str] = Field(default_factory=list, description="What differed from expect (empty when passed).")
    status: Status
    score: float | None = None
    result_passed: bool | None = None
    label: str | None = None
    error: str | None = Field(None, description="The error's type and message, when the run failed.")


class FixtureReport(BaseModel):
    """The fixtures of a revision, run on save (or by ``POST /v1/evaluators/{id}/test``)."""

    passed: int
    failed: int
    results: list[FixtureOutcome]


def _fixture_names(fixtures: list[Fixture] | None) -> list[Fixture] | None:
    names = [f.name for f in fixtures or []]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"fixture names must be unique: {', '.join(map(repr, repeated))} repeat")
    return fixtures


class EvaluatorCreate(_Definition):
    """``POST``/``PUT /v1/evaluators`` (stored text holds no NUL character)."""

    code: StoredText = Field(description="The evaluator's source code.")
    name: StoredText = Field(min_length=1, max_length=200)
    description: StoredText = Field("", max_length=10_000)
    fixtures: list[Fixture] | None = Field(
        None,
        max_length=MAX_FIXTURES,
        description="Named cases with the result each must give, run in the sandbox on save; a revision whose "
        "fixtures fail is stored as a draft (409), never the latest, unless force is true.",
    )
    force: bool = Field(False, description="Make the revision the latest even when its fixtures fail.")

    @field_validator("fixtures")
    @classmethod
    def _unique_fixtures(cls, value: list[Fixture] | None) -> list[Fixture] | None:
        return _fixture_names(value)


class EvaluatorPatch(BaseModel):
    """``PATCH /v1/evaluators/{id}``: only the fields to change; the rest is kept from the latest revision.

    ``settings`` is merged key by key into the latest revision's settings (a key set to null takes
    its default again); every other field given replaces the latest revision's value (null keeps
    it, except ``packages``: null means no pins).
    """

    model_config = ConfigDict(extra="forbid")

    name: StoredText | None = Field(None, min_length=1, max_length=200)
    description: StoredText | None = Field(None, max_length=10_000)
    language: Language | None = None
    code: StoredText | None = None
    packages: Packages | None = Field(None, description="Exact pins; replaces the latest revision's pins.")
    settings: dict[str, Any] | None = Field(None, description="Merged key by key into the latest settings.")
    secrets: list[str] | None = Field(None, max_length=50, description="Replaces the latest revision's secrets.")
    network: list[str | NetworkEntry] | None = Field(
        None, max_length=50, description="Replaces the latest revision's network."
    )
    fixtures: list[Fixture] | None = Field(
        None, max_length=MAX_FIXTURES, description="Replaces the latest revision's fixtures ([]: none)."
    )
    force: bool = Field(False, description="Make the revision the latest even when its fixtures fail.")

    @field_validator("fixtures")
    @classmethod
    def _unique_fixtures(cls, value: list[Fixture] | None) -> list[Fixture] | None:
        return _fixture_names(value)

    @field_validator("network")
    @classmethod
    def _destinations(cls, value: list[str | NetworkEntry] | None) -> list[str | NetworkEntry] | None:
        return None if value is None else network_entries(value)


class EvaluatorEvaluateRequest(BaseModel):
    """``POST /v1/evaluators/{id}/evaluate``."""

    model_config = ConfigDict(extra="forbid")

    inputs: Any = Field(default_factory=dict)
    outputs: Any = None
    trace: Any = None
    app_params: Any = None
    revision: int | None = Field(None, ge=1, le=MAX_REVISION, description="Defaults to the latest revision.")
    cases: list[Case] | None = None


class Evaluator(BaseModel):
    """A stored evaluator at one revision."""

    id: str
    name: str
    description: str
    revision: int
    language: Language
    interface: Literal["evaluate", "legacy", "main", "metric"]
    code: str
    packages: dict[str, str]
    settings: EvaluatorSettings
    runtime_id: str
    created_at: datetime
    updated_at: datetime
    secrets: list[str] = Field(default_factory=list, description="Secrets its workers get (names only).")
    network: list[str | NetworkEntry] = Field(
        default_factory=list, description="'host:port' its workers may reach (and headers the proxy sets there)."
    )
    capabilities: Capabilities = Field(default_factory=dict, description=CAPABILITIES_DOC)
    warnings: list[str] = Field(
        default_factory=list,
        description="Set when the revision is saved: what may fail at run time (imports no pinned package provides).",
    )
    fixtures: list[Fixture] = Field(default_factory=list, description="Its fixtures, run on every save.")
    fixture_report: FixtureReport | None = Field(None, description="What its fixtures gave on save (null: none).")
    draft: bool = Field(
        False, description="Its fixtures failed and the save was not forced: runnable by number, never the latest."
    )
    same_name: list[str] = Field(
        default_factory=list,
        description="On the answer of a save (POST, PUT, a PATCH setting name): the ids of the workspace's other "
        "evaluators with this name (case-blind). Names may repeat; ids do not.",
    )


class EvaluatorList(BaseModel):
    """``GET /v1/evaluators``."""

    data: list[Evaluator]
    count: int
    next_cursor: str | None = Field(
        None, description="With ?limit=: pass it as ?cursor= for the next page; null on the last page."
    )


class RevisionList(BaseModel):
    """``GET /v1/evaluators/{id}/revisions``."""

    data: list[Evaluator]
    count: int
    next_cursor: str | None = Field(
        None, description="With ?limit=: pass it as ?cursor= for the next page; null on the last page."
    )
