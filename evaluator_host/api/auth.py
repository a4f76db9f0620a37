"""API keys: when ``EVALUATOR_HOST_API_KEYS`` is set, every ``/v1`` request needs ``Authorization: Bearer <key>``.

:class:`ApiKeyGate` checks the header before anything reads the request's body, so a client
without a key learns nothing about what it sent (a malformed or oversized body is a 401 like
any other, never a 422 or 413 that has looked at it). ``/healthz``, ``/metrics`` and the
OpenAPI documents stay open.
"""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["UNAUTHORIZED", "ApiKeyGate", "bearer_ok"]

UNAUTHORIZED = "a valid 'Authorization: Bearer <key>' header is required"
_BODY = json.dumps({"error": {"type": "Unauthorized", "message": UNAUTHORIZED, "line": None, "column": None}}).encode()


def bearer_ok(authorization: bytes, keys: list[bytes]) -> bool:
    """Whether an ``Authorization`` header value carries one of ``keys`` (constant-time compares)."""
    scheme, _, token = authorization.partition(b" ")
    return scheme.lower() == b"bearer" and any(hmac.compare_digest(token, k) for k in keys)


class ApiKeyGate:
    """ASGI layer: a ``/v1`` request without a valid key is answered 401 here, its body unread."""

    def __init__(self, app: ASGIApp, keys: list[str]) -> None:
        self.app = app
        self.keys = [k.encode() for k in keys]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.keys or not scope["path"].startswith("/v1"):
            await self.app(scope, receive, send)
            return
        authorization = next((value for name, value in scope["headers"] if name == b"authorization"), b"")
        if bearer_ok(authorization, self.keys):
            await self.app(scope, receive, send)
            return
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(_BODY)).encode()),
            (b"www-authenticate", b"Bearer"),
        ]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": _BODY})
