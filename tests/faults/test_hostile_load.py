"""Hostile neighbours under load, bounded for ``make test``: many concurrent clients for a few seconds
over six good and six hostile evaluators (raise, time out, flood output, exhaust memory, loop
forever, return NaN) on the process backend. No 5xx, no connection error, every answer the status
its evaluator earns, the service healthy afterwards, no worker leaked, its RSS roughly flat (a
generous bound; ``make soak`` runs the 60 s version with the figures)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx
import pytest

from bench.hostile import hammer, report
from tests.support.faults import worker_pids
from tests.support.service import assert_healthy, serving
from tests.support.wait import wait_until

# the serial tier: alone on the machine, after the parallel one (tests/tiers.py)
pytestmark = pytest.mark.serial

CLIENTS = int(os.environ.get("EVALUATOR_HOST_LOAD_CLIENTS", "48"))
MAX_WORKERS = 16  # the service's default
SECONDS = float(os.environ.get("EVALUATOR_HOST_LOAD_SECONDS", "6"))


def _sandboxes(service_pid: int) -> int:
    """Live workers of the service: one ``unshare`` process each."""
    count = 0
    for pid in worker_pids(service_pid):
        try:
            count += Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"/usr/bin/unshare")
        except OSError:  # gone meanwhile
            pass
    return count


def _pool_size(client: httpx.Client) -> int:
    workers = client.get("/healthz").json()["workers"]
    # the pool's two caps: at most max_workers bound workers (leasing.py), at most max_workers spares (spares.py)
    assert int(workers["total"]) <= MAX_WORKERS and int(workers["spares"]) <= MAX_WORKERS, workers
    return int(workers["total"]) + int(workers["spares"])


def test_hostile_neighbours_under_load_break_nothing(tmp_path: Path) -> None:
    with serving(tmp_path / "data", "process") as (client, proc):
        warm = asyncio.run(hammer(str(client.base_url), proc.pid, 4, 2))  # starts every worker once
        tally = asyncio.run(hammer(str(client.base_url), proc.pid, CLIENTS, SECONDS))
        print(report("process", CLIENTS, SECONDS, tally))
        assert tally.server_errors == 0 and tally.connection_errors == 0, tally.wrong
        assert not tally.wrong, tally.wrong
        assert tally.total > CLIENTS  # every client got answers
        assert {key.split(":")[0] for key in tally.answers} >= {"raise", "timeout", "flood", "memory", "loop", "nan"}
        first, peak = (warm.rss_mb or tally.rss_mb)[-1], max(tally.rss_mb)
        assert peak < first + 200, f"service RSS grew from {first:.0f} MB to {peak:.0f} MB"
        assert client.get("/healthz").json()["status"] == "ok"
        # one `unshare` process per live worker: no more than the pool holds (replaced ones are reaped)
        wait_until(lambda: _sandboxes(proc.pid) <= _pool_size(client), 30, what="the pool to settle")
        assert _pool_size(client) <= 2 * MAX_WORKERS
        assert_healthy(client)  # type: ignore[arg-type]
        proc.terminate()
        proc.wait(timeout=30)  # and it still stops when asked
