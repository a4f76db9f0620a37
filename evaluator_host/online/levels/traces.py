"""A stored trace, read back as the dict evaluators get (docs/online.md, "The trace evaluators get").

Contract: :func:`load_trace` reads one workspace's ``online_traces`` row and its ``online_spans``
rows on the caller's connection (no transaction of its own), decodes each body with
:func:`evaluator_host.online.reading.spans.decode` (the span's resource attributes come from its body) and
builds the dict with :func:`evaluator_host.evaluation.trace_shape.build_trace`. Bounded: at most
``max_spans`` spans are read (the first by start time, and always the root), so a trace of a
million spans costs the memory of ``max_spans``; a trace cut so carries ``"truncated": true`` and
``"span_count"`` (how many spans were stored) in its dict. :func:`walk` and :func:`find_span` read
the dict.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import sqlalchemy
from sqlalchemy import func, select

from evaluator_host.evaluation.trace_shape import SpanData, build_trace
from evaluator_host.online.reading.mapping import spans_depth_first
from evaluator_host.online.reading.spans import decode
from evaluator_host.store.online.rows import OnlineSpanRow, OnlineTraceRow

__all__ = ["DEFAULT_MAX_SPANS", "LoadedTrace", "find_span", "load_trace", "walk"]

DEFAULT_MAX_SPANS = 10_000  # Settings.online_max_trace_spans' default

_COLUMNS = (
    OnlineSpanRow.span_id,
    OnlineSpanRow.parent_span_id,
    OnlineSpanRow.name,
    OnlineSpanRow.start_ns,
    OnlineSpanRow.end_ns,
    OnlineSpanRow.body,
)


@dataclass(frozen=True)
class LoadedTrace:
    """One stored trace: its row's facts, the dict evaluators get, and the spans it was built from."""

    trace_id: str
    state: str
    service_name: str | None
    root_span_id: str | None
    trace: dict[str, Any]
    spans: list[SpanData]


def _span(trace_id: str, row: Any) -> SpanData:
    return decode(trace_id, row.span_id, row.parent_span_id, row.name, row.start_ns, row.end_ns, row.body)


def load_trace(
    conn: sqlalchemy.Connection, workspace_id: str, trace_id: str, *, max_spans: int = DEFAULT_MAX_SPANS
) -> LoadedTrace | None:
    """The trace ``trace_id`` (hex) of ``workspace_id``; None when the workspace has no such trace.
    At most ``max_spans`` spans (the settings' ``online_max_trace_spans``), the root always among them."""
    head = conn.execute(
        select(OnlineTraceRow.state, OnlineTraceRow.service_name, OnlineTraceRow.root_span_id).where(
            OnlineTraceRow.workspace_id == workspace_id, OnlineTraceRow.trace_id == trace_id
        )
    ).one_or_none()
    if head is None:
        return None
    of_trace = (OnlineSpanRow.workspace_id == workspace_id, OnlineSpanRow.trace_id == trace_id)
    limit = max(1, max_spans)
    rows = conn.execute(
        select(*_COLUMNS).where(*of_trace).order_by(OnlineSpanRow.start_ns, OnlineSpanRow.span_id).limit(limit + 1)
    ).all()
    truncated = len(rows) > limit
    rows = rows[:limit]
    if truncated and head.root_span_id and all(r.span_id != head.root_span_id for r in rows):
        root = conn.execute(select(*_COLUMNS).where(*of_trace, OnlineSpanRow.span_id == head.root_span_id)).first()
        if root is not None:
            rows = [root, *rows[: limit - 1]]
    spans = [_span(trace_id, row) for row in rows]
    trace = build_trace(trace_id, spans)
    if truncated:
        stored = conn.execute(select(func.count()).select_from(OnlineSpanRow).where(*of_trace)).scalar_one()
        trace["truncated"] = True
        trace["span_count"] = int(stored)
    return LoadedTrace(
        trace_id=trace_id,
        state=head.state,
        service_name=head.service_name,
        root_span_id=head.root_span_id,
        trace=trace,
        spans=spans,
    )


def walk(trace: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every span of the trace dict: depth-first, each level in start order."""
    return spans_depth_first(trace)


def find_span(trace: dict[str, Any], span_id: str) -> dict[str, Any] | None:
    """The span ``span_id`` of the trace dict (wherever it is in the tree), else None."""
    return next((span for span in walk(trace) if span.get("span_id") == span_id), None)
