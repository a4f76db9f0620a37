"""The physical floor of OTLP/HTTP ingestion here: a bare endpoint that receives a body and decodes it.

An ASGI app with nothing but ``POST /v1/traces``, served by the same uvicorn as the service: it reads the
body, parses it with the same proto package the service uses (``opentelemetry-proto``'s
``ExportTraceServiceRequest.FromString``, upb), counts the spans — so the parse is not skipped — and
answers an empty ``ExportTraceServiceResponse``: no auth, no checks, nothing stored.
``bench/online_bench.py`` runs it beside the service in the same run (its "receive-decode-and-drop
floor"). Run alone: ``.venv/bin/python -m uvicorn bench.online_floor:app --port 8001``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

__all__ = ["app"]

Message = MutableMapping[str, Any]
_ANSWER = bytes(ExportTraceServiceResponse().SerializeToString())
_HEADERS = [(b"content-type", b"application/x-protobuf"), (b"content-length", str(len(_ANSWER)).encode())]
spans_seen = 0  # spans decoded since the start (read by nothing: it keeps the parse observable)


async def app(
    scope: Message, receive: Callable[[], Awaitable[Message]], send: Callable[[Message], Awaitable[None]]
) -> None:
    """Receive, decode, drop; ``/healthz`` answers 200 (the bench's readiness probe)."""
    global spans_seen
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    chunks = []
    more = True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    if scope["path"] == "/v1/traces":
        request = ExportTraceServiceRequest.FromString(b"".join(chunks))
        spans_seen += sum(len(s.spans) for rs in request.resource_spans for s in rs.scope_spans)
    await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
    await send({"type": "http.response.body", "body": _ANSWER})
