"""One chunk of a job, run, retried, stored and counted the same way wherever it runs.

Both runners of chunks use it: the service's lanes (``jobs/running/lanes.py``) and a worker host of queued
jobs (``jobs/queue/host.py``); neither has a retry loop of its own.

Contract (one :class:`ChunkExecutor` per runner):

* :meth:`ChunkExecutor.run` runs a chunk's cases on a :class:`~evaluator_host.evaluation.path.Bound`
  (held replies: the pool sends the chunk as one message) and answers the outcomes with the seconds it
  took. A row's failure is its outcome. An infrastructure failure (``SandboxError``) is retried
  ``job_retries`` times, ``backoff(attempt)`` seconds apart, then raised; an unreachable backend
  (``BackendUnavailable``: the Docker engine restarting) is waited for without limit when
  ``await_backend`` (the service: its job resumes once the engine is back), else it is one more
  infrastructure failure (a worker host: the job fails, naming the host). Once :meth:`stop` is called
  (the service stopping) nothing is retried: the failure is raised.
* :meth:`stored_chunk` / :meth:`stored_rows` turn outcomes into the rows as committed
  (:mod:`evaluator_host.jobs.running.rows`) and count their statuses on the revision; :meth:`count` counts
  committed rows in ``evaluator_host_job_rows_total``.
* :meth:`until_stored` makes a store write in a thread, retried ``disk_backoff(attempt)`` seconds apart
  while the data disk is full (``StorageFull``), until stopped or ``give_up()``; with ``landed``, a
  write once started is never abandoned (a cancel waits for its transaction, then raises).
* :meth:`database` makes a store call in a thread, retried ``database_backoff(attempt)`` seconds apart
  while the database does not answer (``OperationalError``), for at most ``queue_db_retry_s``; then
  :class:`DatabaseAway`.
* Every wait is ``clock.sleep`` and every duration ``clock.now``: the clock and the back-offs are
  constructor parameters (production defaults: :data:`MONOTONIC`, :func:`retry_backoff` capped at
  ``job_backoff_max_s``, :func:`database_backoff`), so tests run retries without sleeping.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from sqlalchemy.exc import OperationalError

from evaluator_host.errors import BackendUnavailable, SandboxError, StorageFull
from evaluator_host.evaluation.path import Bound
from evaluator_host.jobs.running.rows import StoredChunk, StoredRow, stored_chunk, stored_rows
from evaluator_host.observability.metrics import Metrics
from evaluator_host.sandbox.base import RawOutcome
from evaluator_host.sandbox.protocol import JobCases, WireCase
from evaluator_host.settings import Settings
from evaluator_host.tenancy.quotas import job_chunks

__all__ = [
    "MONOTONIC",
    "Backoff",
    "ChunkExecutor",
    "Clock",
    "DatabaseAway",
    "Ran",
    "database_backoff",
    "retry_backoff",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
Backoff = Callable[[int], float]  # the seconds to wait before retry ``attempt + 1``


class Clock(Protocol):
    """What the executor measures and waits with."""

    def now(self) -> float:
        """Seconds on a monotonic clock."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""
        ...


class _Monotonic:
    """The real clock: ``time.monotonic`` and ``asyncio.sleep``."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


MONOTONIC: Clock = _Monotonic()


def retry_backoff(attempt: int, most: float = 10.0) -> float:
    """The wait before retry ``attempt + 1`` of a chunk, or of a write to a full disk: ``min(2**attempt, most)`` s
    (the service's ``most``: ``job_backoff_max_s``)."""
    return min(2.0**attempt, most)


def database_backoff(attempt: int) -> float:
    """The wait before asking an unanswering database again: 0.2 s, doubling, at most 5 s."""
    return min(0.2 * 2.0**attempt, 5.0)


class DatabaseAway(Exception):
    """The database did not answer for ``queue_db_retry_s``: a worker host gives its chunk back to the queue."""


@dataclass(frozen=True, slots=True)
class Ran:
    """A chunk's outcomes (one per case, in order) and the seconds its run took (retries included)."""

    outcomes: list[RawOutcome]
    seconds: float


class ChunkExecutor:
    """Runs, retries, stores and counts chunks for one runner (see the module's contract)."""

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics | None = None,
        *,
        await_backend: bool = True,
        backoff: Backoff | None = None,
        disk_backoff: Backoff | None = None,
        database_backoff: Backoff = database_backoff,
        clock: Clock = MONOTONIC,
    ) -> None:
        self.settings = settings
        self.metrics = metrics  # committed rows are counted there (None: nowhere)
        self.await_backend = await_backend
        capped = functools.partial(retry_backoff, most=settings.job_backoff_max_s)
        self.backoff: Backoff = backoff or capped
        self.disk_backoff: Backoff = disk_backoff or capped
        self.database_backoff = database_backoff
        self.clock = clock
        self.stopped = False

    def stop(self) -> None:
        """No retry and no wait from now on: what fails is raised (the service is stopping)."""
        self.stopped = True

    # -- run -------------------------------------------------------------------------------
    async def run(self, bound: Bound, cases: list[WireCase], sent: JobCases) -> Ran:
        """The chunk's outcomes, retried as the module's contract says."""
        started = self.clock.now()
        attempt = away = 0
        while True:
            try:
                charged = job_chunks(bound.workspace)  # a job's rows: bounded by its quotas, not the rate
                outcomes = await bound.run(cases, held_replies=True, job_cases=sent, charged=charged)
                return Ran(outcomes, self.clock.now() - started)
            except SandboxError as exc:
                if isinstance(exc, BackendUnavailable) and self.await_backend:  # the engine is away: wait for it
                    if self.stopped:
                        raise
                    log.warning("chunk waits for the sandbox backend (%s)", exc.message)
                    await self.clock.sleep(self.backoff(min(away, 3)))
                    away += 1
                    continue
                if attempt == self.settings.job_retries or self.stopped:
                    raise
                log.warning("chunk failed (%s); retry %d of %d", exc.message, attempt + 1, self.settings.job_retries)
                await self.clock.sleep(self.backoff(attempt))
                attempt += 1

    # -- store -----------------------------------------------------------------------------
    def stored_chunk(self, bound: Bound, outcomes: list[RawOutcome]) -> StoredChunk:
        """The chunk's rows as committed, column by column (the service's commit); counted on the revision."""
        stored = stored_chunk(outcomes, bound.prepared, bound.public, self.settings.max_stored_result_bytes)
        bound.count(stored.statuses)
        return stored

    def stored_rows(self, bound: Bound, outcomes: list[RawOutcome]) -> list[StoredRow]:
        """The chunk's rows as committed, one object each (a worker host's commit); counted on the revision."""
        rows = stored_rows(outcomes, bound.prepared, bound.public, self.settings.max_stored_result_bytes)
        bound.count(row.status for row in rows)
        return rows

    def count(self, rows: int, failed: int) -> None:
        """``rows`` committed, ``failed`` of them not ``ok``, in ``evaluator_host_job_rows_total``."""
        if self.metrics is not None:
            self.metrics.job_rows.labels("ok").inc(rows - failed)
            self.metrics.job_rows.labels("failed").inc(failed)

    async def until_stored(
        self,
        write: Callable[[], T],
        *,
        what: str = "a write",
        give_up: Callable[[], bool] = lambda: False,
        landed: Callable[[T], None] | None = None,
    ) -> T:
        """``write()`` (a store write) in a thread, retried while the disk is full (the module's contract).

        With ``landed``: the write is shielded — cancelled (a cancel, a shutdown) while the thread
        writes, the transaction lands anyway, so this waits for it and calls ``landed`` with its answer
        before the cancel goes on (whoever cancelled then sees the final counters); ``landed`` is called
        too when it lands uncancelled."""
        for attempt in itertools.count():
            if landed is None:
                try:
                    return await asyncio.to_thread(write)
                except StorageFull as exc:
                    await self._disk_full(exc, attempt, what, give_up)
                    continue
            task = asyncio.ensure_future(asyncio.to_thread(write))
            try:
                return await asyncio.shield(task)
            except StorageFull as exc:  # nothing of it landed: hold it until the disk has room
                await self._disk_full(exc, attempt, what, give_up)
            finally:
                if not task.done():
                    await asyncio.wait([task])
                if not task.cancelled() and task.exception() is None:
                    landed(task.result())
        raise AssertionError("unreachable")

    async def _disk_full(self, exc: StorageFull, attempt: int, what: str, give_up: Callable[[], bool]) -> None:
        if self.stopped or give_up():
            raise exc
        log.warning("%s waits for disk space (%s)", what, exc.message)
        await self.clock.sleep(self.disk_backoff(attempt))

    async def database(self, call: Callable[[], T]) -> T:
        """``call()`` in a thread; an unreachable database is asked again for ``queue_db_retry_s``."""
        limit = self.settings.queue_db_retry_s
        deadline = self.clock.now() + limit
        for attempt in itertools.count():
            try:
                return await asyncio.to_thread(call)
            except OperationalError as exc:
                pause = self.database_backoff(attempt)
                if self.clock.now() + pause > deadline:
                    raise DatabaseAway(f"the database did not answer for {limit:g} s") from exc
                log.warning("the database does not answer (%s); retrying in %.1f s", exc.orig, pause)
                await self.clock.sleep(pause)
        raise AssertionError("unreachable")
