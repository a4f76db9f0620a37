"""Request dependencies: the services container and API-key auth."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request, status

from evaluator_host.api.auth import UNAUTHORIZED, bearer_ok
from evaluator_host.services import Services

__all__ = ["ServicesDep", "get_services", "require_api_key"]


async def get_services(request: Request) -> Services:
    """The process's :class:`Services` (async: a sync dependency would cost a thread hop per request)."""
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


async def require_api_key(request: Request) -> None:
    """When API keys are configured, require ``Authorization: Bearer <key>`` (401 otherwise).

    :class:`~evaluator_host.api.auth.ApiKeyGate` already refused such requests before their body
    was read; this is the same rule on the route, in case a route is ever mounted past the gate.
    """
    keys = request.app.state.settings.api_keys
    if not keys:
        return
    if bearer_ok(request.headers.get("authorization", "").encode("latin-1"), [k.encode() for k in keys]):
        return
    raise HTTPException(
        status_code=status.HTTP_401_UNAUTHORIZED,
        detail=UNAUTHORIZED,
        headers={"WWW-Authenticate": "Bearer"},
    )
