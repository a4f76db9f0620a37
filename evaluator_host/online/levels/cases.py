"""Cases of online scores: one (rule, trace)'s case, and the batch load of the traces they read.

Contract (docs/online.md, "How it works", "Mapping"):

* :func:`build_case` — ``trace`` is the trace dict; ``inputs`` and ``outputs`` come from the rule's
  ``mapping`` paths (over :func:`~evaluator_host.online.reading.mapping.path_view`), else from the evaluated
  span, else (evaluated span = root) from the trace's first span that has some. A mapping path that
  finds nothing raises :class:`Refused` (the scorer stores it as an ``error`` result).
* :func:`load_many` — the traces of a claimed batch: the small ones in two queries for the whole batch,
  a large one by :func:`~evaluator_host.online.levels.traces.load_trace` (its own bound and ``truncated`` mark).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, select

from evaluator_host.evaluation.models import Case
from evaluator_host.evaluation.trace_shape import SpanData, build_trace
from evaluator_host.online.levels.traces import LoadedTrace, load_trace
from evaluator_host.online.reading import mapping
from evaluator_host.online.reading import spans as span_body
from evaluator_host.store.online.rows import OnlineSpanRow, OnlineTraceRow
from evaluator_host.store.online.scores import keyed

__all__ = ["Refused", "build_case", "load_many"]


class Refused(Exception):
    """A case that cannot be made (the reason is the error result's message)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def build_case(loaded: LoadedTrace, span_id: str | None, rule_mapping: dict[str, Any] | None) -> Case:
    """The case of one (rule, trace): see the module docstring (:class:`Refused` when it cannot be made)."""
    trace = loaded.trace
    view = mapping.path_view(trace, span_id, loaded.root_span_id)
    span, root = view["span"] or {}, view["root"]
    inputs, outputs = mapping.span_inputs_outputs(span)
    if inputs is None and outputs is None and span is root:
        inputs, outputs, _ = mapping.trace_inputs_outputs(trace)
    for name, path in (rule_mapping or {}).items():
        if path is None:
            continue
        value = mapping.resolve(view, path)
        if value is None:
            raise Refused("MappingPathError", f"mapping.{name} {path!r} found nothing in trace {loaded.trace_id}")
        if name == "inputs":
            inputs = value
        elif name == "outputs":
            outputs = value
    return Case(inputs={} if inputs is None else inputs, outputs=outputs, trace=trace)


def load_many(conn: Connection, keys: set[tuple[str, str]], max_spans: int) -> dict[tuple[str, str], LoadedTrace]:
    """The traces of ``keys`` (workspace, trace id), as :func:`~evaluator_host.online.levels.traces.load_trace`
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
