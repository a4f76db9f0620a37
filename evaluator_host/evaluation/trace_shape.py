"""The trace an evaluator gets as ``trace``: one shape for online evaluation and for model-target jobs.

The shape is Agenta's ("the full OpenTelemetry trace serialized as a dict")::

    {"trace_id": "<32 hex>",
     "spans": {"<16 hex span id of a root>": {
         "trace_id", "span_id", "parent_id" (None for a root), "name", "kind" ("SPAN_KIND_SERVER"…),
         "start_time", "end_time" (ISO 8601, UTC, microseconds), "status_code" ("STATUS_CODE_UNSET" |
         "STATUS_CODE_OK" | "STATUS_CODE_ERROR"), "status_message",
         "attributes": {…nested by dotted key: "ag.data.inputs" → {"ag": {"data": {"inputs": …}}}},
         "resource": {…nested resource attributes, e.g. {"service": {"name": "chat-api"}}},
         "events": [{"name", "time", "attributes"}],
         "children": {"<span id>": {…the same shape…}}}}}

Roots are the spans without a parent *in the trace* (a span whose parent never arrived is a root
too); children are keyed by span id in start order. Contract of this module: pure functions, no I/O;
the input is :class:`SpanData` (hex ids, nanosecond times, flat attributes) whoever received it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

__all__ = ["KINDS", "STATUS_CODES", "SpanData", "build_trace", "iso_ns", "nest", "single_span_trace"]

KINDS = (
    "SPAN_KIND_UNSPECIFIED",
    "SPAN_KIND_INTERNAL",
    "SPAN_KIND_SERVER",
    "SPAN_KIND_CLIENT",
    "SPAN_KIND_PRODUCER",
    "SPAN_KIND_CONSUMER",
)
STATUS_CODES = ("STATUS_CODE_UNSET", "STATUS_CODE_OK", "STATUS_CODE_ERROR")


@dataclass(frozen=True)
class SpanData:
    """One span as received: hex ids, times in Unix nanoseconds, attributes flat by dotted key."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start_ns: int
    end_ns: int
    kind: int = 0  # OTLP's SpanKind number
    status_code: int = 0  # OTLP's StatusCode number
    status_message: str = ""
    attributes: Mapping[str, Any] = field(default_factory=dict)
    resource: Mapping[str, Any] = field(default_factory=dict)
    events: Sequence[Mapping[str, Any]] = ()  # {"name", "time_ns", "attributes" (flat)}


def iso_ns(ns: int) -> str:
    """Unix nanoseconds as ISO 8601 UTC with microseconds (``2026-11-23T13:00:00.123456+00:00``): the text of
    ``datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="microseconds")`` — its rounding too (the float's
    fraction to the nearest microsecond, half to even) — with each second's part made once."""
    fraction, whole = math.modf(ns / 1e9)
    micros = round(fraction * 1e6)
    if micros >= 1_000_000:
        micros, whole = micros - 1_000_000, whole + 1.0
    if micros < 0:  # before 1970: as the standard library says it
        return datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="microseconds")
    return f"{_second(int(whole))}.{micros:06d}+00:00"


@lru_cache(maxsize=4096)
def _second(unix_s: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS`` of a Unix second, UTC."""
    return datetime.fromtimestamp(unix_s, UTC).replace(tzinfo=None).isoformat(timespec="seconds")


def nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted keys as nested objects: ``{"a.b": 1, "a.c": 2}`` → ``{"a": {"b": 1, "c": 2}}``.

    A key that is both a value and a prefix (``"a": 1`` and ``"a.b": 2``) keeps the value under
    ``""`` of the object (``{"a": {"": 1, "b": 2}}``), so nothing is lost whatever order keys come in.
    """
    out: dict[str, Any] = {}
    for key in sorted(flat):  # a prefix sorts before its longer keys
        parts = key.split(".")
        node = out
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {} if child is None else {"": child}
                node[part] = child
            node = child
        last = parts[-1]
        if isinstance(node.get(last), dict):
            node[last][""] = flat[key]
        else:
            node[last] = flat[key]
    return out


def _span_dict(span: SpanData) -> dict[str, Any]:
    return {
        "trace_id": span.trace_id,
        "span_id": span.span_id,
        "parent_id": span.parent_id,
        "name": span.name,
        "kind": KINDS[span.kind] if 0 <= span.kind < len(KINDS) else KINDS[0],
        "start_time": iso_ns(span.start_ns),
        "end_time": iso_ns(span.end_ns),
        "status_code": STATUS_CODES[span.status_code] if 0 <= span.status_code < 3 else STATUS_CODES[0],
        "status_message": span.status_message,
        "attributes": nest(span.attributes),
        "resource": nest(span.resource),
        "events": [
            {
                "name": e.get("name", ""),
                "time": iso_ns(int(e.get("time_ns", 0))),
                "attributes": nest(e.get("attributes", {})),
            }
            for e in span.events
        ],
        "children": {},
    }


def build_trace(trace_id: str, spans: Iterable[SpanData]) -> dict[str, Any]:
    """The trace dict of ``spans`` (one trace's): roots at ``spans``, each span's children under it."""
    ordered = sorted(spans, key=lambda s: (s.start_ns, s.span_id))
    made = {s.span_id: _span_dict(s) for s in ordered}
    roots: dict[str, Any] = {}
    for span in ordered:
        parent = made.get(span.parent_id) if span.parent_id else None
        (parent["children"] if parent is not None else roots)[span.span_id] = made[span.span_id]
    return {"trace_id": trace_id, "spans": roots}


def single_span_trace(
    trace_id: str,
    span_id: str,
    name: str,
    start_ns: int,
    end_ns: int,
    attributes: Mapping[str, Any],
    *,
    error: str | None = None,
) -> dict[str, Any]:
    """A one-span trace (a model call a job made): ``attributes`` flat by dotted key, e.g.
    ``ag.data.inputs``, ``ag.metrics.unit.tokens.total``, ``gen_ai.request.model``."""
    span = SpanData(
        trace_id=trace_id,
        span_id=span_id,
        parent_id=None,
        name=name,
        start_ns=start_ns,
        end_ns=end_ns,
        kind=3,
        status_code=2 if error else 1,
        status_message=error or "",
        attributes=attributes,
    )
    return build_trace(trace_id, [span])
