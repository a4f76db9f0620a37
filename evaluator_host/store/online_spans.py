"""The receive side of online evaluation's tables: spans in, traces upserted, traces made ready, retention.

Contract (docs/online.md, "How it works"):

* :meth:`OnlineSpanStore.write` stores a request's spans and upserts their traces in ONE transaction:
  one multi-row ``INSERT … ON CONFLICT DO NOTHING … RETURNING`` into ``online_spans`` (a span already
  stored keeps its first row and counts nowhere) and one executemany upsert of ``online_traces``
  (``span_count`` grows by the spans newly stored, ``last_span_at`` is now; the first root — a span
  without a parent — gives the trace its ``root_span_id``, ``root_name`` and ``service_name``, and
  its end ``root_ended_at``; a new trace is ``open``; a trace's ``state`` is never changed here, so a
  ``routed`` trace stays routed). Portable: SQLite and PostgreSQL.
* :meth:`OnlineSpanStore.mark_ready`: open traces whose root has ended and whose last span is older
  than the quiet period — or whose last span is older than the timeout, root or not — become ``ready``.
* :meth:`OnlineSpanStore.sweep`: spans received before the retention cutoff are deleted, and the
  traces whose last span is before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Table, case, delete, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine

from evaluator_host.store.online_rows import OnlineSpanRow, OnlineTraceRow

__all__ = ["SPANS", "TRACES", "OnlineSpanStore"]

SPANS: Table = OnlineSpanRow.__table__  # type: ignore[assignment]
TRACES: Table = OnlineTraceRow.__table__  # type: ignore[assignment]
_SPAN_KEY = ["workspace_id", "trace_id", "span_id"]
_TRACE_KEY = ["workspace_id", "trace_id"]


def _insert(conn: Connection, table: Table) -> Any:
    """The dialect's INSERT (both have ``on_conflict_do_nothing``/``_do_update``)."""
    return (postgresql if conn.dialect.name == "postgresql" else sqlite).insert(table)


class OnlineSpanStore:
    """``online_spans`` and ``online_traces`` as the receiver and assembly use them."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def write(self, workspace: str, spans: Sequence[dict[str, Any]], now: datetime) -> int:
        """Store ``spans`` (dicts of the ``online_spans`` columns but ``workspace_id`` and ``received_at``,
        plus ``root_ended_at``: the span's end as a datetime, or None) and upsert their traces; the
        number of spans newly stored (see the module docstring)."""
        if not spans:
            return 0
        rows = []
        seen: set[tuple[str, str]] = set()
        for span in spans:  # a span twice in one request: its first copy, as across requests
            key = (span["trace_id"], span["span_id"])
            if key not in seen:
                seen.add(key)
                rows.append(span)
        values = [
            {
                "workspace_id": workspace,
                "trace_id": s["trace_id"],
                "span_id": s["span_id"],
                "parent_span_id": s["parent_span_id"],
                "name": s["name"],
                "service_name": s["service_name"],
                "start_ns": s["start_ns"],
                "end_ns": s["end_ns"],
                "body": s["body"],
                "received_at": now,
            }
            for s in rows
        ]
        with self.engine.begin() as conn:
            query = _insert(conn, SPANS).on_conflict_do_nothing(index_elements=_SPAN_KEY)
            stored = {tuple(r) for r in conn.execute(query.returning(SPANS.c.trace_id, SPANS.c.span_id), values)}
            traces = _trace_values(workspace, rows, stored, now)
            if traces:
                conn.execute(_upsert_traces(conn), traces)
        return len(stored)

    def mark_ready(self, now: datetime, quiet_s: float, timeout_s: float) -> int:
        """Make quiet traces ``ready`` (see the module docstring); how many."""
        quiet, stale = now - timedelta(seconds=quiet_s), now - timedelta(seconds=timeout_s)
        query = (
            update(TRACES)
            .where(TRACES.c.state == "open")
            .where(
                ((TRACES.c.root_ended_at.is_not(None)) & (TRACES.c.last_span_at < quiet))
                | (TRACES.c.last_span_at < stale)
            )
            .values(state="ready", ready_at=now)
        )
        with self.engine.begin() as conn:
            return int(conn.execute(query).rowcount or 0)

    def sweep(self, cutoff: datetime) -> tuple[int, int]:
        """Delete spans received before ``cutoff`` and traces whose last span came before it: (spans, traces)."""
        with self.engine.begin() as conn:
            spans = conn.execute(delete(SPANS).where(SPANS.c.received_at < cutoff)).rowcount or 0
            traces = conn.execute(delete(TRACES).where(TRACES.c.last_span_at < cutoff)).rowcount or 0
        return int(spans), int(traces)

    def count_spans(self) -> int:
        """Spans stored (every workspace)."""
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(SPANS)).scalar_one())

    def count_open(self) -> int:
        """Traces still ``open`` (every workspace)."""
        with self.engine.connect() as conn:
            query = select(func.count()).select_from(TRACES).where(TRACES.c.state == "open")
            return int(conn.execute(query).scalar_one())


def _trace_values(
    workspace: str, rows: Sequence[dict[str, Any]], stored: set[tuple[Any, ...]], now: datetime
) -> list[dict[str, Any]]:
    """One upsert row per trace with newly stored spans: their count, and the first root among them."""
    traces: dict[str, dict[str, Any]] = {}
    for span in rows:
        trace_id = span["trace_id"]
        if (trace_id, span["span_id"]) not in stored:
            continue
        trace = traces.get(trace_id)
        if trace is None:
            trace = traces[trace_id] = {
                "workspace_id": workspace,
                "trace_id": trace_id,
                "service_name": span["service_name"],
                "root_span_id": None,
                "root_name": None,
                "span_count": 0,
                "first_seen_at": now,
                "last_span_at": now,
                "root_ended_at": None,
                "state": "open",
                "ready_at": None,
            }
        trace["span_count"] += 1
        if span["parent_span_id"] is None and trace["root_span_id"] is None:
            trace["root_span_id"] = span["span_id"]
            trace["root_name"] = span["name"]
            trace["service_name"] = span["service_name"]
            trace["root_ended_at"] = span["root_ended_at"]
    return list(traces.values())


def _upsert_traces(conn: Connection) -> Any:
    query = _insert(conn, TRACES)
    new, old = query.excluded, TRACES.c
    no_root = old.root_span_id.is_(None)
    return query.on_conflict_do_update(
        index_elements=_TRACE_KEY,
        set_={
            "span_count": old.span_count + new.span_count,
            "last_span_at": new.last_span_at,
            "root_span_id": case((no_root, new.root_span_id), else_=old.root_span_id),
            "root_name": case((no_root, new.root_name), else_=old.root_name),
            "root_ended_at": case((no_root, new.root_ended_at), else_=old.root_ended_at),
            "service_name": case(
                (no_root & new.root_span_id.is_not(None), new.service_name),
                else_=func.coalesce(old.service_name, new.service_name),
            ),
        },
    )
