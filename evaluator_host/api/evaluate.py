"""``POST /v1/evaluate``: one-off evaluation of a definition."""

from __future__ import annotations

from fastapi import APIRouter

from evaluator_host.api.deps import ServicesDep
from evaluator_host.errors import LimitError
from evaluator_host.models import BatchResponse, Case, EvaluateRequest, EvaluationResult, EvaluatorEvaluateRequest
from evaluator_host.results.aggregate import aggregate

router = APIRouter(tags=["evaluate"])


def cases_of(body: EvaluateRequest | EvaluatorEvaluateRequest, max_cases: int) -> tuple[list[Case], bool]:
    """The request's cases and whether it was a batch."""
    if body.cases is not None:
        if len(body.cases) > max_cases:
            raise LimitError(f"{len(body.cases)} cases; at most {max_cases} per call (use a job for more)")
        return list(body.cases), True
    return [Case(inputs=body.inputs, outputs=body.outputs, trace=body.trace, app_params=body.app_params)], False


@router.post("/evaluate", response_model=EvaluationResult | BatchResponse)
async def evaluate(body: EvaluateRequest, services: ServicesDep) -> EvaluationResult | BatchResponse:
    """Evaluate one case, or ``cases`` with an aggregate."""
    prepared = services.evaluation.validate(body.language, body.code, body.packages, body.settings)
    cases, batch = cases_of(body, services.settings.max_cases)
    results = await services.evaluation.evaluate(prepared, cases)
    if batch:
        return BatchResponse(results=results, aggregate=aggregate(results))
    return results[0]
