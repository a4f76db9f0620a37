"""Request dependencies: the services container and who is asking (the workspace of the key)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from evaluator_host.api.middleware.auth import UNAUTHORIZED, UNKNOWN_KEY, bearer, principal_of
from evaluator_host.errors import Forbidden, Unauthorized
from evaluator_host.services import Services
from evaluator_host.tenancy.workspaces import Principal

__all__ = [
    "OperatorDep",
    "PrincipalDep",
    "ServicesDep",
    "WorkspaceDep",
    "get_services",
    "operator",
    "principal",
    "workspace",
]


async def get_services(request: Request) -> Services:
    """The process's :class:`Services` (async: a sync dependency would cost a thread hop per request)."""
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


async def principal(request: Request) -> Principal:
    """Who is asking: the key's workspace (or the operator); the default workspace when the service
    is open (no key configured or stored) and no key is given. 401 for a missing or unknown key
    (:class:`~evaluator_host.api.middleware.auth.ApiKeyGate` already answered those before the body was read;
    this is the same rule on the route, in case a route is ever mounted past the gate)."""
    services: Services = request.app.state.services
    token = bearer(request.headers.get("authorization"))
    found = await services.workspaces.resolve(token) if token is not None else None
    who = principal_of(found, services.workspaces.auth_required)
    if who is None:
        raise Unauthorized(UNAUTHORIZED if token is None else UNKNOWN_KEY)
    return who


async def workspace(request: Request) -> str:
    """The workspace id a resource route acts in (403 for the operator key, which names none)."""
    who = await principal(request)
    if who.workspace_id is None:
        raise Forbidden(
            "the operator key manages workspaces and keys only; use a workspace's key for evaluators, "
            "datasets, jobs and secrets"
        )
    return who.workspace_id


async def operator(request: Request) -> Principal:
    """The operator (403 for a workspace key; 401 without a valid key)."""
    services: Services = request.app.state.services
    who = await principal(request)
    if not who.operator:
        hint = "" if services.settings.admin_key else " (none is configured: set EVALUATOR_HOST_ADMIN_KEY)"
        raise Forbidden(f"this route needs the operator key{hint}")
    return who


WorkspaceDep = Annotated[str, Depends(workspace)]
OperatorDep = Annotated[Principal, Depends(operator)]
PrincipalDep = Annotated[Principal, Depends(principal)]
