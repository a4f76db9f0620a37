"""The API models of datasets and jobs, and of running a stored evaluator's revisions over rows: its
fixtures again (``/test``), two revisions compared (``/compare``) (docs/api.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from evaluator_host.definitions.models import MAX_REVISION
from evaluator_host.evaluation.models import Case, EvaluationResult, FixtureReport
from evaluator_host.evaluation.outcomes.aggregate_models import Aggregate
from evaluator_host.shared.bounds import INT64_MAX
from evaluator_host.sinks.models import MAX_SINKS, Sink, SinkState
from evaluator_host.targets.models import Generation, Target, TargetUsage

__all__ = [
    "CompareRequest",
    "CompareResponse",
    "Dataset",
    "DatasetFormat",
    "DatasetList",
    "DatasetRow",
    "DatasetRowPage",
    "EvaluatorTestRequest",
    "EvaluatorTestResponse",
    "FieldMapping",
    "Job",
    "JobCreate",
    "JobList",
    "JobProgress",
    "JobResult",
    "JobResultPage",
    "JobSinkSummary",
    "JobStatus",
    "Replay",
    "ReplayRequest",
]


DatasetFormat = Literal["jsonl", "csv", "json"]


JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled", "stopped"]


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
    trace_id: str | None = Field(
        None,
        exclude_if=lambda v: v is None,  # a stored mapping shows the entries it has
        min_length=1,
        description="A job with sinks: the column of a row's trace id (default trace_id).",
    )
    span_id: str | None = Field(
        None, exclude_if=lambda v: v is None, min_length=1, description="A job with sinks: span id (default span_id)."
    )
    session_id: str | None = Field(
        None,
        exclude_if=lambda v: v is None,
        min_length=1,
        description="A job with sinks: session id (default session_id).",
    )


class JobCreate(BaseModel):
    """``POST /v1/jobs``: exactly one of ``rows`` / ``dataset_id``."""

    model_config = ConfigDict(extra="forbid")

    evaluator_id: str
    revision: int | None = Field(None, ge=1, le=MAX_REVISION, description="Defaults to the latest revision.")
    rows: list[dict[str, Any]] | None = Field(None, description="Inline rows (stored as a dataset).")
    dataset_id: str | None = None
    field_mapping: FieldMapping | None = None
    parallelism: int | None = Field(None, ge=1, le=64, description="Workers used at once (default: settings).")
    target: Target | None = Field(
        None,
        description="A model to generate each row's outputs with before it is scored (docs/api.md, Model targets).",
    )
    sinks: list[Sink] | None = Field(
        None,
        max_length=MAX_SINKS,
        description="Where each row's result is also written, attached to the row's trace_id/span_id "
        "(docs/online.md, Job results to sinks): the sinks of an online rule.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> JobCreate:
        if (self.rows is None) == (self.dataset_id is None):
            raise ValueError("give exactly one of rows / dataset_id")
        return self


class JobProgress(BaseModel):
    """``done`` rows have a result; ``failed`` of them have a status other than ``ok``; ``cached`` of them were
    answered from the result cache (docs/api.md, Result cache)."""

    total: int
    done: int
    failed: int
    cached: int = Field(0, description="Rows of done answered from the result cache (0: none).")


class JobSinkSummary(BaseModel):
    """A job's deliveries to one of its sinks: ``pending`` counts every done row not yet delivered, failed or
    skipped (a row with no trace id is ``skipped``)."""

    type: str
    url: str
    name: str | None = Field(None, description="The score's name there (null: the evaluator's).")
    delivered: int
    pending: int
    failed: int
    skipped: int


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
    error: dict[str, Any] | None = Field(
        None, description="Why a job failed (infrastructure only), or why it stopped (code budget_exhausted)."
    )
    dataset_id: str
    field_mapping: FieldMapping
    parallelism: int
    runtime_id: str
    warnings: list[str] = Field(default_factory=list)
    target: Target | None = Field(None, description="The model target (null: outputs come from the rows).")
    usage: TargetUsage | None = Field(None, description="A model-target job's calls, tokens and cost estimate so far.")
    sinks: list[JobSinkSummary] = Field(
        default_factory=list, description="Each sink's deliveries of the job's results (empty: no sinks)."
    )


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
    generation: Generation | None = Field(
        None, description="A model-target job's call for this row (what was sent and answered); absent otherwise."
    )
    sinks: list[SinkState] | None = Field(
        None, description="A job with sinks: this row's delivery to each (none yet: []); absent otherwise."
    )

    @model_serializer(mode="wrap")
    def _without_absent_generation(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Items of a job without a target (without sinks) keep their shape: no ``generation`` (``sinks``) key."""
        data: dict[str, Any] = handler(self)
        if self.generation is None:
            data.pop("generation", None)
        if self.sinks is None:
            data.pop("sinks", None)
        return data


class JobResultPage(BaseModel):
    """``GET /v1/jobs/{id}/results``: results with ``index >= offset``, in input order."""

    data: list[JobResult]
    offset: int
    limit: int
    next_offset: int | None = Field(description="Pass as offset for the next page; null at the end.")
    total: int = Field(description="Rows in the job's dataset.")


MAX_COMPARE_PAGE = 1000  # rows of a comparison's per-row table in one answer


class CompareRequest(BaseModel):
    """``POST /v1/evaluators/{id}/compare``: two revisions, and the rows (exactly one of ``cases`` /
    ``dataset_id``: a dataset's first ``sample`` rows, mapped by ``field_mapping``)."""

    model_config = ConfigDict(extra="forbid")

    base_revision: int = Field(ge=1, le=MAX_REVISION, description="The revision compared against.")
    head_revision: int = Field(ge=1, le=MAX_REVISION, description="The revision compared.")
    cases: list[Case] | None = Field(None, min_length=1)
    dataset_id: str | None = None
    sample: int = Field(100, ge=1, le=10_000, description="Rows of the dataset compared (its first ones).")
    field_mapping: FieldMapping | None = None
    tolerance: float = Field(1e-9, ge=0, le=1e9, description="A score flips when |Δscore| is over this.")
    only_flipped: bool = Field(False, description="The per-row table lists only the rows that flipped.")
    offset: int = Field(0, ge=0, le=INT64_MAX, description="The per-row table's first row (a page: offset, limit).")
    limit: int = Field(100, ge=1, le=MAX_COMPARE_PAGE, description="Rows of the per-row table in this answer.")

    @model_validator(mode="after")
    def _one_source(self) -> CompareRequest:
        if (self.cases is None) == (self.dataset_id is None):
            raise ValueError("give exactly one of cases / dataset_id")
        return self


class CompareResponse(BaseModel):
    """Both revisions on the same rows: what flipped, the aggregates and their deltas, a page of rows."""

    evaluator_id: str
    base_revision: int
    head_revision: int
    compared: int = Field(description="Rows run on both revisions.")
    flipped: list[int] = Field(description="Indices (in the compared rows) of every row that flipped.")
    deltas: dict[str, Any] = Field(
        description="head − base: pass_rate, mean_score, errors; flipped: rows flipped per field "
        "(status, passed, label, score)."
    )
    base: Aggregate
    head: Aggregate
    rows: list[dict[str, Any]] = Field(
        description="The per-row table's page: {index, flipped, fields, base, head, delta}; base/head: "
        "{status, score, passed, label, error}."
    )
    next_offset: int | None = Field(None, description="The next page's offset (same request); null: last page.")


class EvaluatorTestRequest(BaseModel):
    """``POST /v1/evaluators/{id}/test``."""

    model_config = ConfigDict(extra="forbid")

    revision: int | None = Field(None, ge=1, le=MAX_REVISION, description="Default: the latest.")


class EvaluatorTestResponse(FixtureReport):
    """A revision's fixtures, run now."""

    evaluator_id: str
    revision: int
    draft: bool


class ReplayRequest(BaseModel):
    """``POST /v1/results/replay``: a stored result — one row of a job — to run again."""

    model_config = ConfigDict(extra="forbid")

    job_id: str = Field(description="The job whose stored row result is replayed.")
    index: int = Field(ge=0, le=INT64_MAX, description="The row's index in the job's dataset.")


class Replay(BaseModel):
    """A stored row result run again: the job's revision on its runtime, the row's case as the job mapped it."""

    job_id: str
    index: int
    evaluator_id: str
    revision: int
    runtime_id: str = Field(description="The runtime it ran on again (the stored row's, by id).")
    identical: bool = Field(
        description="The answer is the stored one: status, score, passed, outputs, details, label, reason and "
        "error (type, message, line); timings, printed output and the cached mark are not compared."
    )
    differences: list[str] = Field(description="Each compared field that differs: 'field: stored → replayed'.")
    stored: EvaluationResult
    replayed: EvaluationResult
