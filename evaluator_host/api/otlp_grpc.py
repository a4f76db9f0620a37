"""OTLP/gRPC in: ``opentelemetry.proto.collector.trace.v1.TraceService/Export`` (docs/online.md).

Served on ``otlp_grpc_port`` (unset: not served) by a ``grpc`` server (its own threads) the service's lifespan
starts and stops (:func:`start`, :meth:`GrpcReceiver.stop`), on the service's ``host``; TLS when
``otlp_grpc_tls_cert`` and ``otlp_grpc_tls_key`` are set. One path with ``POST /v1/traces``: the
request's message reaches :meth:`~evaluator_host.online.receive.ingest.Ingest.receive` as the protobuf bytes
it came as (no parse here), so the span store's share, the decode bounds, the storage quota and the
partial success are the receiver's own. The answer is the ``ExportTraceServiceResponse`` the HTTP
route sends.

Authentication as every ``/v1`` route: the ``authorization`` metadata (``Bearer <key>``) names the
workspace that gets the spans; an open service takes them into the default workspace. Refusals, as the
OTLP specification maps them: no or an unknown key ``UNAUTHENTICATED``; the operator key
``PERMISSION_DENIED``; a malformed request or one over a decode bound (spans, attributes)
``INVALID_ARGUMENT`` (not retried); a message over ``online_max_body_bytes`` (as sent or inflated)
``RESOURCE_EXHAUSTED`` from gRPC itself, without ``RetryInfo`` (not retried); the workspace's share of
the span store full or its storage quota used up ``RESOURCE_EXHAUSTED`` *with* ``RetryInfo``
(``google.rpc.Status`` details in ``grpc-status-details-bin``: exporters retry after that delay).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from google.protobuf.any_pb2 import Any as AnyMessage
from google.protobuf.duration_pb2 import Duration
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status

from evaluator_host.api.middleware.auth import UNAUTHORIZED, UNKNOWN_KEY, principal_of
from evaluator_host.errors import QuotaExceeded
from evaluator_host.online.receive.otlp import PROTOBUF, OtlpError
from evaluator_host.online.receive.otlp_answers import answer
from evaluator_host.services import Services

__all__ = ["SERVICE", "GrpcReceiver", "start"]

log = logging.getLogger(__name__)

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
RETRY_AFTER_S = 30  # the span store's share full: about one retention pass (as the HTTP route's Retry-After)
_STOP_GRACE_S = 5.0
_STREAMS = 8  # HTTP/2 streams at once on one connection (each message up to online_max_body_bytes in memory)
_CODES = {400: grpc.StatusCode.INVALID_ARGUMENT, 413: grpc.StatusCode.INVALID_ARGUMENT}
_OUTCOMES = {400: "invalid", 413: "too_large", 415: "unsupported"}


class _Refused(Exception):
    """An RPC answered with ``code``; ``retry_after_s`` becomes a ``RetryInfo`` detail."""

    def __init__(self, code: grpc.StatusCode, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.retry_after_s = code, message, retry_after_s


def _bearer(metadata: Any) -> str | None:
    for key, value in metadata or ():
        if key.lower() == "authorization" and isinstance(value, str):
            scheme, _, token = value.partition(" ")
            return token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return None


class GrpcReceiver:
    """The ``TraceService`` of one service: its ``Export`` handler over ``services``, run on the gRPC
    server's own threads (the decode and the store are blocking work: no hop through the event loop;
    only a key the ring has not cached is looked up on the service's loop)."""

    def __init__(self, services: Services, loop: asyncio.AbstractEventLoop) -> None:
        self.services = services
        self.loop = loop
        self.server: grpc.Server | None = None
        self.threads: ThreadPoolExecutor | None = None
        self.port = 0

    def _workspace(self, context: grpc.ServicerContext) -> str:
        ring = self.services.workspaces
        token = _bearer(context.invocation_metadata())
        found = None
        if token is not None:
            found = ring.cached(token) or asyncio.run_coroutine_threadsafe(ring.resolve(token), self.loop).result(30)
        who = principal_of(found, ring.auth_required)
        if who is None:
            raise _Refused(grpc.StatusCode.UNAUTHENTICATED, UNKNOWN_KEY if token else UNAUTHORIZED)
        if who.workspace_id is None:
            raise _Refused(
                grpc.StatusCode.PERMISSION_DENIED, "the operator key names no workspace: use a workspace's key"
            )
        return who.workspace_id

    def _receive(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        ingest, metrics = self.services.ingest, self.services.pool.metrics.online_requests
        workspace = self._workspace(context)
        full = ingest.full_message(workspace)
        if full is not None:
            metrics.labels("full").inc()
            raise _Refused(grpc.StatusCode.RESOURCE_EXHAUSTED, full, RETRY_AFTER_S)
        try:
            decoded = ingest.receive(workspace, request, PROTOBUF, None)
        except OtlpError as exc:
            metrics.labels(_OUTCOMES.get(exc.status, "invalid")).inc()
            raise _Refused(_CODES.get(exc.status, grpc.StatusCode.INVALID_ARGUMENT), exc.message) from None
        except QuotaExceeded as exc:  # none of the spans fits under the workspace's storage quota
            metrics.labels("quota").inc()
            raise _Refused(
                grpc.StatusCode.RESOURCE_EXHAUSTED, exc.message, exc.retry_after_s or RETRY_AFTER_S
            ) from None
        metrics.labels("partial" if decoded.rejected else "ok").inc()
        return answer(PROTOBUF, decoded)

    def export(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        """``TraceService/Export``: the serialized request in, the serialized response out."""
        try:
            return self._receive(request, context)
        except _Refused as refused:
            if refused.retry_after_s is not None:
                detail = AnyMessage()
                detail.Pack(RetryInfo(retry_delay=Duration(seconds=refused.retry_after_s)))
                status = Status(code=refused.code.value[0], message=refused.message, details=[detail])
                context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
            context.abort(refused.code, refused.message)
            raise  # abort raises; this line is never reached

    async def stop(self) -> None:
        """Stop serving: in-flight exports get a few seconds to finish."""
        server, self.server = self.server, None
        if server is not None:
            await asyncio.to_thread(lambda: server.stop(_STOP_GRACE_S).wait(_STOP_GRACE_S + 1))
        if self.threads is not None:
            self.threads.shutdown(wait=False)
            self.threads = None


async def start(services: Services) -> GrpcReceiver | None:
    """Serve ``TraceService/Export`` when ``otlp_grpc_port`` is set (else None); raises ``ValueError`` for
    half a TLS configuration and ``RuntimeError`` when the port cannot be bound."""
    settings = services.settings
    if settings.otlp_grpc_port is None:
        return None
    if (settings.otlp_grpc_tls_cert is None) != (settings.otlp_grpc_tls_key is None):
        raise ValueError("EVALUATOR_HOST_OTLP_GRPC_TLS_CERT and EVALUATOR_HOST_OTLP_GRPC_TLS_KEY go together")
    receiver = GrpcReceiver(services, asyncio.get_running_loop())
    limit = settings.online_max_body_bytes  # gRPC refuses a larger message, as sent or inflated
    options = [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", 4 * 1024 * 1024),
        ("grpc.max_concurrent_streams", _STREAMS),  # per connection: a client's next exports wait their turn
    ]
    workers = max(4, 2 * settings.online_decode_concurrency)
    threads = ThreadPoolExecutor(workers, thread_name_prefix="evh-otlp-grpc")
    # RPCs in flight or waiting for a thread are bounded too (more connections are no way around
    # max_concurrent_streams): past it, RESOURCE_EXHAUSTED at once, and exporters retry
    server = grpc.server(threads, options=options, maximum_concurrent_rpcs=4 * workers)
    handler = grpc.unary_unary_rpc_method_handler(receiver.export)  # no (de)serializers: bytes in and out
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),))
    address = (
        f"[{settings.host}]:{settings.otlp_grpc_port}"
        if ":" in settings.host
        else (f"{settings.host}:{settings.otlp_grpc_port}")
    )
    if settings.otlp_grpc_tls_cert is not None and settings.otlp_grpc_tls_key is not None:
        pair = (settings.otlp_grpc_tls_key.read_bytes(), settings.otlp_grpc_tls_cert.read_bytes())
        port = server.add_secure_port(address, grpc.ssl_server_credentials([pair]))
    else:
        port = server.add_insecure_port(address)
    if not port:
        raise RuntimeError(f"the OTLP/gRPC receiver could not bind {address}")
    server.start()
    receiver.server, receiver.threads, receiver.port = server, threads, port
    log.info("OTLP/gRPC receiver on %s (%s)", address, "TLS" if settings.otlp_grpc_tls_cert else "plaintext")
    return receiver
