"""Interim stand-in for s30-mapping's module (same signatures); replaced by it at merge.

:func:`load_trace` reads one trace's row and spans (workspace-scoped) and builds the trace dict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select

from evaluator_host.evaluation.trace_shape import SpanData, build_trace
from evaluator_host.online import spans as span_body
from evaluator_host.store.online_rows import OnlineSpanRow, OnlineTraceRow

__all__ = ["LoadedTrace", "load_trace"]


@dataclass(frozen=True)
class LoadedTrace:
    """One trace as stored: its row's fields, the trace dict and its spans."""

    trace_id: str
    state: str
    service_name: str | None
    root_span_id: str | None
    trace: dict[str, Any]
    spans: list[SpanData]


def load_trace(conn: Connection, workspace_id: str, trace_id: str) -> LoadedTrace | None:
    """The trace ``trace_id`` of ``workspace_id``, or None."""
    t = OnlineTraceRow
    row = conn.execute(select(t).where(t.workspace_id == workspace_id, t.trace_id == trace_id)).one_or_none()
    if row is None:
        return None
    s = OnlineSpanRow
    query = select(s.trace_id, s.span_id, s.parent_span_id, s.name, s.start_ns, s.end_ns, s.body).where(
        s.workspace_id == workspace_id, s.trace_id == trace_id
    )
    found = [span_body.decode(*r) for r in conn.execute(query)]
    return LoadedTrace(trace_id, row.state, row.service_name, row.root_span_id, build_trace(trace_id, found), found)
