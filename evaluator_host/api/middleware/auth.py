"""API keys: when any key is configured or stored, every ``/v1`` request needs ``Authorization: Bearer <key>``.

:class:`ApiKeyGate` checks the header before anything reads the request's body, so a client
without a valid key learns nothing about what it sent (a malformed or oversized body is a 401
like any other, never a 422 or 413 that has looked at it). The keys are the service's key ring
(:class:`~evaluator_host.tenancy.workspaces.Workspaces`): ``EVALUATOR_HOST_API_KEYS``, the operator key
and the workspaces' stored keys. Which workspace a key acts in, and the operator's 403 on a
workspace route, are the routes' business (``api/deps.py``). ``/healthz``, ``/metrics`` and the
OpenAPI documents stay open.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

from evaluator_host.tenancy.workspaces import DEFAULT_PRINCIPAL, Principal

__all__ = ["PRINCIPAL_KEY", "UNAUTHORIZED", "UNKNOWN_KEY", "ApiKeyGate", "bearer", "principal_of"]

PRINCIPAL_KEY = "evaluator_host.principal"  # the gate leaves the key's principal here for the fast path

UNAUTHORIZED = "a valid 'Authorization: Bearer <key>' header is required"
UNKNOWN_KEY = f"{UNAUTHORIZED} (this key is unknown or revoked)"


def _body(message: str) -> bytes:
    return json.dumps({"error": {"type": "Unauthorized", "message": message, "line": None, "column": None}}).encode()


_MISSING = _body(UNAUTHORIZED)
_UNKNOWN = _body(UNKNOWN_KEY)


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value (None when it is not one)."""
    scheme, _, token = (header or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def principal_of(found: Principal | None, auth_required: bool) -> Principal | None:
    """Who asks, given what the key ring ``found`` for the request's key (None: no key, or one it does not
    know): that principal; else, on an open service (no key configured or stored), the default
    workspace's; else nobody (401). The one rule of the routes (``api/deps.py``) and the fast path."""
    if found is not None:
        return found
    return None if auth_required else DEFAULT_PRINCIPAL


class ApiKeyGate:
    """ASGI layer: a ``/v1`` request without a live key is answered 401 here, its body unread.

    An open service (no key configured or stored) lets every request through, as it always did.
    A known key costs a hash and a dict lookup (the ring's cache); an unknown one a database read.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        services = getattr(scope["app"].state, "services", None) if "app" in scope else None
        if scope["type"] != "http" or services is None or not scope["path"].startswith("/v1"):
            await self.app(scope, receive, send)
            return
        ring = services.workspaces
        if not ring.auth_required:
            await self.app(scope, receive, send)
            return
        header = next((value for name, value in scope["headers"] if name == b"authorization"), None)
        token = bearer(header.decode("latin-1")) if header is not None else None
        found = await ring.resolve(token) if token is not None else None
        if found is not None:
            scope[PRINCIPAL_KEY] = found  # the fast path needs not hash and look the key up again
            await self.app(scope, receive, send)
            return
        body = _MISSING if token is None else _UNKNOWN
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"www-authenticate", b"Bearer"),
        ]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})
