"""Request body size limit (413), enforced on the declared length and on the bytes read.

The rule is written once here and read by the fast path too: :func:`body_limit` (a path's limit:
``MAX_DATASET_BYTES`` for dataset uploads, ``ONLINE_MAX_BODY_BYTES`` for the OTLP receiver, else
``MAX_BODY_BYTES``), :func:`declared_length` (the
``Content-Length`` a request declares) and :func:`declared_too_large` (a declared length over it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from evaluator_host.settings import Settings

__all__ = ["BodyLimitMiddleware", "body_limit", "declared_length", "declared_too_large"]

_UPLOADS = "/v1/datasets"  # a path with a limit of its own (a dataset upload)
_OTLP = "/v1/traces"  # the OTLP receiver: its route enforces body_limit itself, answering in OTLP's encoding


def body_limit(settings: Settings, path: str) -> int:
    """The most bytes a request body to ``path`` may have."""
    path = path.rstrip("/")
    if path == _OTLP:
        return settings.online_max_body_bytes
    return settings.max_dataset_bytes if path == _UPLOADS else settings.max_body_bytes


def declared_length(headers: Iterable[tuple[bytes, bytes]]) -> int | None:
    """The body length a request declares (``Content-Length``; None without one, or when it is no number)."""
    for name, value in headers:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


def declared_too_large(settings: Settings, scope: Scope) -> bool:
    """Whether the request declares a body over its path's :func:`body_limit` (the 413 before reading)."""
    length = declared_length(scope.get("headers", []))
    return length is not None and length > body_limit(settings, scope.get("path", ""))


class _TooLarge(Exception):
    pass


class BodyLimitMiddleware:
    """Answer 413 for bodies over their path's :func:`body_limit`."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def _reject(self, send: Send, max_bytes: int) -> None:
        body = json.dumps(
            {
                "error": {
                    "type": "PayloadTooLarge",
                    "message": f"the request body exceeds {max_bytes} bytes",
                    "line": None,
                    "column": None,
                }
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") == _OTLP:  # the receiver answers 413 in OTLP's encoding
            await self.app(scope, receive, send)
            return
        max_bytes = body_limit(self.settings, scope.get("path", ""))
        if declared_too_large(self.settings, scope):
            await self._reject(send, max_bytes)
            return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > max_bytes:
                    raise _TooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not started:
                await self._reject(send, max_bytes)
