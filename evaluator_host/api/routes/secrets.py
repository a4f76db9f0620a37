"""``/v1/secrets``: the workspace's secrets (names in, names out; values never come back)."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from evaluator_host.api.deps import ServicesDep, WorkspaceDep
from evaluator_host.errors import NotFoundError
from evaluator_host.tenancy.models import Secret, SecretList, SecretPut

router = APIRouter(prefix="/secrets", tags=["secrets"])


@router.put("/{name}", status_code=status.HTTP_204_NO_CONTENT)
async def put(name: str, body: SecretPut, services: ServicesDep, workspace: WorkspaceDep) -> Response:
    """Set a secret (encrypted at rest); evaluators that list it get the new value from their next call."""
    await services.vault.put(workspace, name, body.value)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("", response_model=SecretList)
async def list_secrets(services: ServicesDep, workspace: WorkspaceDep) -> SecretList:
    """The workspace's secrets: names and times only."""
    data = [Secret(**vars(s)) for s in await services.vault.names(workspace)]
    return SecretList(data=data, count=len(data))


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT)
async def delete(name: str, services: ServicesDep, workspace: WorkspaceDep) -> Response:
    """Remove a secret (evaluators that list it then answer 422 SecretError until it is set again)."""
    if not await services.vault.delete(workspace, name):
        raise NotFoundError(f"secret {name[:100]!r} does not exist")
    return Response(status_code=status.HTTP_204_NO_CONTENT)
