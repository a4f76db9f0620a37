"""OTLP request bodies for the receiver's tests, built with ``opentelemetry-proto`` (protobuf) or as the
OpenTelemetry JS exporter and the Collector write OTLP/JSON (camelCase, hex ids, int64s as strings,
enums as numbers)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

__all__ = ["PROTOBUF", "JSON", "S", "json_body", "new_span_id", "new_trace_id", "protobuf_body"]

PROTOBUF = {"content-type": "application/x-protobuf"}
JSON = {"content-type": "application/json"}
T0 = 1_763_900_000_000_000_000  # a fixed start (ns)


def new_trace_id() -> str:
    return os.urandom(16).hex()


def new_span_id() -> str:
    return os.urandom(8).hex()


@dataclass
class S:
    """One span to send (hex ids; ``attributes`` as plain Python values)."""

    trace_id: str
    span_id: str
    parent: str = ""
    name: str = "span"
    kind: int = 1
    start_ns: int = T0
    end_ns: int = T0 + 1_000_000
    attributes: dict[str, Any] = field(default_factory=dict)
    status_code: int = 0


def _any(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, list):
        out = AnyValue()
        out.array_value.values.extend(_any(v) for v in value)
        return out
    if isinstance(value, dict):
        out = AnyValue()
        out.kvlist_value.values.extend(KeyValue(key=k, value=_any(v)) for k, v in value.items())
        return out
    return AnyValue(string_value=str(value))


def protobuf_body(spans: list[S], service: str = "chat-api", raw_ids: bool = False) -> bytes:
    """An ``ExportTraceServiceRequest`` of ``spans`` (one resource, one scope). ``raw_ids``: the ids
    are taken as latin-1 bytes as given (to send ids of wrong lengths)."""
    request = ExportTraceServiceRequest()
    resource = request.resource_spans.add()
    resource.resource.attributes.append(KeyValue(key="service.name", value=AnyValue(string_value=service)))
    scope = resource.scope_spans.add()
    scope.scope.name = "tests"
    for s in spans:
        span = scope.spans.add()
        conv = (lambda x: x.encode("latin-1")) if raw_ids else bytes.fromhex
        span.trace_id, span.span_id = conv(s.trace_id), conv(s.span_id)
        if s.parent:
            span.parent_span_id = conv(s.parent)
        span.name, span.kind = s.name, s.kind
        span.start_time_unix_nano, span.end_time_unix_nano = s.start_ns, s.end_ns
        span.status.code = s.status_code
        span.attributes.extend(KeyValue(key=k, value=_any(v)) for k, v in s.attributes.items())
    return bytes(request.SerializeToString())


def _json_any(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}  # int64 as a string, as the JS exporter writes it
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [_json_any(v) for v in value]}}
    if isinstance(value, dict):
        return {"kvlistValue": {"values": [{"key": k, "value": _json_any(v)} for k, v in value.items()]}}
    return {"stringValue": str(value)}


def json_body(spans: list[S], service: str = "chat-api") -> bytes:
    """OTLP/JSON of ``spans`` as the OpenTelemetry JS exporter sends it."""
    out = []
    for s in spans:
        span: dict[str, Any] = {
            "traceId": s.trace_id,
            "spanId": s.span_id,
            "name": s.name,
            "kind": s.kind,
            "startTimeUnixNano": str(s.start_ns),
            "endTimeUnixNano": str(s.end_ns),
            "attributes": [{"key": k, "value": _json_any(v)} for k, v in s.attributes.items()],
            "droppedAttributesCount": 0,
            "events": [],
            "droppedEventsCount": 0,
            "status": {"code": s.status_code},
            "links": [],
            "droppedLinksCount": 0,
        }
        if s.parent:
            span["parentSpanId"] = s.parent
        out.append(span)
    body = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                "scopeSpans": [{"scope": {"name": "tests", "version": "1.0"}, "spans": out}],
            }
        ]
    }
    return json.dumps(body).encode()
