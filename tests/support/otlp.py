"""A real OTLP/HTTP trace (and log) receiver on loopback, for the tracing tests.

:class:`Collector` listens on ``127.0.0.1`` (a free port), accepts ``POST /v1/traces`` with an
``application/x-protobuf`` body, decodes it with ``opentelemetry-proto``
(``ExportTraceServiceRequest``) and answers an ``ExportTraceServiceResponse``, as an
OpenTelemetry Collector does. Every span it received is kept as a :class:`Received`; the raw
bodies are kept too (to prove what never went out). ``POST /v1/logs`` bodies are decoded as an
``ExportLogsServiceRequest`` into :class:`LogReceived` records (``Collector.logs``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.support.wait import wait_until

__all__ = ["CheckedExporter", "Collector", "LogReceived", "Received", "collector"]

KINDS = {1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
STATUSES = {0: "UNSET", 1: "OK", 2: "ERROR"}


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return None if kind is None else getattr(value, kind)


@dataclass(frozen=True)
class Received:
    """One span as the collector received it (ids as lowercase hex; no parent: ``""``)."""

    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    status: str
    status_message: str
    events: list[str]
    resource: dict[str, Any]
    duration_s: float


@dataclass(frozen=True)
class LogReceived:
    """One log record as the collector received it (ids as lowercase hex, ``""`` when absent)."""

    event_name: str
    severity_number: int
    severity_text: str
    trace_id: str
    span_id: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: str


@dataclass
class Collector:
    """The spans received so far (thread-safe), and where to send them."""

    port: int = 0
    spans: list[Received] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)  # of each trace request, names lowercased
    other_requests: list[str] = field(default_factory=list)
    logs: list[LogReceived] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def endpoint(self) -> str:
        """The base URL (what ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes)."""
        return f"http://127.0.0.1:{self.port}"

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        found = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    found.append(
                        Received(
                            name=s.name,
                            kind=KINDS.get(s.kind, str(s.kind)),
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            status=STATUSES[s.status.code],
                            status_message=s.status.message,
                            events=[e.name for e in s.events],
                            resource=resource,
                            duration_s=(s.end_time_unix_nano - s.start_time_unix_nano) / 1e9,
                        )
                    )
        with self.lock:
            self.bodies.append(body)
            self.spans.extend(found)

    def take_logs(self, body: bytes) -> None:
        request = ExportLogsServiceRequest()
        request.ParseFromString(body)
        found = [
            LogReceived(
                event_name=r.event_name,
                severity_number=r.severity_number,
                severity_text=r.severity_text,
                trace_id=r.trace_id.hex(),
                span_id=r.span_id.hex(),
                attributes={a.key: _value(a.value) for a in r.attributes},
                resource={a.key: _value(a.value) for a in rl.resource.attributes},
                scope=sl.scope.name,
            )
            for rl in request.resource_logs
            for sl in rl.scope_logs
            for r in sl.log_records
        ]
        with self.lock:
            self.logs.extend(found)

    def wait_for_logs(self, count: int, timeout: float = 15.0) -> list[LogReceived]:
        """The log records received, once there are at least ``count``."""

        def arrived() -> list[LogReceived] | None:
            with self.lock:
                return list(self.logs) if len(self.logs) >= count else None

        return wait_until(arrived, timeout, what=f"{count} log record(s)")

    def received(self) -> list[Received]:
        with self.lock:
            return list(self.spans)

    def wait_for(self, check: Callable[[list[Received]], bool], timeout: float = 15.0) -> list[Received]:
        """The spans received, once ``check`` holds for them (AssertionError after ``timeout`` s)."""

        def arrived() -> tuple[list[Received]] | None:
            spans = self.received()
            return (spans,) if check(spans) else None  # a tuple: truthy even when no span is what holds

        (spans,) = wait_until(arrived, timeout, what="the spans")
        return spans

    def trace(self, trace_id: str, names: set[str], timeout: float = 15.0) -> dict[str, list[Received]]:
        """The spans of ``trace_id`` by name, once every name of ``names`` arrived."""
        spans = self.wait_for(lambda got: names <= {s.name for s in got if s.trace_id == trace_id}, timeout)
        by_name: dict[str, list[Received]] = {}
        for s in spans:
            if s.trace_id == trace_id:
                by_name.setdefault(s.name, []).append(s)
        return by_name


@contextmanager
def collector() -> Iterator[Collector]:
    """A :class:`Collector` serving on a thread until the block ends."""
    state = Collector()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server hook
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            if self.path == "/v1/logs" and self.headers.get("content-type") == "application/x-protobuf":
                state.take_logs(body)
                done = ExportLogsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(done)))
                self.end_headers()
                self.wfile.write(done)
                return
            if self.path != "/v1/traces" or self.headers.get("content-type") != "application/x-protobuf":
                state.other_requests.append(f"{self.path} {self.headers.get('content-type')}")
                self.send_response(404)
                self.end_headers()
                return
            with state.lock:
                state.headers.append({k.lower(): v for k, v in self.headers.items()})
            state.take(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


class CheckedExporter(OTLPSpanExporter):
    """The SDK's OTLP/HTTP span exporter, remembering each export's result, with a patient timeout.

    The SDK drops a batch its exporter could not deliver (an answer slower than its 10 s default on a
    loaded machine, a refusal) with a log line only: a test then waits for scores of traces that never
    arrived. :meth:`delivered` says whether every export succeeded — assert it after the provider's
    shutdown, so an undelivered trace fails at once, named as such."""

    def __init__(self, endpoint: str, timeout: float = 60.0) -> None:
        super().__init__(endpoint=endpoint, timeout=timeout)
        self.results: list[SpanExportResult] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = super().export(spans)
        self.results.append(result)
        return result

    def delivered(self) -> bool:
        """Whether at least one export ran and every one succeeded."""
        return bool(self.results) and all(r is SpanExportResult.SUCCESS for r in self.results)
