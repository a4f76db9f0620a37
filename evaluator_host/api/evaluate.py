"""``POST /v1/evaluate``: one-off evaluation of a definition."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from evaluator_host.aggregate import aggregate
from evaluator_host.api.deps import get_services
from evaluator_host.errors import LimitError
from evaluator_host.models import BatchResponse, Case, EvaluateRequest, EvaluationResult
from evaluator_host.services import Services

router = APIRouter(tags=["evaluate"])


def cases_of(body: EvaluateRequest | object, max_cases: int) -> tuple[list[Case], bool]:
    """The request's cases and whether it was a batch."""
    batch = getattr(body, "cases", None)
    if batch is not None:
        if len(batch) > max_cases:
            raise LimitError(f"{len(batch)} cases; at most {max_cases} per call (use a job for more)")
        return list(batch), True
    case = Case(inputs=body.inputs, outputs=body.outputs, trace=body.trace,  # type: ignore[attr-defined]
                app_params=body.app_params)  # type: ignore[attr-defined]
    return [case], False


@router.post("/evaluate", response_model=EvaluationResult | BatchResponse)
async def evaluate(body: EvaluateRequest, services: Services = Depends(get_services)) -> EvaluationResult | BatchResponse:
    """Evaluate one case, or ``cases`` with an aggregate."""
    prepared = services.evaluation.validate(body.language, body.code, body.packages, body.settings)
    cases, batch = cases_of(body, services.settings.max_cases)
    results = await services.evaluation.evaluate(prepared, cases)
    if batch:
        return BatchResponse(results=results, aggregate=aggregate(results))
    return results[0]
