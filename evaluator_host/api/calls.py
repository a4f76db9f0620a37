"""The evaluate routes' two ends: a request's cases, and the answer made of their results."""

from __future__ import annotations

from typing import Any

from evaluator_host.errors import LimitError
from evaluator_host.evaluation.aggregate import aggregate
from evaluator_host.evaluation.models import (
    BatchResponse,
    Case,
    EvaluateRequest,
    EvaluationResult,
    EvaluatorEvaluateRequest,
)

__all__ = ["answer", "cases_of"]


def cases_of(body: EvaluateRequest | EvaluatorEvaluateRequest, max_cases: int) -> tuple[list[Case], bool]:
    """A request's cases, and whether it was a batch (``cases``) rather than one inline case."""
    if body.cases is not None:
        if len(body.cases) > max_cases:
            raise LimitError(f"{len(body.cases)} cases; at most {max_cases} per call (use a job for more)")
        return list(body.cases), True
    return [Case(inputs=body.inputs, outputs=body.outputs, trace=body.trace, app_params=body.app_params)], False


def answer(
    results: list[EvaluationResult],
    batch: bool,
    *,
    evaluator_id: str | None = None,
    revision: int | None = None,
    capabilities: dict[str, list[dict[str, Any]]] | None = None,
) -> EvaluationResult | BatchResponse:
    """The answer of an evaluate call: the one result, or every result with their aggregate
    (with the definition's capability report, when given, once per answer)."""
    if not batch:
        if capabilities is None:
            return results[0]
        return results[0].model_copy(update={"capabilities": capabilities})
    return BatchResponse(
        results=results,
        aggregate=aggregate(results),
        evaluator_id=evaluator_id,
        revision=revision,
        capabilities=capabilities,
    )
