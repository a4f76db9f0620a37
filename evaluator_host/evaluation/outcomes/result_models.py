"""The API models of an evaluation's data and outcome: a case, a normalized result (with its status and error),
and a batch's answer (docs/api.md, "Results"). Re-exported by :mod:`evaluator_host.evaluation.models`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from evaluator_host.definitions.models import CAPABILITIES_DOC, Capabilities
from evaluator_host.evaluation.outcomes.aggregate_models import Aggregate

__all__ = ["BatchResponse", "Case", "ErrorInfo", "EvaluationResult", "Status"]

Status = Literal["ok", "error", "invalid_result", "timeout", "memory_limit", "output_limit", "sandbox_error"]


class Case(BaseModel):
    """One evaluation's data."""

    model_config = ConfigDict(extra="forbid")

    inputs: Any = Field(default_factory=dict, description="The test case's inputs (usually an object).")
    outputs: Any = Field(None, description="The application's output being evaluated.")
    trace: Any = Field(None, description="The application's trace, if any.")
    app_params: Any = Field(None, description="Application parameters (legacy interface).")


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
    interface: Literal["evaluate", "legacy", "main", "metric"]
    runtime: dict[str, Any]
    evaluator_id: str | None = None
    revision: int | None = None
    capabilities: Capabilities | None = Field(None, description=CAPABILITIES_DOC + " Single-case answers only.")
    cached: bool = Field(
        False,
        exclude_if=lambda cached: not cached,
        description="True: a job's row answered from the result cache, not run again (absent: it ran).",
    )
    # the egress proxy's own record of the case's connections, as the pool took it from the worker's gate:
    # host-side, never serialized, never what the evaluator returned (its ``details.egress`` may be its own)
    _proxy_log: list[dict[str, Any]] = PrivateAttr(default_factory=list)

    @property
    def proxy_log(self) -> list[dict[str, Any]]:
        """The egress proxy's record of this case's connections (empty: none, or not run here). What a
        rule's ``model_calls_per_minute`` and its judge's 429s are read from (``online/deciding/model_calls.py``):
        evaluator code cannot reach it."""
        return self._proxy_log

    def stored_json(self, cap: int) -> str:
        """Its JSON as a table stores it: at most ``cap`` bytes, else without its output and details, ``truncated``."""
        text = self.model_dump_json()
        if len(text.encode()) > cap:
            cut = self.model_copy(update={"stdout": "", "stderr": "", "details": {}, "truncated": True})
            text = cut.model_dump_json()
        return text


class BatchResponse(BaseModel):
    """Answer to a ``cases`` request."""

    results: list[EvaluationResult]
    aggregate: Aggregate
    evaluator_id: str | None = None
    revision: int | None = None
    capabilities: Capabilities | None = Field(None, description=CAPABILITIES_DOC)
