"""Scores sent back to the application's tracing backend as OpenTelemetry ``gen_ai.evaluation.result``.

Contract (docs/online.md, "Scores back into your tracing backend"): with ``online_export_endpoint``
set, :meth:`ScoreExporter.export` turns one stored score into one span named ``evaluation {name}``
in the evaluated trace — same trace id, its parent the evaluated span (a remote parent built from
the hex ids; with no span id, a root span of that trace) — carrying the GenAI semantic
conventions' ``gen_ai.evaluation.result`` event *and* the same attributes on the span itself
(``gen_ai.evaluation.name``, ``gen_ai.evaluation.score.value``, ``gen_ai.evaluation.score.label``,
``gen_ai.evaluation.explanation``, ``error.type``), so backends that read events and those that
read span attributes both show it. Never blocking: the span is handed to a ``BatchSpanProcessor``
(OTLP/HTTP protobuf from its own thread; past its queue, spans are dropped) of a tracer provider of
this exporter's own, never the process-global one nor the service's own tracing's. Never raising:
an unusable id or value is logged and skipped. Unset endpoint: every method is a no-op and no
OpenTelemetry SDK module is imported.

Also as an OTLP **log record** (the GenAI conventions' event form; ``online_export_signals``:
``both``, the default, ``spans`` or ``logs``): event name ``gen_ai.evaluation.result``, severity
INFO, the same ``gen_ai.evaluation.*`` and ``error.type`` attributes plus the ``evaluator_host.*``
ones, the evaluated span's trace and span ids; sent by a ``BatchLogRecordProcessor`` of a logger
provider of this exporter's own to ``…/v1/logs`` (:func:`logs_url`). Both carry the resource
attribute :data:`MARKER` (``evaluator_host.evaluation=true``), and the span the same attribute, so a
receiver that is this service again never routes them to rules (``online.router``).
"""

from __future__ import annotations

import contextvars
import importlib.metadata
import logging
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util.re import parse_env_headers
from opentelemetry.util.types import AttributeValue

from evaluator_host.observability.tracing import MARKER, traces_url
from evaluator_host.settings import Settings

if TYPE_CHECKING:
    from opentelemetry.sdk._logs import Logger, LoggerProvider
    from opentelemetry.sdk.trace import TracerProvider

__all__ = ["EVENT_NAME", "MARKER", "ScoreExporter", "evaluation_attributes", "logs_url"]

log = logging.getLogger(__name__)

EVENT_NAME = "gen_ai.evaluation.result"
_SCOPE = "evaluator_host.online"
_SHUTDOWN_S = 5.0
_MAX_TEXT = 4096  # an explanation's characters sent (the stored result keeps it whole)
_trace_id: contextvars.ContextVar[int | None] = contextvars.ContextVar("evh_export_trace_id", default=None)


def _hex_id(value: str | None, digits: int) -> int | None:
    if not value or len(value) != digits:
        return None
    try:
        number = int(value, 16)
    except ValueError:
        return None
    return number or None  # all zeros is OpenTelemetry's invalid id


def logs_url(endpoint: str) -> str:
    """The OTLP/HTTP logs URL of ``endpoint``: ``/v1/logs`` appended to a URL without a path, put in place
    of a trailing ``/v1/traces`` (the form the span export's setting takes), else appended to the path."""
    path = urlsplit(endpoint).path
    if path in ("", "/"):
        return endpoint.rstrip("/") + "/v1/logs"
    if path.rstrip("/").endswith("/v1/traces"):
        return endpoint.rstrip("/").removesuffix("/v1/traces") + "/v1/logs"
    return endpoint.rstrip("/") + "/v1/logs"


def evaluation_attributes(rule: Mapping[str, Any], result: Mapping[str, Any]) -> dict[str, AttributeValue]:
    """The attributes of the event and of the span for one score (None values left out)."""
    name = rule.get("name") or rule.get("id") or "evaluation"
    out: dict[str, AttributeValue] = {"gen_ai.evaluation.name": str(name)}
    score = result.get("score")
    if isinstance(score, int | float) and not isinstance(score, bool):
        out["gen_ai.evaluation.score.value"] = float(score)
    passed = result.get("passed")
    label = result.get("label")
    if label is None and isinstance(passed, bool):
        label = "pass" if passed else "fail"
    if label is not None:
        out["gen_ai.evaluation.score.label"] = str(label)[:200]
    explanation = result.get("reason") or result.get("explanation")
    if explanation:
        out["gen_ai.evaluation.explanation"] = str(explanation)[:_MAX_TEXT]
    status = result.get("status")
    if status and status != "ok":
        error = result.get("error")
        kind = error.get("type") if isinstance(error, Mapping) else None
        out["error.type"] = str(kind or status)[:200]
    for key, value in (
        ("evaluator_host.rule_id", rule.get("id")),
        ("evaluator_host.evaluator_id", rule.get("evaluator_id") or result.get("evaluator_id")),
        ("evaluator_host.revision", result.get("revision")),
        ("evaluator_host.status", status),
        ("evaluator_host.passed", passed),
    ):
        if isinstance(value, str | int | float | bool):
            out[key] = value
    return out


class ScoreExporter:
    """Sends scores as ``gen_ai.evaluation.result`` spans and/or log records when
    ``settings.online_export_endpoint`` is set."""

    def __init__(self, settings: Settings) -> None:
        self._provider: TracerProvider | None = None
        self._tracer: trace.Tracer | None = None
        self._log_provider: LoggerProvider | None = None
        self._logger: Logger | None = None
        self._lock = threading.Lock()
        if settings.online_export_endpoint:
            self._start(settings, settings.online_export_endpoint)

    @property
    def enabled(self) -> bool:
        """Whether scores are sent anywhere."""
        return self._tracer is not None or self._logger is not None

    def _start(self, settings: Settings, endpoint: str) -> None:
        from opentelemetry.sdk.resources import Resource

        version = importlib.metadata.version("evaluator-host")
        headers = parse_env_headers(settings.online_export_headers or "", liberal=True)
        resource = Resource.create(
            {"service.name": settings.otel_service_name, "service.version": version, MARKER: True}
        )
        if settings.online_export_signals in ("both", "spans"):
            self._start_spans(resource, endpoint, headers, version)
        if settings.online_export_signals in ("both", "logs"):
            from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
            from opentelemetry.sdk._logs import LoggerProvider
            from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

            logs = LoggerProvider(resource=resource, shutdown_on_exit=False)
            exporter = OTLPLogExporter(endpoint=logs_url(endpoint), headers=headers, timeout=_SHUTDOWN_S)
            logs.add_log_record_processor(BatchLogRecordProcessor(exporter))
            self._log_provider, self._logger = logs, cast("Logger", logs.get_logger(_SCOPE, version))

    def _start_spans(self, resource: Any, endpoint: str, headers: Mapping[str, str], version: str) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON

        class _InTrace(RandomIdGenerator):
            """A root span's trace id: the evaluated trace's when :meth:`export` set one."""

            def generate_trace_id(self) -> int:
                return _trace_id.get() or super().generate_trace_id()

        provider = TracerProvider(resource=resource, sampler=ALWAYS_ON, id_generator=_InTrace(), shutdown_on_exit=False)
        provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url(endpoint), headers=headers, timeout=_SHUTDOWN_S))
        )
        self._provider, self._tracer = provider, provider.get_tracer(_SCOPE, version)

    def export(self, trace_id: str, span_id: str | None, rule: dict[str, Any], result: dict[str, Any]) -> None:
        """Queue the score ``result`` (an EvaluationResult's JSON) of ``rule`` on the span ``span_id`` of
        ``trace_id`` (hex ids). Returns at once; never raises."""
        tracer, logger = self._tracer, self._logger
        if tracer is None and logger is None:
            return
        try:
            trace_number = _hex_id(trace_id, 32)
            if trace_number is None:
                log.warning("online export: %r is not a trace id; the score is not sent", trace_id[:64])
                return
            attributes = evaluation_attributes(rule, result)
            if tracer is not None:
                self._export(tracer, trace_number, _hex_id(span_id, 16), attributes, result)
            if logger is not None:
                self._log(logger, trace_number, _hex_id(span_id, 16), attributes)
        except Exception:  # a score is never lost for its export: the stored row is the truth
            log.exception("online export: the score of trace %s could not be queued", trace_id[:32])

    @staticmethod
    def _log(logger: Logger, trace_number: int, span_number: int | None, attributes: dict[str, AttributeValue]) -> None:
        from opentelemetry._logs import LogRecord, SeverityNumber

        flags = TraceFlags(TraceFlags.SAMPLED)
        evaluated = SpanContext(trace_number, span_number or 0, is_remote=True, trace_flags=flags)
        record = LogRecord(
            timestamp=time.time_ns(),
            context=trace.set_span_in_context(NonRecordingSpan(evaluated)),  # its trace and span ids
            severity_number=SeverityNumber.INFO,
            severity_text="INFO",
            attributes=attributes,
            event_name=EVENT_NAME,
        )
        logger.emit(record)

    def _export(
        self,
        tracer: trace.Tracer,
        trace_number: int,
        parent_number: int | None,
        attributes: dict[str, AttributeValue],
        result: dict[str, Any],
    ) -> None:
        parent = trace.set_span_in_context(
            NonRecordingSpan(
                SpanContext(trace_number, parent_number, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
            )
            if parent_number is not None
            else trace.INVALID_SPAN
        )
        name = str(attributes["gen_ai.evaluation.name"])
        end_ns = time.time_ns()
        duration = result.get("duration_ms")
        took_ns = int(duration * 1e6) if isinstance(duration, int | float) and 0 <= duration < 86_400_000 else 0
        token = _trace_id.set(trace_number)
        try:
            span = tracer.start_span(
                f"evaluation {name}",
                context=parent,
                kind=SpanKind.INTERNAL,
                attributes={**attributes, MARKER: True},
                start_time=end_ns - took_ns,
                record_exception=False,
                set_status_on_exception=False,
            )
        finally:
            _trace_id.reset(token)
        event = {k: v for k, v in attributes.items() if k.startswith("gen_ai.") or k == "error.type"}
        span.add_event(EVENT_NAME, event, timestamp=end_ns)
        if "error.type" in attributes:
            span.set_status(Status(StatusCode.ERROR, str(attributes["error.type"])))
        span.end(end_time=end_ns)

    def shutdown(self) -> None:
        """Send what is queued (waiting at most 5 s) and stop; later exports are no-ops."""
        with self._lock:
            provider, self._provider, self._tracer = self._provider, None, None
            logs, self._log_provider, self._logger = self._log_provider, None, None
        if provider is None and logs is None:
            return

        def end() -> None:
            for one in (provider, logs):
                if one is not None:
                    one.shutdown()

        ending = threading.Thread(target=end, name="evh-score-export-shutdown", daemon=True)
        ending.start()
        ending.join(_SHUTDOWN_S)
        if ending.is_alive():
            log.warning("online export: the endpoint did not take the last scores within %.0f s", _SHUTDOWN_S)
