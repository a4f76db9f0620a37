"""The receive side of online evaluation's tables: spans in, traces upserted, traces made ready, retention.

Contract (docs/online.md, "How it works"):

* :meth:`OnlineSpanStore.write` stores a request's spans and upserts their traces in ONE transaction:
  an ``INSERT … ON CONFLICT DO NOTHING … RETURNING`` into ``online_spans`` (a span already stored
  keeps its first row and counts nowhere) and an upsert of ``online_traces`` in (workspace, trace)
  order, so concurrent writers of several services never deadlock on PostgreSQL (``span_count``
  grows by the spans newly stored, ``last_span_at`` is the receipt; the first root — a span without
  a parent — gives the trace its ``root_span_id``, ``root_name`` and ``service_name``, and its end
  ``root_ended_at``; a new trace is ``open``; a trace's ``state`` is never changed here, so a
  ``routed`` trace stays routed). One writer at a time per store, with a group commit (see
  :meth:`OnlineSpanStore.write`): on SQLite the database's write lock would otherwise be taken by
  polling, sleeping milliseconds between tries. Both statements are driver SQL, not SQLAlchemy's
  per-row parameter processing (it cost more than the database's insert): on SQLite multi-row
  ``VALUES`` with the timestamps in SQLAlchemy's own SQLite format (its bind processor, so the Core
  queries compare them); on PostgreSQL one array per column through ``unnest``, sent in binary
  (``%b``: psycopg's text arrays escape every quote of the JSON bodies with a regex).
* :meth:`OnlineSpanStore.mark_ready`: open traces whose root has ended and whose last span is older
  than the quiet period — or whose last span is older than the timeout, root or not — become ``ready``;
  and, in the same transaction, the *complete* ones — root ended, every span's ``parent_span_id``
  one of the trace's stored spans (no orphan) — whose last span is older than the settle period.
* :meth:`OnlineSpanStore.sweep`: spans received before the retention cutoff are deleted, and the
  traces whose last span is before it (and their backfill case-hash rows, in the same transaction), and the
  routing decisions made before it.
* Usage and the storage quota (:mod:`evaluator_host.store.online.usage`): a write charges its newly
  stored spans' bytes to ``online_usage`` in its transaction (one statement per group commit), under
  the workspace's storage quota when it has one (:meth:`OnlineSpanStore.write_within`); the sweep
  releases what it deletes.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Table, delete, func, select, tuple_
from sqlalchemy.engine import Connection, Engine

from evaluator_host.store import sqlite_bulk, sqlite_writer
from evaluator_host.store.db import WorkspaceRow
from evaluator_host.store.online import case_hashes as online_case_hashes
from evaluator_host.store.online import sessions as online_sessions
from evaluator_host.store.online.decisions import DecisionStore
from evaluator_host.store.online.readiness import COMPLETE, QUIET
from evaluator_host.store.online.rows import OnlineSpanRow, OnlineTraceRow
from evaluator_host.store.online.span_inserts import insert_spans
from evaluator_host.store.online.usage import admit, charge, delete_expired, held, span_bytes, stored_totals
from evaluator_host.store.sqlite_checkpoint import Checkpointer, no_autocheckpoint

__all__ = ["SPANS", "TRACES", "OnlineSpanStore", "Written"]

SPANS: Table = OnlineSpanRow.__table__  # type: ignore[assignment]
TRACES: Table = OnlineTraceRow.__table__  # type: ignore[assignment]
SWEEP_CHUNK = 20_000  # expired traces deleted (their case keys with them) per transaction of the sweep
_TRACE_COLUMNS = (
    "workspace_id",
    "trace_id",
    "service_name",
    "root_span_id",
    "root_name",
    "span_count",
    "first_seen_at",
    "last_span_at",
    "root_ended_at",
    "state",
    "ready_at",
)
_SQLITE_UPSERT = (  # the tail of multi-row statements (store/sqlite_bulk.py)
    "ON CONFLICT (workspace_id, trace_id) DO UPDATE SET "
    "span_count = span_count + excluded.span_count, last_span_at = excluded.last_span_at, "
    "root_span_id = CASE WHEN root_span_id IS NULL THEN excluded.root_span_id ELSE root_span_id END, "
    "root_name = CASE WHEN root_span_id IS NULL THEN excluded.root_name ELSE root_name END, "
    "root_ended_at = CASE WHEN root_span_id IS NULL THEN excluded.root_ended_at ELSE root_ended_at END, "
    "service_name = CASE WHEN root_span_id IS NULL AND excluded.root_span_id IS NOT NULL "
    "THEN excluded.service_name ELSE coalesce(service_name, excluded.service_name) END"
)


_PG_TYPES = {"workspace_id": "text", "trace_id": "text", "span_id": "text", "parent_span_id": "text", "name": "text",
             "service_name": "text", "root_span_id": "text", "root_name": "text", "state": "text", "body": "text",
             "start_ns": "bigint", "end_ns": "bigint", "span_count": "integer", "received_at": "timestamptz",
             "first_seen_at": "timestamptz", "last_span_at": "timestamptz", "root_ended_at": "timestamptz",
             "ready_at": "timestamptz"}  # fmt: skip


def _unnest(columns: Sequence[str]) -> str:
    return "SELECT * FROM unnest(" + ", ".join(f"%b::{_PG_TYPES[c]}[]" for c in columns) + ")"


# PostgreSQL: each column as one array parameter (a statement of any size, adapted by psycopg in bulk)
_PG_UPSERT = (
    f"INSERT INTO online_traces AS t ({', '.join(_TRACE_COLUMNS)}) {_unnest(_TRACE_COLUMNS)} "
    "ON CONFLICT (workspace_id, trace_id) DO UPDATE SET "
    "span_count = t.span_count + excluded.span_count, last_span_at = excluded.last_span_at, "
    "root_span_id = CASE WHEN t.root_span_id IS NULL THEN excluded.root_span_id ELSE t.root_span_id END, "
    "root_name = CASE WHEN t.root_span_id IS NULL THEN excluded.root_name ELSE t.root_name END, "
    "root_ended_at = CASE WHEN t.root_span_id IS NULL THEN excluded.root_ended_at ELSE t.root_ended_at END, "
    "service_name = CASE WHEN t.root_span_id IS NULL AND excluded.root_span_id IS NOT NULL "
    "THEN excluded.service_name ELSE coalesce(t.service_name, excluded.service_name) END"
)


@dataclass
class _Pending:
    """One request's rows waiting for a group commit, and what became of them."""

    rows: list[dict[str, Any]]
    limit: int | None = None  # the workspace's storage quota (bytes), None: none
    stored: int = 0
    over_quota: int = 0  # trailing spans left out: past the storage quota
    done: bool = False
    error: BaseException | None = None


@dataclass(frozen=True)
class Written:
    """What became of one request's spans: newly ``stored`` (duplicates are neither), and the trailing
    ones left out because they would have passed the workspace's storage quota (``over_quota``)."""

    stored: int
    over_quota: int


class OnlineSpanStore:
    """``online_spans`` and ``online_traces`` as the receiver and assembly use them."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.sqlite = engine.dialect.name == "sqlite"
        self._writer = threading.Lock()  # one writing transaction at a time (see :meth:`write`)
        self._queue = threading.Lock()
        self._pending: list[_Pending] = []
        # SQLite: WAL checkpoints after the span writer's lock is released, not in its commits
        self._checkpoints = Checkpointer(engine) if self.sqlite and _file_database(engine) else None

    def write(self, workspace: str, spans: Sequence[dict[str, Any]], now: datetime) -> int:
        """:meth:`write_within` without a storage quota: the number of spans newly stored."""
        return self.write_within(workspace, spans, now, None).stored

    def write_within(
        self, workspace: str, spans: Sequence[dict[str, Any]], now: datetime, storage_limit: int | None
    ) -> Written:
        """Store ``spans`` (dicts of the ``online_spans`` columns but ``workspace_id`` and ``received_at``,
        plus ``root_ended_at``: the span's end as a datetime, or None) and upsert their traces, charging
        their bytes to the workspace's usage; under ``storage_limit`` (its storage quota: bytes) only the
        leading spans that fit, and ``QuotaExceeded`` when none does (:mod:`evaluator_host.store.online.usage`).

        Group commit: a caller that finds the writer busy leaves its spans in the queue; whoever holds
        the writer next writes every queued request in one transaction (each still gets its own count,
        and all of them the transaction's error if it fails). Rows and parameters are made before."""
        if not spans:
            return Written(0, 0)
        at = sqlite_bulk.sqlite_time(now) if self.sqlite else now
        rows = [
            {**s, "workspace_id": workspace, "received_at": now, "at": at, "bytes": span_bytes(s["body"])}
            for s in spans
        ]
        job = _Pending(rows, storage_limit)
        with self._queue:
            self._pending.append(job)
        group: list[_Pending] = []
        with self._writer:
            if not job.done:
                with self._queue:
                    group, self._pending = self._pending, []
                self._write_group(group)
        if group and self._checkpoints is not None:  # the WAL copied back out of the writer's lock
            self._checkpoints.wrote(sum(row["bytes"] for one in group for row in one.rows))
        if job.error is not None:
            raise job.error
        return Written(job.stored, job.over_quota)

    def _write_group(self, group: list[_Pending]) -> None:
        try:
            # a request waits on it: before the other writers waiting (store/sqlite_writer.py)
            with sqlite_writer.first(), self.engine.connect() as conn, self._no_checkpoint(conn), conn.begin():
                if any(job.limit is not None for job in group):
                    self._admit(conn, group)
                rows: list[dict[str, Any]] = []
                seen: set[tuple[str, str, str]] = set()
                for job in group:  # a span twice (in a request, or in two): its first copy, as across requests
                    for row in job.rows:
                        key = (row["workspace_id"], row["trace_id"], row["span_id"])
                        if key not in seen:
                            seen.add(key)
                            rows.append(row)
                stored = insert_spans(conn, rows, sqlite=self.sqlite)
                charge(conn, stored_totals(rows, stored), sqlite=self.sqlite)
                traces = _trace_values(rows, stored)
                if traces and self.sqlite:
                    texts: dict[datetime, Any] = {}  # a group's traces share their receipt times
                    values = [_sqlite_trace(t, texts) for t in traces]
                    sqlite_bulk.insert(conn, "online_traces", _TRACE_COLUMNS, values, _SQLITE_UPSERT)
                elif traces:
                    conn.exec_driver_sql(_PG_UPSERT, tuple([t[c] for t in traces] for c in _TRACE_COLUMNS))
            for job in group:
                for row in job.rows:
                    key = (row["workspace_id"], row["trace_id"], row["span_id"])
                    if key in stored:
                        stored.discard(key)  # counted once: for the first request that sent it
                        job.stored += 1
        except BaseException as exc:
            for job in group:
                job.error = job.error or exc
            raise
        finally:
            for job in group:
                job.done = True

    def _no_checkpoint(self, conn: Connection) -> contextlib.AbstractContextManager[None]:
        """SQLite: the write's commit copies no WAL back (:mod:`~evaluator_host.store.sqlite_checkpoint`)."""
        return no_autocheckpoint(conn) if self._checkpoints is not None else contextlib.nullcontext()

    def _admit(self, conn: Connection, group: list[_Pending]) -> None:
        """The storage quota of each request (:func:`admit`): its rows cut to those that fit, or refused."""
        requests = [(job.rows[0]["workspace_id"], job.limit, job.rows) for job in group]
        if self.sqlite:  # the database's write lock before the usage is read (pysqlite reads outside a
            conn.exec_driver_sql("UPDATE online_usage SET spans = spans WHERE 0")  # transaction until a write)
        for job, (keep, refusal) in zip(group, admit(conn, requests, lock=not self.sqlite), strict=True):
            job.over_quota = len(job.rows) - keep
            job.rows = job.rows[:keep]
            job.error = refusal

    def mark_ready(self, now: datetime, quiet_s: float, timeout_s: float, settle_s: float | None = None) -> int:
        """Make quiet traces ``ready``, and complete ones settled ``settle_s`` (None, or not below
        ``quiet_s``: no fast path) — see the module docstring; how many."""
        quiet, stale = now - timedelta(seconds=quiet_s), now - timedelta(seconds=timeout_s)
        with self.engine.begin() as conn:
            made = int(conn.execute(QUIET, {"now": now, "quiet": quiet, "stale": stale}).rowcount or 0)
            if settle_s is not None and settle_s < quiet_s:
                settled = now - timedelta(seconds=settle_s)
                made += int(conn.execute(COMPLETE, {"now": now, "settled": settled}).rowcount or 0)
            return made

    def sweep(self, cutoff: datetime) -> tuple[int, int]:
        """Delete spans received before ``cutoff`` (released from their workspaces' usage), traces and
        sessions whose last span came before it: (spans, traces)."""
        spans = delete_expired(self.engine, cutoff, sqlite=self.sqlite)
        key = tuple_(TRACES.c.workspace_id, TRACES.c.trace_id)
        expired = select(TRACES.c.workspace_id, TRACES.c.trace_id).where(TRACES.c.last_span_at < cutoff)
        statement = delete(TRACES).where(key.in_(expired.limit(SWEEP_CHUNK)))
        traces = 0
        while True:  # a chunk a transaction: a first pass after a long pause holds the writer and memory briefly
            with self.engine.begin() as conn:
                deleted = conn.execute(statement.returning(TRACES.c.workspace_id, TRACES.c.trace_id))
                gone = [(str(w), str(t)) for w, t in deleted]
                online_case_hashes.forget(conn, gone)  # the backfills' case keys of those traces go with them
            traces += len(gone)
            if len(gone) < SWEEP_CHUNK:
                break
        with self.engine.begin() as conn:
            online_sessions.sweep(conn, cutoff)  # sessions whose last span is that old, and their rows
        DecisionStore(self.engine).sweep(cutoff)  # a trace's decisions go with it (made at or after its last span)
        return spans, int(traces)

    def count_spans(self) -> int:
        """Spans stored (every workspace)."""
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(SPANS)).scalar_one())

    def held(self) -> dict[str, int]:
        """Spans each workspace stores."""
        return held(self.engine)

    def count_workspaces(self) -> int:
        """Workspaces there are (each gets a share of ``online_max_stored_spans``)."""
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(WorkspaceRow)).scalar_one())

    def count_open(self) -> int:
        """Traces still ``open`` (every workspace)."""
        with self.engine.connect() as conn:
            query = select(func.count()).select_from(TRACES).where(TRACES.c.state == "open")
            return int(conn.execute(query).scalar_one())


def _file_database(engine: Engine) -> bool:
    """Whether ``engine`` is a SQLite database in a file (an in-memory one has no WAL)."""
    database = engine.url.database or ""
    return bool(database) and database != ":memory:" and not database.startswith("file::memory:")


def _trace_values(rows: Sequence[dict[str, Any]], stored: set[tuple[str, str, str]]) -> list[dict[str, Any]]:
    """One upsert row per (workspace, trace) with newly stored spans: their count, the first root among
    them, the earliest and latest receipt; in key order (concurrent writers lock traces in one order)."""
    traces: dict[tuple[str, str], dict[str, Any]] = {}
    for span in rows:
        workspace, trace_id = span["workspace_id"], span["trace_id"]
        if (workspace, trace_id, span["span_id"]) not in stored:
            continue
        key = (workspace, trace_id)
        trace = traces.get(key)
        if trace is None:
            trace = traces[key] = {
                "workspace_id": key[0],
                "trace_id": key[1],
                "service_name": span["service_name"],
                "root_span_id": None,
                "root_name": None,
                "span_count": 0,
                "first_seen_at": span["received_at"],
                "last_span_at": span["received_at"],
                "root_ended_at": None,
                "state": "open",
                "ready_at": None,
            }
        trace["span_count"] += 1
        if span["received_at"] > trace["last_span_at"]:  # the latest receipt (max(), without the call)
            trace["last_span_at"] = span["received_at"]
        if span["parent_span_id"] is None and trace["root_span_id"] is None:
            trace["root_span_id"] = span["span_id"]
            trace["root_name"] = span["name"]
            trace["service_name"] = span["service_name"]
            trace["root_ended_at"] = span["root_ended_at"]
    return [traces[key] for key in sorted(traces)]


def _sqlite_trace(trace: dict[str, Any], texts: dict[datetime, Any]) -> tuple[Any, ...]:
    """An upsert row's parameters (in :data:`_TRACE_COLUMNS`' order), its times as SQLAlchemy writes them on
    SQLite (each distinct time converted once per group: ``texts``)."""

    def time(value: datetime | None) -> Any:
        if value is None:
            return None
        text = texts.get(value)
        if text is None:
            text = texts[value] = sqlite_bulk.sqlite_time(value)
        return text

    return (
        trace["workspace_id"],
        trace["trace_id"],
        trace["service_name"],
        trace["root_span_id"],
        trace["root_name"],
        trace["span_count"],
        time(trace["first_seen_at"]),
        time(trace["last_span_at"]),
        time(trace["root_ended_at"]),
        trace["state"],
        time(trace["ready_at"]),
    )
