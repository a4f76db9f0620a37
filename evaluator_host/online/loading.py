"""A claimed batch's traces read back at once: :func:`load_many` (the scorer's, and its tests')."""

from __future__ import annotations

from sqlalchemy import Connection, select

from evaluator_host.evaluation.trace_shape import SpanData, build_trace
from evaluator_host.online import spans as span_body
from evaluator_host.online.traces import LoadedTrace, load_trace
from evaluator_host.store.online_rows import OnlineSpanRow, OnlineTraceRow
from evaluator_host.store.online_scores import keyed

__all__ = ["load_many"]


def load_many(conn: Connection, keys: set[tuple[str, str]], max_spans: int) -> dict[tuple[str, str], LoadedTrace]:
    """The traces of ``keys`` (workspace, trace id), as :func:`~evaluator_host.online.traces.load_trace`
    gives each: the small ones (``span_count`` within ``max_spans``) in two queries for the whole batch,
    bounded by their span counts; a large one — or all, when spans arrived meanwhile past that bound —
    by ``load_trace`` itself (its own bound and ``truncated`` mark)."""
    if not keys:
        return {}
    t, s = OnlineTraceRow, OnlineSpanRow
    heads = conn.execute(
        select(t.workspace_id, t.trace_id, t.state, t.service_name, t.root_span_id, t.span_count).where(
            keyed(t.workspace_id, t.trace_id, keys)
        )
    ).all()
    small = {(h[0], h[1]): h for h in heads if h[5] <= max_spans}
    out = {(h[0], h[1]): load_trace(conn, h[0], h[1], max_spans=max_spans) for h in heads if h[5] > max_spans}
    bound = sum(h[5] for h in small.values()) + max_spans
    query = select(s.workspace_id, s.trace_id, s.span_id, s.parent_span_id, s.name, s.start_ns, s.end_ns, s.body)
    found: dict[tuple[str, str], list[SpanData]] = {k: [] for k in small}
    query = query.where(keyed(s.workspace_id, s.trace_id, small)).order_by(s.start_ns, s.span_id).limit(bound + 1)
    got = conn.execute(query).all() if small else []
    if len(got) > bound:  # spans kept arriving: each by itself, bounded
        out.update({k: load_trace(conn, k[0], k[1], max_spans=max_spans) for k in small})
        return {k: v for k, v in out.items() if v is not None}
    for ws, trace_id, span_id, parent, name, start, end, body in got:
        found[(ws, trace_id)].append(span_body.decode(trace_id, span_id, parent, name, int(start), int(end), body))
    for key, h in small.items():
        spans = found[key]
        out[key] = LoadedTrace(
            trace_id=h[1], state=h[2], service_name=h[3], root_span_id=h[4], trace=build_trace(h[1], spans), spans=spans
        )
    return {k: v for k, v in out.items() if v is not None}
