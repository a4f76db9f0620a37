"""Pydantic request and response models: the HTTP contract of design/api.md."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Aggregate",
    "Case",
    "EvaluateRequest",
    "EvaluationResult",
    "Evaluator",
    "EvaluatorCreate",
    "EvaluatorEvaluateRequest",
    "EvaluatorList",
    "EvaluatorSettings",
    "ErrorInfo",
    "BatchResponse",
    "Language",
    "Packages",
    "RevisionList",
    "Stats",
]

Language = Literal["python", "javascript", "typescript"]
Packages = dict[str, str] | list[str]
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


class EvaluateRequest(_Definition):
    """``POST /v1/evaluate``: a definition plus one case or ``cases``."""

    inputs: Any = Field(default_factory=dict)
    outputs: Any = None
    trace: Any = None
    app_params: Any = None
    cases: list[Case] | None = Field(None, description="Several cases instead of one.")


class EvaluatorCreate(_Definition):
    """``POST``/``PUT /v1/evaluators``."""

    name: str = Field(min_length=1, max_length=200)
    description: str = Field("", max_length=10_000)


class EvaluatorEvaluateRequest(BaseModel):
    """``POST /v1/evaluators/{id}/evaluate``."""

    inputs: Any = Field(default_factory=dict)
    outputs: Any = None
    trace: Any = None
    app_params: Any = None
    revision: int | None = Field(None, ge=1, description="Defaults to the latest revision.")
    cases: list[Case] | None = None


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


class Stats(BaseModel):
    """Summary statistics of one numeric column."""

    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    count: int
    nan_count: int


class Aggregate(BaseModel):
    """Aggregates over a set of results."""

    count: int
    errors: int
    score: Stats | None
    outputs: dict[str, Stats]
    pass_rate: float | None


class BatchResponse(BaseModel):
    """Answer to a ``cases`` request."""

    results: list[EvaluationResult]
    aggregate: Aggregate
    evaluator_id: str | None = None
    revision: int | None = None


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


class EvaluatorList(BaseModel):
    """``GET /v1/evaluators``."""

    data: list[Evaluator]
    count: int


class RevisionList(BaseModel):
    """``GET /v1/evaluators/{id}/revisions``."""

    data: list[Evaluator]
    count: int
