"""Pydantic request and response models: the HTTP contract of docs/api.md."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, field_validator, model_validator

from evaluator_host import languages
from evaluator_host.models_workspace import NetworkEntry, network_entries
from evaluator_host.stored_text import StoredText

__all__ = [
    "Aggregate",
    "Case",
    "EvaluateRequest",
    "EvaluationResult",
    "Evaluator",
    "EvaluatorCreate",
    "EvaluatorEvaluateRequest",
    "EvaluatorList",
    "EvaluatorPatch",
    "EvaluatorSettings",
    "ErrorBody",
    "ErrorDetail",
    "ErrorInfo",
    "BatchResponse",
    "Capabilities",
    "Dataset",
    "DatasetList",
    "DatasetRow",
    "DatasetRowPage",
    "Histogram",
    "FieldMapping",
    "Job",
    "JobCreate",
    "JobList",
    "JobProgress",
    "JobResult",
    "JobResultPage",
    "JobStatus",
    "Language",
    "MAX_REVISION",
    "Packages",
    "RevisionList",
    "Stats",
]


def _known_language(name: str) -> str:
    if name not in languages.names():
        raise ValueError(f"language {name!r} is not supported; use one of {languages.names()}")
    return name


Language = Annotated[
    str,
    AfterValidator(_known_language),
    WithJsonSchema({"type": "string", "enum": languages.names()}),
]
Packages = dict[str, str] | list[str]
MAX_REVISION = 2**31 - 1  # revision numbers are 32-bit in the database: a larger one names no revision (422)
Capabilities = dict[str, list[dict[str, Any]]]
_CAPABILITIES_DOC = (
    "What the code reaches for, found statically (advisory; the sandbox enforces): network, filesystem, "
    "subprocess, environment, dynamic_code, native — each a list of {line, detail}."
)
Status = Literal["ok", "error", "invalid_result", "timeout", "memory_limit", "output_limit", "sandbox_error"]


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


class Case(BaseModel):
    """One evaluation's data."""

    model_config = ConfigDict(extra="forbid")

    inputs: Any = Field(default_factory=dict, description="The test case's inputs (usually an object).")
    outputs: Any = Field(None, description="The application's output being evaluated.")
    trace: Any = Field(None, description="The application's trace, if any.")
    app_params: Any = Field(None, description="Application parameters (legacy interface).")


class _Definition(BaseModel):
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


class EvaluatorCreate(_Definition):
    """``POST``/``PUT /v1/evaluators`` (stored text holds no NUL character)."""

    code: StoredText = Field(description="The evaluator's source code.")
    name: StoredText = Field(min_length=1, max_length=200)
    description: StoredText = Field("", max_length=10_000)


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

    @field_validator("network")
    @classmethod
    def _destinations(cls, value: list[str | NetworkEntry] | None) -> list[str | NetworkEntry] | None:
        return None if value is None else network_entries(value)


class EvaluatorEvaluateRequest(BaseModel):
    """``POST /v1/evaluators/{id}/evaluate``."""

    inputs: Any = Field(default_factory=dict)
    outputs: Any = None
    trace: Any = None
    app_params: Any = None
    revision: int | None = Field(None, ge=1, le=MAX_REVISION, description="Defaults to the latest revision.")
    cases: list[Case] | None = None


class ErrorDetail(BaseModel):
    """What every error answer carries; some types add fields (``package``, ``runtime_id``, ``details``, …)."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="NotFound, ValidationError, SyntaxError, BuildError, SandboxError, …")
    message: str
    line: int | None = None
    column: int | None = None


class ErrorBody(BaseModel):
    """Every error answer: ``{"error": {...}}``."""

    error: ErrorDetail


class ErrorInfo(BaseModel):
    """What went wrong in the user's code (or around it)."""

    type: str
    message: str
    line: int | None = None
    traceback: str = ""


class EvaluationResult(BaseModel):
    """The normalized outcome of one evaluation."""

    status: Status
    score: float | None = None
    passed: bool | None = None
    outputs: dict[str, float] = Field(default_factory=dict)
    details: dict[str, Any] = Field(default_factory=dict)
    reason: str | None = Field(None, description="Why: a returned dict's reason / explanation / comment (cut).")
    label: str | None = Field(None, description="A returned dict's label (categorical result).")
    error: ErrorInfo | None = None
    warnings: list[str] = Field(default_factory=list)
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False
    duration_ms: float = 0.0
    interface: Literal["evaluate", "legacy", "main"]
    runtime: dict[str, Any]
    evaluator_id: str | None = None
    revision: int | None = None
    capabilities: Capabilities | None = Field(None, description=_CAPABILITIES_DOC + " Single-case answers only.")


class Stats(BaseModel):
    """Summary statistics of one numeric column."""

    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    count: int
    nan_count: int


class Histogram(BaseModel):
    """Scores counted in ``len(counts)`` equal bins over [0, 1] (a bin holds ``edges[i] <= score < edges[i+1]``,
    the last one 1.0 too); scores outside [0, 1] are counted in ``below`` / ``above``."""

    edges: list[float]
    counts: list[int]
    below: int = 0
    above: int = 0


class Aggregate(BaseModel):
    """Aggregates over a set of results."""

    count: int
    errors: int
    score: Stats | None
    outputs: dict[str, Stats]
    pass_rate: float | None
    labels: dict[str, int] = Field(default_factory=dict, description="How many rows returned each label.")
    histogram: Histogram | None = Field(
        None, description="The scores' distribution (this implementation); null when no row has a score."
    )


class BatchResponse(BaseModel):
    """Answer to a ``cases`` request."""

    results: list[EvaluationResult]
    aggregate: Aggregate
    evaluator_id: str | None = None
    revision: int | None = None
    capabilities: Capabilities | None = Field(None, description=_CAPABILITIES_DOC)


class Evaluator(BaseModel):
    """A stored evaluator at one revision."""

    id: str
    name: str
    description: str
    revision: int
    language: Language
    interface: Literal["evaluate", "legacy", "main"]
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
    capabilities: Capabilities = Field(default_factory=dict, description=_CAPABILITIES_DOC)
    warnings: list[str] = Field(
        default_factory=list,
        description="Set when the revision is saved: what may fail at run time (imports no pinned package provides).",
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


# -- datasets and jobs ---------------------------------------------------------------------

DatasetFormat = Literal["jsonl", "csv", "json"]
JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]


class Dataset(BaseModel):
    """A stored dataset: rows kept on disk as JSON lines, in upload order."""

    id: str
    name: str
    row_count: int
    columns: list[str] = Field(description="Every column seen, in first-seen order.")
    format: DatasetFormat = Field(description="The format it was uploaded in.")
    bytes: int = Field(description="Size of the stored rows.")
    created_at: datetime


class DatasetRow(BaseModel):
    """One stored row and its 0-based position."""

    index: int
    row: dict[str, Any]


class DatasetRowPage(BaseModel):
    """``GET /v1/datasets/{id}/rows``: rows with ``index >= offset``, in upload order."""

    data: list[DatasetRow]
    offset: int
    limit: int
    next_offset: int | None = Field(description="Pass as offset for the next page; null at the end.")
    total: int = Field(description="Rows in the dataset.")


class DatasetList(BaseModel):
    """``GET /v1/datasets``."""

    data: list[Dataset]
    count: int
    next_cursor: str | None = Field(
        None, description="With ?limit=: pass it as ?cursor= for the next page; null on the last page."
    )


class FieldMapping(BaseModel):
    """Which columns feed ``outputs``, ``trace``, ``inputs`` and ``app_params`` (NeMo FieldMapping semantics).

    A column is a top-level key of the row or, when no such key exists, a dotted path into
    nested objects (``"response.text"``). Unset entries take the defaults: ``outputs`` = the
    row's ``outputs`` (or ``output``) column, ``trace`` = ``trace``, ``app_params`` =
    ``app_params``, ``inputs`` = the whole row (a list keeps only those columns).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    outputs: str | None = Field(None, min_length=1, description="Column passed as outputs.")
    trace: str | None = Field(None, min_length=1, description="Column passed as trace.")
    inputs: list[str] | None = Field(None, description="Columns kept in inputs; default the whole row.")
    app_params: str | None = Field(None, min_length=1, description="Column passed as app_params (legacy).")


class JobCreate(BaseModel):
    """``POST /v1/jobs``: exactly one of ``rows`` / ``dataset_id``."""

    model_config = ConfigDict(extra="forbid")

    evaluator_id: str
    revision: int | None = Field(None, ge=1, le=MAX_REVISION, description="Defaults to the latest revision.")
    rows: list[dict[str, Any]] | None = Field(None, description="Inline rows (stored as a dataset).")
    dataset_id: str | None = None
    field_mapping: FieldMapping | None = None
    parallelism: int | None = Field(None, ge=1, le=64, description="Workers used at once (default: settings).")

    @model_validator(mode="after")
    def _one_source(self) -> JobCreate:
        if (self.rows is None) == (self.dataset_id is None):
            raise ValueError("give exactly one of rows / dataset_id")
        return self


class JobProgress(BaseModel):
    """``done`` rows have a result; ``failed`` of them have a status other than ``ok``."""

    total: int
    done: int
    failed: int


class Job(BaseModel):
    """A batch evaluation over a dataset's rows."""

    id: str
    evaluator_id: str
    revision: int
    status: JobStatus
    progress: JobProgress
    rows_per_s: float | None = Field(None, description="Rows per second of running time (excludes downtime).")
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    aggregate: Aggregate | None = None
    error: dict[str, Any] | None = Field(None, description="Why a job failed (infrastructure only).")
    dataset_id: str
    field_mapping: FieldMapping
    parallelism: int
    runtime_id: str
    warnings: list[str] = Field(default_factory=list)


class JobList(BaseModel):
    """``GET /v1/jobs``."""

    data: list[Job]
    count: int
    next_cursor: str | None = Field(
        None, description="With ?limit=: pass it as ?cursor= for the next page; null on the last page."
    )


class JobResult(BaseModel):
    """One row's result; ``index`` is the row's 0-based position in the dataset."""

    index: int
    row: dict[str, Any]
    result: EvaluationResult
    worker: str | None = Field(
        None, description="The worker host that ran the row (a queued job); null: the service ran it itself."
    )


class JobResultPage(BaseModel):
    """``GET /v1/jobs/{id}/results``: results with ``index >= offset``, in input order."""

    data: list[JobResult]
    offset: int
    limit: int
    next_offset: int | None = Field(description="Pass as offset for the next page; null at the end.")
    total: int = Field(description="Rows in the job's dataset.")
