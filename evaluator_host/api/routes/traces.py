"""``POST /v1/traces``: the OTLP/HTTP trace receiver (docs/online.md).

Authenticated like every ``/v1`` route (``Authorization: Bearer <key>``, the key's workspace gets
the spans). The route reads the body itself, streaming, up to ``online_max_body_bytes``
(``BodyLimitMiddleware`` leaves this path to it, so a refusal comes in the request's encoding) and
hands the rest to :class:`~evaluator_host.online.receive.ingest.Ingest` on a thread. Answers, always in the
request's encoding (protobuf or JSON): 200 with an ``ExportTraceServiceResponse`` (its
``partial_success`` counts the spans rejected, and why); 400 (malformed, too many spans), 413 (body
over the bound, as sent or inflated), 415 (another Content-Type or Content-Encoding) with a
``google.rpc.Status``; 429 ``QuotaExceeded`` (``quota``: ``max_dataset_bytes``, with ``Retry-After``)
when none of the spans fits under the workspace's storage quota; 503 with ``Retry-After`` when the
workspace holds its share of the span store (exporters retry both).
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, Response

from evaluator_host.api.deps import ServicesDep, WorkspaceDep
from evaluator_host.api.middleware.limits import body_limit, declared_length
from evaluator_host.errors import QuotaExceeded
from evaluator_host.online.receive.otlp import JSON, PROTOBUF, OtlpError, media_type
from evaluator_host.online.receive.otlp_answers import answer, error_answer

__all__ = ["router"]

router = APIRouter(tags=["online"])

_RETRY_AFTER_S = 30  # when the span store is full: about one retention pass
_KINDS = {
    400: "BadRequest",
    413: "PayloadTooLarge",
    415: "UnsupportedMediaType",
    429: "QuotaExceeded",
    503: "Unavailable",
}
_OUTCOMES = {400: "invalid", 413: "too_large", 415: "unsupported", 429: "quota", 503: "full"}
_BODY = {
    "requestBody": {
        "required": True,
        "description": "An OTLP `ExportTraceServiceRequest`, optionally with `Content-Encoding: gzip`.",
        "content": {PROTOBUF: {"schema": {"type": "string", "format": "binary"}}, JSON: {"schema": {"type": "object"}}},
    },
    "responses": {
        "200": {
            "description": "An OTLP `ExportTraceServiceResponse` (`partialSuccess` when spans were rejected), "
            "in the request's encoding.",
            "content": {
                PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
                JSON: {"schema": {"type": "object"}},
            },
        },
        "415": {"description": "Another Content-Type than OTLP's two, or another Content-Encoding than gzip."},
    },
}


def _refusal(
    services: ServicesDep,
    media: str,
    status: int,
    message: str,
    quota: str | None = None,
    retry_after_s: int | None = _RETRY_AFTER_S,
) -> Response:
    services.pool.metrics.online_requests.labels(_OUTCOMES.get(status, "invalid")).inc()
    retry = status in (429, 503) and retry_after_s is not None
    headers = {"Retry-After": str(retry_after_s)} if retry else None
    body = error_answer(media, status, message, _KINDS.get(status, "BadRequest"), quota=quota)
    return Response(body, status_code=status, media_type=media, headers=headers)


@router.post("/traces", response_class=Response, openapi_extra=_BODY)
async def export_traces(request: Request, workspace: WorkspaceDep, services: ServicesDep) -> Response:
    """Receive spans over OTLP/HTTP into the key's workspace (see the module docstring)."""
    try:
        media = media_type(request.headers.get("content-type"))
    except OtlpError as exc:
        return _refusal(services, JSON, exc.status, exc.message)
    full = services.ingest.full_message(workspace)
    if full is not None:
        return _refusal(services, media, 503, full)
    limit = body_limit(services.settings, request.url.path)
    declared = declared_length(request.scope["headers"])
    too_large = f"the request body exceeds {limit} bytes (online_max_body_bytes)"
    if declared is not None and declared > limit:
        return _refusal(services, media, 413, too_large)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:  # stop reading: the connection is closed after the answer
            return _refusal(services, media, 413, too_large)
        chunks.append(chunk)
    encoding = request.headers.get("content-encoding")
    try:
        decoded = await asyncio.to_thread(services.ingest.receive, workspace, b"".join(chunks), media, encoding)
    except OtlpError as exc:
        return _refusal(services, media, exc.status, exc.message)
    except QuotaExceeded as exc:  # none of the spans fits under the workspace's storage quota
        return _refusal(services, media, exc.status, exc.message, quota=exc.quota, retry_after_s=exc.retry_after_s)
    services.pool.metrics.online_requests.labels("partial" if decoded.rejected else "ok").inc()
    return Response(answer(media, decoded), media_type=media)
