"""``POST /v1/evaluate``: one-off evaluation of a definition."""

from __future__ import annotations

from fastapi import APIRouter

from evaluator_host.api.calls import answer, cases_of
from evaluator_host.api.deps import ServicesDep, WorkspaceDep
from evaluator_host.evaluation.evaluators import check_declarations
from evaluator_host.evaluation.models import BatchResponse, EvaluateRequest, EvaluationResult

router = APIRouter(tags=["evaluate"])


@router.post("/evaluate", response_model=EvaluationResult | BatchResponse)
async def evaluate(
    body: EvaluateRequest, services: ServicesDep, workspace: WorkspaceDep
) -> EvaluationResult | BatchResponse:
    """Evaluate one case, or ``cases`` with an aggregate (in the key's workspace: its secrets, its workers)."""
    cases, batch = cases_of(body, services.settings.max_cases)
    services.quotas.take_evaluations(workspace, len(cases))
    check_declarations(services.workspaces, workspace, body.secrets, body.network)
    prepared = await services.evaluation.validate(
        body.language, body.code, body.packages, body.settings, secrets=body.secrets, network=body.network
    )
    env = await services.vault.values(workspace, body.secrets)
    injected = await services.vault.values(workspace, prepared.injected)  # the egress proxy's, never the code's
    results = await services.evaluation.evaluate(prepared, cases, workspace=workspace, env=env, injected=injected)
    return answer(results, batch, capabilities=prepared.capabilities)
