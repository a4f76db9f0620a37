"""``POST /v1/inspect``: what the playground shows while the user types (never builds or runs)."""

from __future__ import annotations

from fastapi import APIRouter

from evaluator_host.api.deps import ServicesDep, WorkspaceDep
from evaluator_host.definitions import languages
from evaluator_host.evaluation.inspection import InspectRequest, InspectResponse, inspect

router = APIRouter(tags=["evaluate"])

TS_NOT_CHECKED = (
    "TypeScript is not type-checked: Node.js's own type transform removes the types and the code runs as "
    "JavaScript, so a type error shows only as what it does at run time; check with tsc --noEmit before saving"
)


@router.post("/inspect", response_model=InspectResponse)
async def inspect_definition(body: InspectRequest, services: ServicesDep, _workspace: WorkspaceDep) -> InspectResponse:
    """The detected interface, every definition error with its line and column, the capability report,
    each pin checked and whether its package set is built: always 200 (problems are in ``errors``)."""
    found = await inspect(services.evaluation, body)
    if not languages.get(body.language).type_checked:
        found.warnings.append(TS_NOT_CHECKED)
    return found
