"""``/v1/workspaces`` and ``/v1/keys``: the operator's routes (``EVALUATOR_HOST_ADMIN_KEY`` only)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response, status

from evaluator_host.api.deps import OperatorDep, ServicesDep
from evaluator_host.errors import DuplicateNameError, ErrorBody
from evaluator_host.services import Services
from evaluator_host.store.workspaces import ApiKeyRecord, WorkspaceRecord
from evaluator_host.tenancy.models import (
    ApiKey,
    ApiKeyCreated,
    ApiKeyList,
    ForwardEndpoint,
    KeyCreate,
    Quotas,
    Workspace,
    WorkspaceCreate,
    WorkspaceList,
    WorkspacePatch,
)

router = APIRouter(tags=["workspaces"])


def _workspace(record: WorkspaceRecord) -> Workspace:
    return Workspace(
        id=record.id,
        name=record.name,
        created_at=record.created_at,
        quotas=Quotas(**record.quotas),
        network_allow=record.network_allow,
        forwarding=[ForwardEndpoint.model_validate(entry) for entry in record.forwarding],
    )


def _key(record: ApiKeyRecord) -> ApiKey:
    return ApiKey(**vars(record))


def _unique_name(services: Services, name: str, renaming: str | None = None) -> None:
    """Refuse a name another workspace has (compared case-blind, spaces trimmed): 409 naming its id.
    Checked here, not by a database index, so a database that already holds two of a name keeps
    working (each is still reached by its id)."""
    wanted = name.strip().casefold()
    for record in services.workspaces.list_all():
        if record.id != renaming and record.name.strip().casefold() == wanted:
            raise DuplicateNameError(
                f"a workspace named {record.name!r} already exists ({record.id}); choose another name",
                existing_id=record.id,
            )


_TAKEN: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorBody, "description": "Conflict: another workspace has the name (+ existing_id)."}
}


@router.post("/workspaces", status_code=status.HTTP_201_CREATED, response_model=Workspace, responses=_TAKEN)
async def create(body: WorkspaceCreate, services: ServicesDep, _op: OperatorDep) -> Workspace:
    """A new workspace: no keys, no quotas, no network; a name another workspace has is a 409."""
    _unique_name(services, body.name)
    record = await services.workspaces.create(body.name)
    services.apply_workspace(record)
    return _workspace(record)


@router.get("/workspaces", response_model=WorkspaceList)
async def list_workspaces(services: ServicesDep, _op: OperatorDep) -> WorkspaceList:
    """Every workspace, oldest first (the default one included)."""
    data = [_workspace(r) for r in services.workspaces.list_all()]
    return WorkspaceList(data=data, count=len(data))


@router.get("/workspaces/{workspace_id}", response_model=Workspace)
async def get(workspace_id: str, services: ServicesDep, _op: OperatorDep) -> Workspace:
    """One workspace."""
    return _workspace(services.workspaces.get(workspace_id))


@router.patch("/workspaces/{workspace_id}", response_model=Workspace, responses=_TAKEN)
async def patch(workspace_id: str, body: WorkspacePatch, services: ServicesDep, _op: OperatorDep) -> Workspace:
    """Rename, set quotas (merged key by key; null lifts one), the egress allowlist or the span forwarding
    (each replaced)."""
    current = services.workspaces.get(workspace_id)
    changes: dict[str, Any] = {}
    if body.name is not None:
        _unique_name(services, body.name, workspace_id)
        changes["name"] = body.name
    if body.quotas is not None:
        merged = {**current.quotas, **body.quotas.model_dump(exclude_unset=True)}
        changes["quotas"] = {k: v for k, v in merged.items() if v is not None}
    if body.network_allow is not None:
        changes["network_allow"] = body.network_allow
    if body.forwarding is not None:
        changes["forwarding"] = [entry.model_dump() for entry in body.forwarding]
    record = await services.workspaces.update(workspace_id, **changes) if changes else current
    services.apply_workspace(record)
    return _workspace(record)


@router.post("/workspaces/{workspace_id}/keys", status_code=status.HTTP_201_CREATED, response_model=ApiKeyCreated)
async def create_key(workspace_id: str, body: KeyCreate, services: ServicesDep, _op: OperatorDep) -> ApiKeyCreated:
    """A new key of the workspace; ``key`` is shown this once (only its hash is stored)."""
    record, key = await services.workspaces.create_key(workspace_id, body.name)
    return ApiKeyCreated(**vars(record), key=key)


@router.get("/keys", response_model=ApiKeyList)
async def list_keys(services: ServicesDep, _op: OperatorDep, workspace_id: str | None = None) -> ApiKeyList:
    """Keys (of one workspace with ``?workspace_id=``), oldest first; never the keys themselves."""
    data = [_key(r) for r in await services.workspaces.keys(workspace_id)]
    return ApiKeyList(data=data, count=len(data))


@router.delete("/keys/{key_id}", status_code=status.HTTP_204_NO_CONTENT)
async def revoke(key_id: str, services: ServicesDep, _op: OperatorDep) -> Response:
    """Revoke a key: the next request with it answers 401."""
    await services.workspaces.revoke(key_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
