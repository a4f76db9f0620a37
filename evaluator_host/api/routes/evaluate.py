"""``POST /v1/evaluate``: one-off evaluation of a definition."""

from __future__ import annotations

from fastapi import APIRouter

from evaluator_host.api.calls import answer, cases_of
from evaluator_host.api.deps import ServicesDep, WorkspaceDep
from evaluator_host.evaluation.models import BatchResponse, EvaluateRequest, EvaluationResult
from evaluator_host.evaluation.usecases import Definition, evaluate_definition

router = APIRouter(tags=["evaluate"])


@router.post("/evaluate", response_model=EvaluationResult | BatchResponse)
async def evaluate(
    body: EvaluateRequest, services: ServicesDep, workspace: WorkspaceDep
) -> EvaluationResult | BatchResponse:
    """Evaluate one case, or ``cases`` with an aggregate (in the key's workspace: its secrets, its workers)."""
    cases, batch = cases_of(body)
    evaluated = await evaluate_definition(services, workspace, Definition.of(body), cases)
    return answer(evaluated, batch, services.backend.name)
