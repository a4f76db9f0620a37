"""The service's side of a queued job: its rows sent to worker hosts as chunk tasks, a window at a time.

Contract:

* Every task is signed (``queue.signing``): hosts run only what this service sent.
* The service that created a job dispatches it (it holds the dataset's file); the job is owned by
  ``<service id>/queue`` and every task carries that owner, so hosts commit for it and nobody else.
* Rows without a stored result are read from the dataset file in order and sent as chunks sized to
  take about ``job_chunk_s`` on one host lane (from the per-row time hosts report; 32 rows first),
  at most ``job_chunk_rows`` rows or ``job_chunk_bytes`` each. At most ``queue_window`` chunks' worth
  of rows are out (sent and not committed) at once, so Redis holds a bounded part of a dataset
  whatever its size, and hosts added mid-job find work in the queue at once.
* Hosts commit rows and counters themselves; the commit that stores the last row marks the job
  ``succeeded`` (``failed``, ``AllRowsErrored``, when every row is an error: ``store/jobs/outcome.py``).
  The dispatcher watches the job's row in the database and returns when the job is
  finished (or cancelled, deleted, another's). It keeps ``active_s`` (the job's running time).
* Lost chunks: a host that dies holding chunks has them redelivered by the broker
  (``queue_visibility_s``). Should chunks vanish altogether (a Redis without persistence restarted),
  the job stalls; after ``queue_stall_s`` without a committed row while the queue is empty, every row
  still without a result is sent again (a row is stored once whatever is sent twice).
* Cancel and delete set the job's status in the database (the hosts' commits are fenced by it) and
  publish the job id on :data:`~evaluator_host.jobs.queue.broker.CANCEL_CHANNEL`, which stops running
  chunks on every host within a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator

from celery import Celery
from sqlalchemy.exc import OperationalError

from evaluator_host.jobs.datasets.files import DatasetFiles
from evaluator_host.jobs.queue.broker import CANCEL_CHANNEL, CHUNK_TASK, make_app, redis_client, row_seconds_key
from evaluator_host.jobs.queue.chunks import encode_rows
from evaluator_host.jobs.queue.signing import sign, task_keys
from evaluator_host.settings import Settings
from evaluator_host.store.db import utcnow
from evaluator_host.store.jobs.repository import JobRecord, JobStore

__all__ = ["Dispatcher"]

log = logging.getLogger(__name__)

_UNFINISHED = ("queued", "running")
_FIRST_CHUNK = 32
_POLL_S = 0.05  # how often the job's committed progress is read while chunks are out
_ACTIVE_EVERY_S = 1.0  # how often active_s is written while the job runs


class _Stalled(Exception):
    """No row committed for queue_stall_s with chunks out and an empty queue: send what is missing again."""


def _bitmap(indices: Iterator[int], total: int) -> bytearray:
    bits = bytearray((total + 7) // 8)
    for idx in indices:
        bits[idx >> 3] |= 1 << (idx & 7)
    return bits


class Dispatcher:
    """Runs the service's queued jobs through the broker (one per service; see the module's contract)."""

    def __init__(self, settings: Settings, store: JobStore, files: DatasetFiles, app: Celery | None = None) -> None:
        self.settings = settings
        self.store = store
        self.files = files
        self._key = task_keys(settings)[0]  # QueueKeyMissing without EVALUATOR_HOST_SECRETS_KEY
        self.app = app or make_app(settings)
        self.redis = redis_client(settings)

    # -- the runner's hooks ---------------------------------------------------------------
    async def run(self, job_id: str) -> None:
        """Dispatch ``job_id`` until it is finished here or elsewhere (raises on a broken dataset)."""
        record = await asyncio.to_thread(self.store.get_job, job_id)
        if record.status not in _UNFINISHED:
            return
        started = {"started_at": utcnow()} if record.started_at is None else {}
        if not await asyncio.to_thread(self.store.claim, job_id, **started):
            return  # cancelled meanwhile, or another service's
        clock = _Clock(record.active_s)
        try:
            while True:
                try:
                    await self._send_all(record, clock)
                    await self._wait_finished(record, clock)
                except _Finished:
                    return
                except _Stalled:
                    log.warning(
                        "job %s: no row committed for %.0f s with an empty queue: sending the rows "
                        "without a result again",
                        job_id,
                        self.settings.queue_stall_s,
                    )
        finally:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.store.set_job, job_id, only_held=True, active_s=clock.active())

    async def cancelled(self, job_id: str) -> None:
        """Tell every host to stop ``job_id``'s running chunks (best effort: the status fences commits)."""
        try:
            await asyncio.to_thread(self.redis.publish, CANCEL_CHANNEL, job_id)
        except Exception as exc:  # Redis away: hosts see the status at their next check (within a second)
            log.warning("could not publish the cancel of job %s: %s", job_id, exc)

    def close(self) -> None:
        """Release the broker's and Redis's connections."""
        with contextlib.suppress(Exception):
            self.redis.close()
        with contextlib.suppress(Exception):
            self.app.close()

    # -- sending ----------------------------------------------------------------------------
    async def _send_all(self, record: JobRecord, clock: _Clock) -> None:
        """Send every row without a result, keeping at most a window of rows out."""
        bits = await asyncio.to_thread(lambda: _bitmap(self.store.done_indices(record.id), record.total))
        watch = _Progress(await self._done(record.id, clock), self.settings.queue_stall_s)
        lines = self.files.lines(record.dataset_id)
        sent, per_row = 0, None
        while True:
            per_row = await self._per_row(record.id, per_row)
            size = self._size(per_row)
            chunk = await asyncio.to_thread(_take, lines, bits, self.settings.job_chunk_bytes, size)
            if not chunk:
                return
            while sent - watch.committed > self.settings.queue_window * size:
                await asyncio.sleep(_POLL_S)
                watch.see(await self._done(record.id, clock))
                if watch.stalled() and await self._queue_empty():
                    raise _Stalled
            await self._send(record.id, chunk, clock)
            sent += len(chunk)

    async def _send(self, job_id: str, chunk: list[tuple[int, bytes]], clock: _Clock) -> None:
        """Publish one chunk task; a broker that does not answer is waited for while the job runs."""
        rows = encode_rows(chunk)
        args = (job_id, self.store.owner, rows, sign(self._key, job_id, self.store.owner, rows))
        while True:
            try:
                await asyncio.to_thread(self.app.send_task, CHUNK_TASK, args=args)
                return
            except Exception as exc:  # kombu's OperationalError, redis' ConnectionError, OSError
                log.warning("job %s: the queue does not answer (%s); retrying in 1 s", job_id, exc)
                await asyncio.sleep(1.0)
                await self._done(job_id, clock)  # stops here if the job was cancelled meanwhile

    async def _wait_finished(self, record: JobRecord, clock: _Clock) -> None:
        watch = _Progress(await self._done(record.id, clock), self.settings.queue_stall_s)
        while True:
            if watch.last >= record.total:  # every row stored, yet no commit finished it (none was needed)
                await asyncio.to_thread(self.store.finish, record.id)
            await asyncio.sleep(_POLL_S * 2)
            watch.see(await self._done(record.id, clock))
            if watch.stalled() and await self._queue_empty():
                raise _Stalled

    async def _done(self, job_id: str, clock: _Clock) -> int:
        """The job's committed row count; :class:`_Finished` once it is no longer running here. A database
        that does not answer is waited for (the job goes on when it is back)."""
        while True:
            try:
                record = await asyncio.to_thread(self.store.get_job, job_id)
                break
            except OperationalError as exc:
                log.warning("job %s: the database does not answer (%s); waiting", job_id, exc.orig)
                await asyncio.sleep(1.0)
        if record.status not in _UNFINISHED or record.owner != self.store.owner:
            raise _Finished
        if clock.due():
            with contextlib.suppress(OperationalError):
                await asyncio.to_thread(
                    self.store.set_job, job_id, only_unfinished=True, only_held=True, active_s=clock.active()
                )
        return record.done

    async def _per_row(self, job_id: str, known: float | None) -> float | None:
        try:
            value = await asyncio.to_thread(self.redis.get, row_seconds_key(job_id))
        except Exception:
            return known
        return float(value) if value else known

    def _size(self, per_row: float | None) -> int:
        if per_row is None:
            return min(_FIRST_CHUNK, self.settings.job_chunk_rows)
        return max(1, min(self.settings.job_chunk_rows, int(self.settings.job_chunk_s / max(per_row, 1e-7))))

    async def _queue_empty(self) -> bool:
        try:
            return int(await asyncio.to_thread(self.redis.llen, self.settings.queue_name)) == 0
        except Exception:
            return False  # Redis away: nothing to tell, nothing to resend into


class _Finished(Exception):
    """The job is no longer running here (succeeded, failed, cancelled, deleted or another's)."""


def _take(lines: Iterator[tuple[int, bytes]], bits: bytearray, max_bytes: int, size: int) -> list[tuple[int, bytes]]:
    """The next rows without a result: ``size`` rows, or ``max_bytes`` of them (none at the end)."""
    chunk: list[tuple[int, bytes]] = []
    used = 0
    for idx, line in lines:
        if bits[idx >> 3] & (1 << (idx & 7)):
            continue
        chunk.append((idx, line))
        used += len(line)
        if len(chunk) >= size or used >= max_bytes:
            break
    return chunk


class _Clock:
    """A job's running time: what earlier runs stored plus this run's monotonic time."""

    def __init__(self, before_s: float) -> None:
        self.before_s = before_s
        self.started = time.monotonic()
        self.written = self.started

    def active(self) -> float:
        return self.before_s + (time.monotonic() - self.started)

    def due(self) -> bool:
        now = time.monotonic()
        if now - self.written < _ACTIVE_EVERY_S:
            return False
        self.written = now
        return True


class _Progress:
    """Rows committed since dispatching began, and whether they stopped coming."""

    def __init__(self, done: int, stall_s: float) -> None:
        self.base = self.last = done
        self.stall_s = stall_s
        self.moved = time.monotonic()

    @property
    def committed(self) -> int:
        return self.last - self.base

    def see(self, done: int) -> None:
        if done != self.last:
            self.last, self.moved = done, time.monotonic()

    def stalled(self) -> bool:
        return time.monotonic() - self.moved > self.stall_s
