"""A backfill page's score rows written on SQLite beside a thread running Python (issue 50): ``sqlite3``'s
``executemany`` against :func:`evaluator_host.store.sqlite_bulk.insert`.

``executemany`` lets go of the GIL around each row's step and takes it back after; beside a thread running Python
(in the service: the next page read and scored while this one is stored) each row then waits for that thread's
switch interval. ``sqlite_bulk.insert`` writes the rows by multi-row statements: a hand-over a statement. The
bench writes ``WRITE_PAGES`` (default 3) pages of 1,000 ``online_scores`` rows (random target ids, one
transaction a page) into a fresh database each way, alone and beside a thread summing squares, and reports the
wall time a row. Run alone: ``.venv/bin/python -m bench.sqlite_writes``.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.engine import Connection

from evaluator_host.store import sqlite_bulk
from evaluator_host.store.db import make_engine

PAGES = int(os.environ.get("WRITE_PAGES", "3"))
_TAIL = "ON CONFLICT (rule_id, target_id) DO NOTHING"


def _row(at: datetime) -> dict[str, Any]:
    target = uuid.uuid4().hex
    return {
        "rule_id": "rule_1", "target_id": target, "trace_id": target, "workspace_id": "ws_default", "span_id": None,
        "state": "done", "claimed_by": "svc", "claimed_until": None, "attempts": 1, "enqueued_at": at,
        "scored_at": at, "evaluator_id": "ev_1", "revision": 1, "runtime_id": "python-3.11", "status": "ok",
        "score": 1.0, "passed": None, "label": None, "duration_ms": 0.2, "backfill_id": "bf_1",
        "result": '{"status":"ok","score":1.0,"details":{},"duration_ms":0.2}',
    }  # fmt: skip


def _many(conn: Connection, columns: list[str], values: list[tuple[Any, ...]]) -> None:
    conn.exec_driver_sql(sqlite_bulk.insert_sql("online_scores", columns, _TAIL), values)


def _bulk(conn: Connection, columns: list[str], values: list[tuple[Any, ...]]) -> None:
    sqlite_bulk.insert(conn, "online_scores", columns, values, _TAIL)


def _write(how: Callable[[Connection, list[str], list[tuple[Any, ...]]], None], busy: bool) -> float:
    """µs of wall time a row (see the module docstring)."""
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(i * i for i in range(1_000))

    spinner = threading.Thread(target=spin, daemon=True)
    with tempfile.TemporaryDirectory(prefix="evaluator-host-bench-writes-") as data_dir:
        engine = make_engine(f"sqlite:///{data_dir}/writes.db")
        if busy:
            spinner.start()
        try:
            seconds = 0.0
            for _ in range(PAGES):
                rows = sorted((_row(datetime.now(UTC)) for _ in range(1_000)), key=lambda r: str(r["target_id"]))
                columns = list(rows[0])
                values = sqlite_bulk.params(rows, columns)
                start = time.perf_counter()
                with engine.begin() as conn:
                    how(conn, columns, values)
                seconds += time.perf_counter() - start
        finally:
            stop.set()
            engine.dispose()
    return seconds / (PAGES * 1_000) * 1e6


def measure() -> dict[str, float]:
    """µs a row: ``bulk``/``many`` alone and ``bulk_busy``/``many_busy`` beside a busy thread."""
    return {f"{name}{'_busy' if busy else ''}": _write(how, busy)
            for name, how in (("bulk", _bulk), ("many", _many)) for busy in (False, True)}  # fmt: skip


def row(f: dict[str, float]) -> str:
    """The docs/benchmarks.md table row."""
    return (
        f"| a page's 1,000 score rows on SQLite beside a thread running Python, wall a row: multi-row statements "
        f"(`store/sqlite_bulk.py`; alone {f['bulk']:.0f} µs) | {f['bulk_busy']:,.0f} µs | `executemany` (a GIL "
        f"hand-over a row): {f['many_busy']:,.0f} µs (alone {f['many']:.0f} µs) | no wait a row | "
        f"{'PASS' if f['bulk_busy'] < f['many_busy'] / 2 else 'MISS'} |"
    )


if __name__ == "__main__":
    print(row(measure()))
