"""Online evaluation's test data: spans and traces written straight into the online tables (as the
receiver and assembly do), until a test sends real OTLP instead; and waiting for a trace's scores."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, insert, select, update

from evaluator_host.evaluation.trace_shape import SpanData
from evaluator_host.online.reading.spans import encode
from evaluator_host.store.db import make_engine
from evaluator_host.store.online.rows import OnlineScoreRow, OnlineSpanRow, OnlineTraceRow, SinkDeliveryRow

WS = "ws_default"


def hex_id(n: int) -> str:
    """``n`` random bytes as hex (a trace id: 16, a span id: 8)."""
    return os.urandom(n).hex()


def span(
    trace_id: str,
    name: str = "chat",
    *,
    parent: str | None = None,
    service: str = "chat-api",
    attributes: dict[str, Any] | None = None,
    start_ns: int | None = None,
    span_id: str | None = None,
    resource: dict[str, Any] | None = None,
) -> SpanData:
    """One ended span (1 ms long); ``resource``: resource attributes beside ``service.name``."""
    start = start_ns if start_ns is not None else time.time_ns()
    return SpanData(
        trace_id=trace_id,
        span_id=span_id or hex_id(8),
        parent_id=parent,
        name=name,
        start_ns=start,
        end_ns=start + 1_000_000,
        kind=2,
        status_code=1,
        attributes=attributes or {},
        resource={"service.name": service, **(resource or {})},
    )


def put_trace(engine: Engine, spans: Sequence[SpanData], *, workspace: str = WS, state: str = "ready") -> str:
    """Store ``spans`` (one trace's; the first is the root) and its trace row in ``state``; its id."""
    return put_traces(engine, [spans], workspace=workspace, state=state)[0]


def put_traces(
    engine: Engine, traces: Sequence[Sequence[SpanData]], *, workspace: str = WS, state: str = "ready"
) -> list[str]:
    """Store ``traces`` (each one trace's spans, its root first) and their trace rows in ``state``, in one
    transaction (the router sees all of them or none); their ids."""
    now = datetime.now(UTC)
    rows = [
        {
            "workspace_id": workspace,
            "trace_id": s.trace_id,
            "span_id": s.span_id,
            "parent_span_id": s.parent_id,
            "name": s.name,
            "service_name": s.resource.get("service.name"),
            "start_ns": s.start_ns,
            "end_ns": s.end_ns,
            "body": encode(s),
            "received_at": now,
        }
        for spans in traces
        for s in spans
    ]
    heads = [
        {
            "workspace_id": workspace,
            "trace_id": spans[0].trace_id,
            "service_name": spans[0].resource.get("service.name"),
            "root_span_id": spans[0].span_id,
            "root_name": spans[0].name,
            "span_count": len(spans),
            "first_seen_at": now,
            "last_span_at": now,
            "root_ended_at": now,
            "state": state,
            "ready_at": now if state != "open" else None,
        }
        for spans in traces
    ]
    with engine.begin() as conn:
        conn.execute(insert(OnlineSpanRow), rows)
        conn.execute(insert(OnlineTraceRow), heads)
    return [spans[0].trace_id for spans in traces]


def chat_spans(question: str = "2+2?", answer: str = "4", **kw: Any) -> list[SpanData]:
    """A two-span trace's spans (root ``chat`` with ``ag.data`` inputs/outputs, a child ``llm``)."""
    trace_id = hex_id(16)
    root = span(trace_id, "chat", attributes={"ag.data.inputs": {"q": question}, "ag.data.outputs": answer}, **kw)
    child = span(trace_id, "llm", parent=root.span_id, attributes={"gen_ai.request.model": "m1", "env": "prod"})
    return [root, child]


def chat_trace(
    engine: Engine, question: str = "2+2?", answer: str = "4", *, workspace: str = WS, state: str = "ready", **kw: Any
) -> str:
    """A two-span trace (:func:`chat_spans`) stored; its id."""
    return put_trace(engine, chat_spans(question, answer, **kw), workspace=workspace, state=state)


def score_rows(engine: Engine) -> list[Any]:
    """Every ``online_scores`` row."""
    with engine.connect() as conn:
        return list(conn.execute(select(OnlineScoreRow)))


def trace_states(engine: Engine) -> dict[str, str]:
    """trace id -> state."""
    with engine.connect() as conn:
        return {r.trace_id: r.state for r in conn.execute(select(OnlineTraceRow.trace_id, OnlineTraceRow.state))}


def forget_deliveries(data_dir: Path) -> None:
    """Every sink delivery of the service on ``data_dir`` (SQLite) back to ``pending``: as if the service died
    between the sink's answer and its record, so each is sent again."""
    engine = make_engine(f"sqlite:///{data_dir / 'evaluator-host.db'}")
    with engine.begin() as conn:
        conn.execute(update(SinkDeliveryRow).values(state="pending"))
    engine.dispose()
