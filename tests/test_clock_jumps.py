"""A wall-clock jump (an NTP step, a resumed VM, ``date -s``) breaks no duration in the service.

Idle TTLs (warm workers and spares) and job timings (running time, rows/s, chunk sizes) run on
the monotonic clock. Here the wall clock leaps a day forward and back on every read
(``time.time`` patched, and the runner's timestamps too) while the monotonic clock runs on:
nothing expires early, nothing lives forever, and a job's figures stay true. Wall-clock time is
only ever compared with wall-clock stamps (file mtimes, the engine's creation times, stored
``created_at``), which a jump moves alike.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from evaluator_host.jobs.running import runner as runner_module
from evaluator_host.store.db import utcnow
from evaluator_host.testing.fake import Reply
from tests.support.aio import aio
from tests.support.pool import cases, pooled, run, settle
from tests.support.runner import index, wired

DAY = 86_400.0


@pytest.fixture
def jumpy_wall_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``time.time()`` and the runner's ``utcnow()`` a day ahead, then a day behind, on every read."""
    real = time.time
    hops = itertools.cycle([DAY, -DAY, 10 * DAY, -10 * DAY])
    monkeypatch.setattr(time, "time", lambda: real() + next(hops))
    monkeypatch.setattr(runner_module, "utcnow", lambda: utcnow() + timedelta(seconds=next(hops)))
    yield


@aio
async def test_idle_workers_and_spares_neither_expire_early_nor_stay_on_a_wall_clock_jump(
    jumpy_wall_clock: None,
) -> None:
    async with pooled(idle_ttl_s=100.0, spare_workers=1) as (pool, backend):
        await run(pool, cases(1))
        await settle()
        kept = pool.stats()
        assert kept.workers >= 1 and kept.spares == 1
        for _ in range(4):  # the sweeper's own clock: each pass sees another wall-clock day
            await pool.sweep()
        assert pool.stats() == kept and not any(w.killed for w in backend.workers)
        await pool.sweep(now=time.monotonic() + 101.0)  # 101 s of real (monotonic) idleness
        assert pool.stats().workers == 0 and pool.stats().spares == 0


@aio
async def test_a_jobs_running_time_and_rate_ignore_wall_clock_jumps(tmp_path: Path, jumpy_wall_clock: None) -> None:
    async def five_ms(_load: dict[str, Any], case: dict[str, Any]) -> Reply:
        await asyncio.sleep(0.005)
        return {"value": float(index(case) % 2)}

    async with wired(tmp_path, five_ms, job_chunk_s=0.05) as w:
        started = time.monotonic()
        job_id = await w.job(await w.evaluator(), 60)
        job = await w.finished(job_id)
        elapsed = time.monotonic() - started
        assert job.status == "succeeded" and job.progress.done == 60
        stored = await asyncio.to_thread(w.jobs.get_job, job_id)
        assert 0.3 * 0.9 <= stored.active_s <= elapsed + 0.05  # 60 rows × 5 ms, one lane: real time
        assert job.rows_per_s is not None and 60 / (elapsed + 0.05) <= job.rows_per_s <= 60 / 0.27
        sizes = [len(r) for worker in w.backend.workers for r in worker.runs]
        assert sum(sizes) == 60 and max(sizes[1:], default=1) <= 20  # ~0.05 s / 5 ms: sized by real time
        assert isinstance(job.started_at, datetime)  # the wall-clock stamps are only shown
