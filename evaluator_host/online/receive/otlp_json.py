"""The OTLP/JSON fast path: a plainly shaped body's spans read straight from its parsed JSON.

``google.protobuf.json_format.ParseDict`` (:func:`~evaluator_host.online.receive.otlp.decode`'s general path)
costs ~65 µs a span here (this path ~9 µs) — a third of the service's CPU per trace on an OTLP/JSON
stream (issue 55 §2). Most exporters send the same few shapes, so :func:`plain` reads those directly and
answers None for anything else, which then takes the general path unchanged. A body being forwarded
(its workspace has forwarding targets) always takes the general path: its message is what is forwarded.

Contract: :func:`plain` returns the spans the general path would give — the same :class:`SpanData` values (hex
ids in lower case, the same ints, the same attribute dicts), service name and scope, in the same order, none
rejected — or None. It returns None (never a different answer) for any body that is not *plain*: a key it does
not know at any level, a value of another JSON type than the OTLP/JSON one, events (links are dropped unread,
as there), scope attributes, array/kvlist/bytes/empty attribute values, a non-finite or textual double, an id
that is not hex of its exact length or is all zero, a time or integer out of its range or not in canonical
decimal, an unknown enum name or number, or anything over a ``Limits`` bound (the general path rejects those
spans with its reasons). It never raises on any JSON value.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, TypeGuard

from evaluator_host.evaluation.trace_shape import SpanData

__all__ = ["plain"]

_MAX_NS = 2**63 - 1
_MIN_INT, _MAX_INT = -(2**63), 2**63 - 1
_UINT = re.compile(r"0|[1-9][0-9]*")
_INT = re.compile(r"0|-?[1-9][0-9]*")
_HEX16 = re.compile(r"[0-9a-fA-F]{16}")
_HEX32 = re.compile(r"[0-9a-fA-F]{32}")
_KIND_NAMES = ("UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
_KINDS = {f"SPAN_KIND_{name}": number for number, name in enumerate(_KIND_NAMES)}
_CODES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
_RS_KEYS = frozenset({"resource", "scopeSpans", "schemaUrl"})
_RESOURCE_KEYS = frozenset({"attributes", "droppedAttributesCount"})
_SS_KEYS = frozenset({"scope", "spans", "schemaUrl"})
_SCOPE_KEYS = frozenset({"name", "version"})
_SPAN_KEYS = frozenset(
    {
        "traceId",
        "spanId",
        "parentSpanId",
        "name",
        "kind",
        "startTimeUnixNano",
        "endTimeUnixNano",
        "attributes",
        "status",
        "flags",
        "traceState",
        "droppedAttributesCount",
        "droppedEventsCount",
        "droppedLinksCount",
        "events",  # only empty
        "links",  # never kept (docs/online.md): ignored, as the general path drops them unread
    }
)
_STATUS_KEYS = frozenset({"code", "message"})
_COUNTS = ("droppedAttributesCount", "droppedEventsCount", "droppedLinksCount", "flags")


class _NotPlain(Exception):
    """The body takes the general path."""


def plain(body: bytes, limits: Any) -> list[tuple[SpanData, str | None, dict[str, str]]] | None:
    """``(span, service name, scope)`` of every span of the OTLP/JSON ``body`` (already through the outline
    check), or None when it is not plain (see the module docstring) or not JSON. ``limits``: the receiver's
    ``otlp.Limits``; more than ``limits.spans`` spans, resources or scopes is not plain either (the general
    path refuses it with its message)."""
    try:
        spans = _request(json.loads(body), limits)
    except (_NotPlain, ValueError, RecursionError):
        return None
    return spans if len(spans) <= limits.spans else None


def _request(data: Any, limits: Any) -> list[tuple[SpanData, str | None, dict[str, str]]]:
    if type(data) is not dict or data.keys() - {"resourceSpans"}:
        raise _NotPlain
    out: list[tuple[SpanData, str | None, dict[str, str]]] = []
    for rs in _items(data.get("resourceSpans", []), limits.spans):
        if rs.keys() - _RS_KEYS or not _text(rs.get("schemaUrl", "")):
            raise _NotPlain
        res = rs.get("resource", {})
        if type(res) is not dict or res.keys() - _RESOURCE_KEYS or not _uint32(res.get("droppedAttributesCount", 0)):
            raise _NotPlain
        resource = _attributes(res.get("attributes", []), limits)
        service = resource.get("service.name")
        service_name = service.replace("\x00", "")[:200] if isinstance(service, str) else None
        for ss in _items(rs.get("scopeSpans", []), limits.spans):
            if ss.keys() - _SS_KEYS or not _text(ss.get("schemaUrl", "")):
                raise _NotPlain
            sc = ss.get("scope", {})
            if type(sc) is not dict or sc.keys() - _SCOPE_KEYS:
                raise _NotPlain
            scope = {"name": sc.get("name", ""), "version": sc.get("version", "")}
            if not _text(scope["name"]) or not _text(scope["version"]):
                raise _NotPlain
            spans = _items(ss.get("spans", []), limits.spans)
            if len(out) + len(spans) > limits.spans:  # refused before a span of it is built (a running total)
                raise _NotPlain
            for span in spans:
                out.append((_span(span, resource, limits), service_name, scope))
    return out


def _items(value: Any, most: int) -> list[dict[str, Any]]:
    if type(value) is not list or len(value) > most or any(type(item) is not dict for item in value):
        raise _NotPlain
    return value


def _text(value: Any) -> TypeGuard[str]:
    """A string protobuf takes: UTF-8 (JSON's escapes can make lone surrogates, which json_format refuses)."""
    if type(value) is not str:
        return False
    if value.isascii():
        return True
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _uint32(value: Any) -> bool:
    return type(value) is int and 0 <= value < 2**32


def _span(span: dict[str, Any], resource: dict[str, Any], limits: Any) -> SpanData:
    if span.keys() - _SPAN_KEYS or any(not _uint32(span.get(k, 0)) for k in _COUNTS) or span.get("events", []) != []:
        raise _NotPlain
    trace_id, span_id, parent = span.get("traceId"), span.get("spanId"), span.get("parentSpanId", "")
    if type(trace_id) is not str or not _HEX32.fullmatch(trace_id) or not int(trace_id, 16):
        raise _NotPlain
    if type(span_id) is not str or not _HEX16.fullmatch(span_id) or not int(span_id, 16):
        raise _NotPlain
    if type(parent) is not str or (parent and (not _HEX16.fullmatch(parent) or not int(parent, 16))):
        raise _NotPlain
    name = span.get("name", "")
    if not _text(name) or len(name) > limits.name_chars or "\x00" in name:
        raise _NotPlain
    if not _text(span.get("traceState", "")):
        raise _NotPlain
    kind = span.get("kind", 0)
    kind = _KINDS.get(kind, -1) if type(kind) is str else kind
    if type(kind) is not int or not 0 <= kind < len(_KINDS):
        raise _NotPlain
    status_code, status_message = 0, ""
    if "status" in span:
        status = span["status"]
        if type(status) is not dict or status.keys() - _STATUS_KEYS:
            raise _NotPlain
        code, status_message = status.get("code", 0), status.get("message", "")
        status_code = _CODES.get(code, -1) if type(code) is str else code
        if type(status_code) is not int or not 0 <= status_code <= 2 or not _text(status_message):
            raise _NotPlain
        if len(status_message) > limits.attribute_bytes:
            raise _NotPlain
    span_data = object.__new__(SpanData)  # as otlp._span_data: every field set, no frozen __init__
    span_data.__dict__.update(
        trace_id=trace_id.lower(),
        span_id=span_id.lower(),
        parent_id=parent.lower() or None,
        name=name,
        start_ns=_time(span.get("startTimeUnixNano", 0)),
        end_ns=_time(span.get("endTimeUnixNano", 0)),
        kind=kind,
        status_code=status_code,
        status_message=status_message,
        attributes=_attributes(span.get("attributes", []), limits),
        resource=resource,
        events=[],
    )
    return span_data


def _time(value: Any) -> int:
    if type(value) is str and _UINT.fullmatch(value):
        value = int(value)
    if type(value) is not int or not 0 <= value <= _MAX_NS:
        raise _NotPlain
    return value


def _attributes(pairs: Any, limits: Any) -> dict[str, Any]:
    if type(pairs) is not list or len(pairs) > limits.attributes:
        raise _NotPlain
    cap, out = limits.attribute_bytes, {}
    for pair in pairs:
        if type(pair) is not dict or len(pair) != 2:
            raise _NotPlain
        key, value = pair.get("key"), pair.get("value")
        if not _text(key) or len(key) > limits.name_chars or type(value) is not dict or len(value) != 1:
            raise _NotPlain
        kind, item = next(iter(value.items()))
        if kind == "stringValue" and _text(item):
            if len(item) * 4 > cap and len(item.encode()) > cap:
                raise _NotPlain
        elif kind == "intValue":
            if type(item) is str and _INT.fullmatch(item):
                item = int(item)
            if type(item) is not int or not _MIN_INT <= item <= _MAX_INT:
                raise _NotPlain
        elif kind == "boolValue" and type(item) is bool:
            pass
        elif kind == "doubleValue" and type(item) is float and math.isfinite(item):
            pass
        else:
            raise _NotPlain
        out[key] = item
    return out
