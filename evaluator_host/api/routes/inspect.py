"""``POST /v1/inspect``: what the playground shows while the user types (never builds or runs)."""

from __future__ import annotations

from fastapi import APIRouter

from evaluator_host.api.deps import ServicesDep, WorkspaceDep
from evaluator_host.evaluation.inspection import InspectRequest, InspectResponse, inspect

router = APIRouter(tags=["evaluate"])


@router.post("/inspect", response_model=InspectResponse)
async def inspect_definition(body: InspectRequest, services: ServicesDep, _workspace: WorkspaceDep) -> InspectResponse:
    """The detected interface, every definition error with its line and column, the capability report,
    each pin checked and whether its package set is built: always 200 (problems are in ``errors``)."""
    return await inspect(services.evaluation, body)
