"""OTLP/HTTP trace bodies in, :class:`~evaluator_host.evaluation.trace_shape.SpanData` out, and the answers.

Decoding is the OpenTelemetry project's own ``opentelemetry-proto`` messages: ``application/x-protobuf``
bodies with ``ExportTraceServiceRequest.FromString``; ``application/json`` (OTLP/JSON) with
``google.protobuf.json_format`` after one fix the OTLP spec makes to proto3's JSON mapping — ``traceId``,
``spanId`` and ``parentSpanId`` (also of links) are *hex* strings there, not base64 (a non-hex string
that is base64 is still taken as base64, as some old exporters sent it). Enums may be numbers or
names, int64s numbers or strings, and unknown fields are ignored (all json_format's rules). ``Content-Encoding:
gzip`` is inflated first by :func:`~evaluator_host.online.receive.inflate.inflate`, within the bound.

Contract of :func:`decode`: a body it cannot parse, or with more than ``Limits.spans`` spans, raises
:class:`OtlpError` (400); otherwise every span is either in :attr:`Decoded.spans` (hex ids,
attributes as ``{key: JSON value}`` — arrays as lists, kvlists as objects, bytes as base64 text,
non-finite doubles as text — the resource's attributes, events, the scope and the resource's
``service.name``) or counted in :attr:`Decoded.rejected` with a reason: an id of the wrong length
(or all zero), or a span over a bound (``Limits``: name or attribute key too long, too many
attributes or events, an attribute value too large, values nested deeper than 8). Rejected spans
are not truncated, they are refused whole (a cut JSON prompt would mislead an evaluator); the
others of the request are kept. The answers are rendered by
:mod:`~evaluator_host.online.receive.otlp_answers`.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from evaluator_host.evaluation.trace_shape import SpanData
from evaluator_host.online.receive.otlp_json import plain
from evaluator_host.online.receive.outline import OutlineError, json_outline, protobuf_outline
from evaluator_host.settings import Settings

__all__ = [
    "JSON",
    "PROTOBUF",
    "Decoded",
    "Limits",
    "OtlpError",
    "Received",
    "decode",
    "media_type",
]

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_MAX_DEPTH = 8  # arrays and kvlists inside attribute values, at most this deep
_HEX = re.compile(r"[0-9a-fA-F]*")
_ID_KEYS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")
_MAX_NS = 2**63 - 1  # times are stored as int64 nanoseconds
_SCALARS = frozenset({"int_value", "bool_value"})
_REASONS = 3  # reasons quoted in a partial success's error_message
# google.rpc.Code of each HTTP status we answer with an error


@dataclass(frozen=True)
class Limits:
    """The receiver's bounds (the ``online_max_*`` settings)."""

    body_bytes: int
    spans: int
    attributes: int
    attribute_bytes: int
    name_chars: int
    json_bytes: int = 4 * 1024 * 1024  # an OTLP/JSON body, inflated (online_max_json_bytes)

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        """The bounds ``settings`` name."""
        return cls(
            settings.online_max_body_bytes,
            settings.online_max_spans,
            settings.online_max_attributes,
            settings.online_max_attribute_bytes,
            settings.online_max_name_chars,
            settings.online_max_json_bytes,
        )


class OtlpError(Exception):
    """A request refused whole: ``status`` (400, 413, 415) and a message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Received:
    """One accepted span, with its resource's service name and its instrumentation scope."""

    span: SpanData
    service_name: str | None
    scope: dict[str, str]


@dataclass
class Decoded:
    """What a request carried: the accepted spans, how many were rejected, and why (a few reasons)."""

    spans: list[Received] = field(default_factory=list)
    rejected: int = 0
    reasons: list[str] = field(default_factory=list)
    message: Any = None  # an OTLP/JSON body's ExportTraceServiceRequest (forwarded as protobuf: forwarding.py)

    @property
    def error_message(self) -> str:
        """The partial success's message ('' when nothing was rejected)."""
        if not self.rejected:
            return ""
        more = "; …" if self.rejected > len(self.reasons) else ""
        return f"{self.rejected} span(s) rejected: " + "; ".join(self.reasons) + more


def media_type(content_type: str | None) -> str:
    """:data:`PROTOBUF` or :data:`JSON` for a ``Content-Type`` (parameters ignored); else 415."""
    main = (content_type or "").partition(";")[0].strip().lower()
    if main in (PROTOBUF, JSON):
        return main
    raise OtlpError(415, f"Content-Type must be {PROTOBUF} or {JSON} (OTLP/HTTP), not {main or 'none'!r}")


def decode(body: bytes, media: str, limits: Limits, *, keep_message: bool = True) -> Decoded:
    """The spans of an OTLP body (see the module docstring); without ``keep_message`` (nothing forwards the
    body) a plain OTLP/JSON body is read by :func:`~evaluator_host.online.receive.otlp_json.plain`."""
    try:  # the shape first: a body whose parse would cost far more than its bytes is never parsed
        if media == JSON:
            json_outline(body, limits.json_bytes)
        else:
            protobuf_outline(body, limits.spans)
    except OutlineError as exc:
        raise OtlpError(exc.status, exc.message) from None
    if media == JSON and not keep_message and (fast := plain(body, limits)) is not None:
        return Decoded(spans=[Received(*s) for s in fast])
    request = _parse_json(body, limits) if media == JSON else _parse_protobuf(body)
    count = sum(len(scope.spans) for rs in request.resource_spans for scope in rs.scope_spans)
    if count > limits.spans:
        raise OtlpError(400, f"{count} spans in one request; at most {limits.spans} (online_max_spans)")
    decoded = Decoded(message=request if media == JSON else None)
    for resource_spans in request.resource_spans:
        try:
            resource = _attributes(resource_spans.resource.attributes, limits, "resource attribute")
        except _Rejected as exc:
            spans = sum(len(scope.spans) for scope in resource_spans.scope_spans)
            decoded.rejected += spans
            if spans and len(decoded.reasons) < _REASONS:
                decoded.reasons.append(f"{spans} span(s) of one resource: {exc}")
            continue
        service = resource.get("service.name")
        service_name = service.replace("\x00", "")[:200] if isinstance(service, str) else None
        for scope_spans in resource_spans.scope_spans:
            scope = {"name": scope_spans.scope.name, "version": scope_spans.scope.version}
            for span in scope_spans.spans:
                try:
                    decoded.spans.append(_received(_span(span, resource, limits), service_name, scope))
                except _Rejected as exc:
                    decoded.rejected += 1
                    if len(decoded.reasons) < _REASONS:
                        decoded.reasons.append(f"span {span.span_id.hex() or '(no id)'}: {exc}")
    return decoded


class _Rejected(Exception):
    """One span (or one resource's spans) refused: the message says why."""


def _parse_protobuf(body: bytes) -> ExportTraceServiceRequest:
    try:
        request: ExportTraceServiceRequest = ExportTraceServiceRequest.FromString(body)
        return request
    except Exception as exc:  # DecodeError, or the parser's own limits (nesting): a malformed body
        raise OtlpError(400, f"the body is not an OTLP ExportTraceServiceRequest (protobuf): {exc}") from None


def _parse_json(body: bytes, limits: Limits) -> ExportTraceServiceRequest:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise OtlpError(400, f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise OtlpError(400, "the body is not an OTLP ExportTraceServiceRequest (a JSON object)")
    count = 0
    for span in _json_spans(data, limits.spans):
        count += 1
        if count > limits.spans:  # before building any message
            raise OtlpError(400, f"more than {limits.spans} spans in one request (online_max_spans)")
        _ids_to_base64(span)
        span.pop("links", None)  # not kept (docs/online.md): never made into messages
    try:
        request: ExportTraceServiceRequest = json_format.ParseDict(
            data, ExportTraceServiceRequest(), ignore_unknown_fields=True
        )
        return request
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise OtlpError(400, f"the body is not an OTLP ExportTraceServiceRequest (JSON): {exc}") from None


def _json_spans(data: dict[str, Any], most: int) -> Iterable[dict[str, Any]]:
    """The span objects of an OTLP/JSON body (camelCase or proto field names; anything else skipped);
    400 for a request, resource or scope with more than ``most`` elements (before any message is made)."""
    for rs in _bounded(_list(data, "resourceSpans", "resource_spans"), most, "resourceSpans"):
        for ss in _bounded(_list(rs, "scopeSpans", "scope_spans"), most, "scopeSpans"):
            yield from _list(ss, "spans", "spans")


def _bounded(items: list[Any], most: int, what: str) -> list[Any]:
    if len(items) > most:
        raise OtlpError(400, f"{len(items)} {what} in one request; at most {most} (online_max_spans)")
    return items


def _list(node: Any, camel: str, snake: str) -> list[Any]:
    if not isinstance(node, dict):
        return []
    found = node.get(camel, node.get(snake))
    return [item for item in found if isinstance(item, dict)] if isinstance(found, list) else []


def _ids_to_base64(node: dict[str, Any]) -> None:
    """OTLP/JSON's hex ids as the base64 proto3's JSON mapping expects; a string that is neither hex nor
    base64 becomes a one-byte id, which :func:`_span` rejects (a bad id spoils its span, not the request)."""
    for key in _ID_KEYS:
        value = node.get(key)
        if not isinstance(value, str) or not value:
            continue
        if len(value) % 2 == 0 and _HEX.fullmatch(value):
            node[key] = base64.b64encode(bytes.fromhex(value)).decode()
            continue
        try:
            base64.b64decode(value, validate=True)
        except ValueError:
            node[key] = "AA=="


def _span(span: Span, resource: dict[str, Any], limits: Limits) -> SpanData:
    """One span's :class:`SpanData` (each field read once: a upb field read makes a new Python object)."""
    trace_id, span_id, parent = span.trace_id, span.span_id, span.parent_span_id
    if len(trace_id) != 16 or not any(trace_id):
        raise _Rejected(f"trace id of {len(trace_id)} bytes (16, not all zero)")
    if len(span_id) != 8 or not any(span_id):
        raise _Rejected(f"span id of {len(span_id)} bytes (8, not all zero)")
    if parent and len(parent) != 8:
        raise _Rejected(f"parent span id of {len(parent)} bytes (8, or none)")
    name = span.name
    if len(name) > limits.name_chars:
        raise _Rejected(f"name of {len(name)} characters (online_max_name_chars {limits.name_chars})")
    if "\x00" in name:
        raise _Rejected("a NUL character in the name")
    start_ns, end_ns = span.start_time_unix_nano, span.end_time_unix_nano
    if start_ns > _MAX_NS or end_ns > _MAX_NS:
        raise _Rejected("a time past the year 2262 (int64 nanoseconds)")
    events: list[dict[str, Any]] = []
    if span_events := span.events:
        if len(span_events) > limits.attributes:
            raise _Rejected(f"{len(span_events)} events (online_max_attributes {limits.attributes})")
        events = [
            {
                "name": event.name[: limits.name_chars],
                "time_ns": event.time_unix_nano,
                "attributes": _attributes(event.attributes, limits, "event attribute"),
            }
            for event in span_events
        ]
    status_code, status_message = 0, ""
    if span.HasField("status"):
        status = span.status
        status_code, status_message = status.code, status.message
        if len(status_message) > limits.attribute_bytes:
            raise _Rejected(f"status message over {limits.attribute_bytes} characters")
    return _span_data(
        {
            "trace_id": trace_id.hex(),
            "span_id": span_id.hex(),
            "parent_id": parent.hex() if parent and any(parent) else None,
            "name": name,
            "start_ns": start_ns,
            "end_ns": end_ns,
            "kind": span.kind,
            "status_code": status_code,
            "status_message": status_message,
            "attributes": _attributes(span.attributes, limits, "attribute"),
            "resource": resource,
            "events": events,
        }
    )


def _span_data(values: dict[str, Any]) -> SpanData:
    """``SpanData(**values)`` without the frozen ``__init__`` (12 ``object.__setattr__``: ~4 µs a span)."""
    span = object.__new__(SpanData)
    span.__dict__.update(values)
    return span


def _received(span: SpanData, service_name: str | None, scope: dict[str, str]) -> Received:
    """``Received(span, service_name, scope)`` without the frozen ``__init__`` (3 ``object.__setattr__``)."""
    received = object.__new__(Received)
    received.__dict__.update(span=span, service_name=service_name, scope=scope)
    return received


def _attributes(pairs: Sequence[KeyValue], limits: Limits, what: str) -> dict[str, Any]:
    """``{key: JSON value}`` of ``pairs`` (the hot loop: a string value, the common case, costs a length)."""
    if len(pairs) > limits.attributes:
        raise _Rejected(f"{len(pairs)} {what}s (online_max_attributes {limits.attributes})")
    cap, max_key = limits.attribute_bytes, limits.name_chars
    out: dict[str, Any] = {}
    for pair in pairs:
        key = pair.key
        if len(key) > max_key:
            raise _Rejected(f"{what} key of {len(key)} characters (online_max_name_chars)")
        value = pair.value
        text = value.string_value  # "" unless the value is a non-empty string
        if text:  # the common case: the read is the check (no HasField, no oneof name compared)
            if len(text) * 4 > cap and len(text.encode()) > cap:  # UTF-8 is at most 4 bytes a character
                raise _Rejected(f"{what} {key[:80]!r} over {cap} bytes (online_max_attribute_bytes)")
            out[key] = text
            continue
        kind = value.WhichOneof("value")
        if kind == "string_value":  # an empty string
            out[key] = text
        elif kind in _SCALARS:
            out[key] = getattr(value, kind)
        else:
            budget = [cap]
            out[key] = _value(value, budget, 0)
            if budget[0] < 0:
                raise _Rejected(f"{what} {key[:80]!r} over {cap} bytes (online_max_attribute_bytes)")
    return out


def _value(value: AnyValue, budget: list[int], depth: int) -> Any:
    """An AnyValue as JSON, charging its size to ``budget[0]`` (stops early once spent)."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        text = value.string_value
        budget[0] -= len(text) if text.isascii() else len(text.encode())
        return text
    if kind == "int_value" or kind == "bool_value":
        budget[0] -= 8
        return getattr(value, kind)
    if kind == "double_value":
        budget[0] -= 8
        number = value.double_value
        return number if math.isfinite(number) else str(number)
    if kind == "bytes_value":
        budget[0] -= len(value.bytes_value)
        return base64.b64encode(value.bytes_value).decode() if budget[0] >= 0 else ""
    if kind is None:
        budget[0] -= 4  # as much as JSON's null: an array of empty values is not free
        return None
    if depth >= _MAX_DEPTH:
        raise _Rejected(f"attribute values nested deeper than {_MAX_DEPTH}")
    if kind == "array_value":
        items = []
        for item in value.array_value.values:
            items.append(_value(item, budget, depth + 1))
            if budget[0] < 0:
                break
        return items
    entries: dict[str, Any] = {}
    for pair in value.kvlist_value.values:
        budget[0] -= len(pair.key)
        entries[pair.key] = _value(pair.value, budget, depth + 1)
        if budget[0] < 0:
            break
    return entries
