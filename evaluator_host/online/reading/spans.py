"""A stored span's ``body`` (``online_spans.body``): what the receiver writes and every reader reads.

Contract: ``body`` is a JSON object ``{"kind": int, "status_code": int, "status_message": str,
"attributes": {flat dotted key: value}, "resource": {flat}, "events": [{"name", "time_ns",
"attributes"}], "scope": {"name", "version"}}`` (ints are OTLP's enum numbers; attribute values are
JSON: str, int, float, bool, lists of them, or objects for OTLP kvlist values). The row's own columns
hold the ids, parent, name, service name and times. :func:`encode` and :func:`decode` are the only
code that knows the body's layout.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import msgspec

from evaluator_host.evaluation.trace_shape import SpanData
from evaluator_host.sandbox import fastjson

__all__ = ["decode", "encode"]


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))  # one: json.dumps makes one per call
_FAST = msgspec.json.Encoder()  # the same text (compact, UTF-8, control characters escaped), ~10x faster


def encode(span: SpanData, scope: Mapping[str, Any] | None = None) -> str:
    """The ``body`` text of ``span`` (compact JSON). msgspec writes it — the standard library's text, but a
    non-finite float is ``null`` (valid JSON); the receiver sends those as text anyway — and the standard
    library when msgspec refuses a value (a lone surrogate, an int past 64 bits)."""
    body = {
        "kind": span.kind,
        "status_code": span.status_code,
        "status_message": span.status_message,
        "attributes": _plain(span.attributes),
        "resource": _plain(span.resource),
        "events": [_plain(e) for e in span.events],
        "scope": _plain(scope or {}),
    }
    try:
        return _FAST.encode(body).decode()
    except (msgspec.EncodeError, OverflowError, UnicodeError, TypeError):
        return _ENCODER.encode(body)


def _plain(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """``mapping`` as a dict: itself when it is one (the receiver's are; a copy writes the same text)."""
    return mapping if type(mapping) is dict else dict(mapping)


def decode(
    trace_id: str, span_id: str, parent_id: str | None, name: str, start_ns: int, end_ns: int, body: str
) -> SpanData:
    """The :class:`SpanData` of a stored row (its columns and its ``body``)."""
    data = fastjson.loads(body)  # what json.loads gives, msgspec's speed
    return SpanData(
        trace_id=trace_id,
        span_id=span_id,
        parent_id=parent_id,
        name=name,
        start_ns=start_ns,
        end_ns=end_ns,
        kind=int(data.get("kind", 0)),
        status_code=int(data.get("status_code", 0)),
        status_message=str(data.get("status_message", "")),
        attributes=data.get("attributes", {}),
        resource=data.get("resource", {}),
        events=data.get("events", []),
    )
