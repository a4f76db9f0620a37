"""``POST /v1/evaluate``: one-off evaluation of a definition."""

from __future__ import annotations

from fastapi import APIRouter

from evaluator_host.api.deps import ServicesDep
from evaluator_host.evaluation import answer, cases_of
from evaluator_host.models import BatchResponse, EvaluateRequest, EvaluationResult

router = APIRouter(tags=["evaluate"])


@router.post("/evaluate", response_model=EvaluationResult | BatchResponse)
async def evaluate(body: EvaluateRequest, services: ServicesDep) -> EvaluationResult | BatchResponse:
    """Evaluate one case, or ``cases`` with an aggregate."""
    prepared = await services.evaluation.validate(body.language, body.code, body.packages, body.settings)
    cases, batch = cases_of(body, services.settings.max_cases)
    results = await services.evaluation.evaluate(prepared, cases)
    return answer(results, batch, capabilities=prepared.capabilities)
