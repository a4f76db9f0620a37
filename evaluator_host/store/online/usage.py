"""What a workspace's stored spans add up to (``online_usage``), and the storage quota applied to them.

Contract (issue 47, item 5; docs/online.md, "Limits, backpressure and retention"):

* A span's size is the UTF-8 bytes of its stored ``body`` (:func:`span_bytes`). ``online_usage`` holds,
  per workspace, its stored spans and their bytes. :func:`charge` adds a write's newly stored spans in
  the write's own transaction — ONE statement for the whole group commit (a row per workspace), never
  one per span; :func:`delete_expired` deletes expired spans in chunks of :data:`_CHUNK`, each chunk's
  ``DELETE … RETURNING`` giving back exactly the rows it deleted (a concurrent sweep of another service
  gets other rows, or none), subtracted from the usage in the same transaction. So the usage always
  equals the stored spans.
* The storage quota (``max_dataset_bytes``: datasets, job results — and now spans, see
  :mod:`evaluator_host.tenancy.quotas`) applies to a write by :func:`admit`, inside the write's
  transaction (on PostgreSQL with the workspace's row locked, as job commits do, so a workspace's span
  writes and job commits take turns; on SQLite with the database's write lock taken first, so two
  services' writers on one file take turns too): of each request only the leading spans that fit in the room left
  are stored; a request of which none fits (the workspace at or over its quota) is refused with
  :func:`spans_over_quota`'s ``QuotaExceeded``. Spans already stored (duplicates) count as room taken
  for the decision and are never charged: the quota is never passed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import LargeBinary, Table, bindparam, cast, delete, func, select, tuple_
from sqlalchemy.engine import Connection, Engine

from evaluator_host.errors import QuotaExceeded
from evaluator_host.store.jobs.results import storage_used
from evaluator_host.store.online.rows import OnlineSpanRow, OnlineUsageRow
from evaluator_host.tenancy.quotas import STORAGE_QUOTA

__all__ = ["USAGE", "admit", "charge", "delete_expired", "held", "span_bytes", "spans_over_quota", "stored_totals"]

SPANS: Table = OnlineSpanRow.__table__  # type: ignore[assignment]
USAGE: Table = OnlineUsageRow.__table__  # type: ignore[assignment]
_CHUNK = 20_000  # expired spans deleted (and released) per transaction
_RETRY_S = 60


def span_bytes(body: str) -> int:
    """What a span counts against its workspace's storage: its body's UTF-8 bytes."""
    return len(body) if body.isascii() else len(body.encode())


def spans_over_quota(workspace_id: str, limit: int, used: int) -> QuotaExceeded:
    """The refusal of a request none of whose spans fits under the storage quota."""
    return QuotaExceeded(
        f"workspace {workspace_id} stores {used:,} bytes (datasets, job results and spans), which leaves no "
        f"room for these spans under its {STORAGE_QUOTA} quota of {limit:,} bytes; spans are deleted after "
        "online_span_retention_s, or delete jobs or datasets to make room",
        quota=STORAGE_QUOTA,
        retry_after_s=_RETRY_S,
    )


def admit(
    conn: Connection, requests: Sequence[tuple[str, int | None, list[dict[str, Any]]]], *, lock: bool
) -> list[tuple[int, QuotaExceeded | None]]:
    """For each request ``(workspace, storage limit or None, rows with their "bytes")`` in order: how many
    of its leading rows may be stored, and its refusal when none may (see the module docstring). ``lock``:
    lock each limited workspace's row first (PostgreSQL), in id order."""
    used: dict[str, int] = {}
    for workspace in sorted({w for w, limit, _ in requests if limit is not None}):
        used[workspace] = storage_used(conn, workspace, lock=lock)
    out: list[tuple[int, QuotaExceeded | None]] = []
    for workspace, limit, rows in requests:
        if limit is None:
            out.append((len(rows), None))
            continue
        room, keep = limit - used[workspace], 0
        for row in rows:
            if row["bytes"] > room:
                break
            room -= row["bytes"]
            keep += 1
        if rows and not keep:
            out.append((0, spans_over_quota(workspace, limit, used[workspace])))
            continue
        used[workspace] = limit - room
        out.append((keep, None))
    return out


def charge(conn: Connection, totals: dict[str, tuple[int, int]], *, sqlite: bool) -> None:
    """Add ``{workspace: (spans, bytes)}`` to ``online_usage``: one statement (a row per workspace, in id
    order: concurrent writers lock them in one order)."""
    if not totals:
        return
    mark = "?" if sqlite else "%s"
    conn.exec_driver_sql(
        f"INSERT INTO online_usage (workspace_id, spans, bytes) VALUES ({mark}, {mark}, {mark}) "
        "ON CONFLICT (workspace_id) DO UPDATE SET spans = online_usage.spans + excluded.spans, "
        "bytes = online_usage.bytes + excluded.bytes",
        [(workspace, *totals[workspace]) for workspace in sorted(totals)],
    )


def stored_totals(rows: Sequence[dict[str, Any]], stored: set[tuple[str, str, str]]) -> dict[str, tuple[int, int]]:
    """``{workspace: (spans, bytes)}`` newly stored: what :func:`charge` adds to ``online_usage``."""
    totals: dict[str, tuple[int, int]] = {}
    for row in rows:
        workspace = row["workspace_id"]
        if (workspace, row["trace_id"], row["span_id"]) in stored:
            spans, size = totals.get(workspace, (0, 0))
            totals[workspace] = (spans + 1, size + row["bytes"])
    return totals


def delete_expired(engine: Engine, cutoff: Any, *, sqlite: bool) -> int:
    """Delete the spans received before ``cutoff`` and release them from ``online_usage`` (see the module
    docstring); how many were deleted."""
    size = func.length(cast(SPANS.c.body, LargeBinary)) if sqlite else func.octet_length(SPANS.c.body)
    key = tuple_(SPANS.c.workspace_id, SPANS.c.trace_id, SPANS.c.span_id)
    expired = select(SPANS.c.workspace_id, SPANS.c.trace_id, SPANS.c.span_id).where(SPANS.c.received_at < cutoff)
    statement = delete(SPANS).where(key.in_(expired.limit(_CHUNK))).returning(SPANS.c.workspace_id, size)
    deleted = 0
    while True:
        with engine.begin() as conn:
            totals: dict[str, list[int]] = {}
            count = 0
            for workspace, bytes_ in conn.execute(statement):
                total = totals.setdefault(workspace, [0, 0])
                total[0] += 1
                total[1] += int(bytes_ or 0)
                count += 1
            if totals:
                conn.execute(
                    USAGE.update()
                    .where(USAGE.c.workspace_id == bindparam("w"))
                    .values(spans=USAGE.c.spans - bindparam("n"), bytes=USAGE.c.bytes - bindparam("b")),
                    [{"w": w, "n": n, "b": b} for w, (n, b) in sorted(totals.items())],
                )
        deleted += count
        if count < _CHUNK:
            return deleted


def held(engine: Engine) -> dict[str, int]:
    """Spans each workspace stores (those with any), counted from the spans themselves (what the count of
    every span cost before: one pass of the key's index; a count that can never drift)."""
    with engine.connect() as conn:
        rows = conn.execute(select(SPANS.c.workspace_id, func.count()).group_by(SPANS.c.workspace_id))
        return {workspace: int(spans) for workspace, spans in rows}
