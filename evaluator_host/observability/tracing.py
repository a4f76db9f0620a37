"""OpenTelemetry tracing, optional: off unless an OTLP/HTTP endpoint is configured.

Configured by ``OTEL_ENDPOINT`` (else the SDK's own ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_ENDPOINT``), ``OTEL_SERVICE_NAME`` and ``OTEL_SAMPLE_RATIO`` (see
:mod:`evaluator_host.settings`; docs/operations.md, "Tracing").

Off (the default), :func:`start` does nothing: no module of the OpenTelemetry SDK or exporter is
imported, no tracer provider exists, and every hook below answers the one shared no-op span
(``INVALID_SPAN`` of the OpenTelemetry API, which FastAPI has loaded anyway): the hot path creates
no span object and allocates nothing for tracing.

On, :func:`start` makes a tracer provider of the service's own — never the process-global one,
which FastAPI's built-in telemetry follows (it would add a second server span per request) and
which can be set only once per process — with a parent-based ratio sampler (a caller's
``traceparent`` decides for its trace; a trace starting here is kept with probability
``OTEL_SAMPLE_RATIO``) and a ``BatchSpanProcessor`` exporting OTLP/HTTP protobuf from a thread
of its own: a slow or dead collector costs requests nothing (past the queue's 2,048 spans, new
ones are dropped). :func:`stop` flushes what is queued, waiting at most 5 s.

The spans (what each carries is listed in docs/operations.md): one ``SERVER`` span per HTTP
request, named ``{method} {route template}`` (:func:`request`, from the outermost ASGI layer),
continuing the caller's W3C ``traceparent``; under it ``evaluate``, ``runtime.build``,
``pool.acquire`` (with ``worker.start`` when a worker had to be started) and ``worker.run``; and
``job.chunk`` (with ``job.commit``), each chunk the root of a trace of its own. Attributes never
carry a tenant, workspace or evaluator id, user code, inputs, outputs or secrets; a failure is
recorded by its exception's type only (``error.type``), never its message, which may quote the
evaluator's own output.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from contextlib import AbstractContextManager
from contextvars import Token
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import INVALID_SPAN, Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from evaluator_host.settings import Settings

if TYPE_CHECKING:  # imported for real only by start(), when tracing is on
    from opentelemetry.sdk.trace import TracerProvider

__all__ = [
    "MARKER",
    "Attributes",
    "RequestSpan",
    "enabled",
    "finish",
    "outcome",
    "request",
    "span",
    "start",
    "start_span",
    "stop",
    "traces_url",
]

log = logging.getLogger(__name__)

_SCOPE = "evaluator_host"
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"})
MARKER = "evaluator_host.evaluation"  # true on the service's own telemetry: never routed to online rules
_TRACE_HEADERS = {b"traceparent": "traceparent", b"tracestate": "tracestate"}  # W3C trace context; no baggage
_PROPAGATOR = TraceContextTextMapPropagator()
_ROOT = Context()  # a span started in it begins a trace of its own

Attributes = Mapping[str, AttributeValue]
_tracer: Tracer | None = None  # set while tracing is on; the hooks test it and nothing else
_provider: TracerProvider | None = None
_shutdown_s = 0.0  # the running provider's settings.otel_shutdown_s (set by start() with it)


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of ``endpoint``: itself, or with ``/v1/traces`` when it has no path."""
    return endpoint.rstrip("/") + "/v1/traces" if urlsplit(endpoint).path in ("", "/") else endpoint


def start(settings: Settings) -> bool:
    """Start tracing when ``settings`` configure an endpoint (whether it did). One service per process
    traces: a second :func:`start` replaces the first (which is stopped)."""
    global _tracer, _provider, _shutdown_s
    if not settings.otel_endpoint:
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBasedTraceIdRatio

    stop()
    version = importlib.metadata.version("evaluator-host")
    url = traces_url(settings.otel_endpoint)
    resource = Resource.create({"service.name": settings.otel_service_name, "service.version": version, MARKER: True})
    provider = TracerProvider(
        resource=resource, sampler=ParentBasedTraceIdRatio(settings.otel_sample_ratio), shutdown_on_exit=False
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url)))
    _provider, _tracer = provider, provider.get_tracer(_SCOPE, version)
    _shutdown_s = settings.otel_shutdown_s
    shown = urlsplit(url)._replace(netloc=urlsplit(url).netloc.rpartition("@")[2]).geturl()  # no credentials
    log.info("tracing: OTLP/HTTP to %s, sample ratio %g", shown, settings.otel_sample_ratio)
    return True


def stop() -> None:
    """Stop tracing: hooks answer no-op spans again; the queued spans are exported (for at most
    the provider's ``otel_shutdown_s`` setting, 5 s by default; a collector that does not answer by then gets
    nothing more)."""
    global _tracer, _provider
    provider, _tracer, _provider = _provider, None, None
    if provider is None:
        return
    ending = threading.Thread(target=provider.shutdown, name="evh-trace-shutdown", daemon=True)
    ending.start()
    ending.join(_shutdown_s)
    if ending.is_alive():
        log.warning("tracing: the collector did not take the last spans within %g s", _shutdown_s)


def enabled() -> bool:
    """Whether tracing is on (a hot path may skip its hook altogether when not)."""
    return _tracer is not None


def span(name: str, attributes: Attributes | None = None, *, root: bool = False) -> AbstractContextManager[Span]:
    """A span around a ``with`` block, current inside it (what starts there is its child); ``root``:
    the first span of a trace of its own. An exception leaving the block marks it failed (its type).
    Off: the shared no-op span."""
    tracer = _tracer
    if tracer is None:
        return _OFF
    return _current(tracer, name, attributes, root)


class _Off:
    """The ``with`` of a span when tracing is off: the no-op span, at the least cost."""

    __slots__ = ()

    def __enter__(self) -> Span:
        return INVALID_SPAN

    def __exit__(self, *exc: object) -> None:
        return None


_OFF = _Off()


@contextlib.contextmanager
def _current(tracer: Tracer, name: str, attributes: Attributes | None, root: bool) -> Iterator[Span]:
    started = tracer.start_span(
        name,
        context=_ROOT if root else None,
        attributes=attributes,
        record_exception=False,  # an exception event carries the message: never recorded
        set_status_on_exception=False,
    )
    token = otel_context.attach(trace.set_span_in_context(started))
    try:
        yield started
    except Exception as exc:  # (a cancellation is no failure of the span)
        _failed(started, type(exc).__qualname__)
        raise
    finally:
        otel_context.detach(token)
        started.end()


def start_span(name: str, attributes: Attributes | None = None) -> Span:
    """A span the caller ends (:func:`finish`), a child of the current one, never current itself.
    Off: the shared no-op span."""
    tracer = _tracer
    if tracer is None:
        return INVALID_SPAN
    return tracer.start_span(name, attributes=attributes, record_exception=False, set_status_on_exception=False)


def outcome(target: Span, statuses: Iterable[str]) -> None:
    """Record the outcome of ``target``'s cases: ``evaluator_host.status`` (the status every case shares,
    else ``mixed``) and ``evaluator_host.failed_cases`` (not ``ok``). Callers skip building ``statuses``
    when ``target.is_recording()`` is false."""
    seen: set[str] = set()
    failed = 0
    for status in statuses:
        seen.add(status)
        failed += status != "ok"
    if seen:
        target.set_attribute("evaluator_host.status", seen.pop() if len(seen) == 1 else "mixed")
        target.set_attribute("evaluator_host.failed_cases", failed)


def finish(target: Span, statuses: Iterable[str], error: BaseException | None = None) -> None:
    """End ``target`` (from :func:`start_span`) with its :func:`outcome`; ``error`` (an exception, not a
    cancellation) marks it failed."""
    if not target.is_recording():
        return
    outcome(target, statuses)
    if isinstance(error, Exception):
        _failed(target, type(error).__qualname__)
    target.end()


def _failed(target: Span, error_type: str) -> None:
    target.set_attribute("error.type", error_type)
    target.set_status(Status(StatusCode.ERROR, error_type))


class RequestSpan:
    """The server span of one HTTP request, current while the request runs."""

    __slots__ = ("method", "span", "token")

    def __init__(self, method: str, started: Span, token: Token[Context]) -> None:
        self.method = method
        self.span = started
        self.token = token

    @property
    def trace_id(self) -> str:
        """The trace's id (32 hex digits), for the access log line."""
        return format(self.span.get_span_context().trace_id, "032x")

    def end(self, route: str, status: int, error: BaseException | None) -> None:
        """Name it by ``route`` (the template; ``other``: no route matched), record ``status`` (5xx:
        failed, by ``error``'s type when it raised), end it, and make it no longer current."""
        target = self.span
        try:
            if target.is_recording():
                if route != "other":
                    target.update_name(f"{self.method} {route}")
                    target.set_attribute("http.route", route)
                target.set_attribute("http.response.status_code", status)
                if status >= 500:
                    _failed(target, type(error).__qualname__ if isinstance(error, Exception) else str(status))
            target.end()
        finally:
            otel_context.detach(self.token)


def request(scope: MutableMapping[str, Any], request_id: bytes) -> RequestSpan | None:
    """The server span of the HTTP request of ``scope`` (a child of its valid W3C ``traceparent``,
    else the root of a new trace), current until :meth:`RequestSpan.end`; None when tracing is off."""
    tracer = _tracer
    if tracer is None:
        return None
    carrier: dict[str, str] = {}
    for name, value in scope["headers"]:
        key = _TRACE_HEADERS.get(name)
        if key is not None and key not in carrier:
            carrier[key] = value.decode("latin-1")
    parent = _PROPAGATOR.extract(carrier) if carrier else _ROOT
    method = scope["method"] if scope["method"] in _METHODS else "_OTHER"  # a client may invent methods
    attributes: dict[str, AttributeValue] = {
        "http.request.method": method,
        "evaluator_host.request_id": request_id.decode(),
        "url.scheme": scope.get("scheme", "http"),
        "network.protocol.version": scope.get("http_version", "1.1"),
    }
    if method == "_OTHER":
        attributes["http.request.method_original"] = scope["method"][:32]
    started = tracer.start_span(
        method if method != "_OTHER" else "HTTP",
        context=parent,
        kind=SpanKind.SERVER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    )
    token = otel_context.attach(trace.set_span_in_context(started))
    return RequestSpan(method if method != "_OTHER" else "HTTP", started, token)
