"""A worker host's side of queued jobs: chunks run on its own warm pool, committed to the shared database.

Contract (one :class:`WorkerHost` per ``evaluator-host worker`` process, on its own data dir):

* :meth:`WorkerHost.chunk` runs one chunk task: it verifies the task's signature first
  (``queue.signing``; a forged or altered task is refused — logged, counted in ``refused`` and
  ``evaluator_host_queue_tasks_refused`` — and never run), then checks the job is unfinished and the task's owner's
  (else the chunk is dropped: cancelled, deleted, finished), refuses indices outside the job's rows or
  repeated, skips rows already stored (a redelivered
  chunk whose commit landed runs nothing again), maps rows to cases as the embedded runner does, runs
  them through the same :class:`~evaluator_host.evaluation.path.Bound` path (a revision's runtime is built
  once per host, on its first chunk), and commits with :meth:`JobStore.commit_shared` (idempotent,
  counters added under the job's lock), each row marked with this host's name. That commit charges
  the workspace's storage quota by the embedded runner's rule: past it the job is failed there
  (``QuotaExceeded``) and the task ends.
* A row's failure is its result; a chunk's infrastructure failure is retried ``job_retries`` times,
  then fails the job, as in the embedded runner. So do a revision or a dataset that is gone.
* An unreachable database is waited for, up to ``queue_db_retry_s`` for each read or commit; past it
  :class:`DatabaseAway` is raised and the task gives the chunk back to the queue.
* Cancel: a job id published on the cancel channel, or a running job's status seen not running (checked
  every half second), interrupts its running chunks here at once (their workers are killed); their
  tasks end as done, so the queue forgets them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import redis
from sqlalchemy.exc import OperationalError

from evaluator_host.errors import EvaluatorHostError, JobNotHeld, QuotaExceeded, SandboxError
from evaluator_host.evaluation.path import Bound
from evaluator_host.jobs.mapping import RowMapper
from evaluator_host.jobs.models import FieldMapping
from evaluator_host.jobs.queue.broker import CANCEL_CHANNEL, redis_client, row_seconds_key
from evaluator_host.jobs.queue.chunks import decode_rows
from evaluator_host.jobs.queue.signing import task_keys, verify
from evaluator_host.jobs.rows import stored_rows
from evaluator_host.sandbox.base import RawOutcome
from evaluator_host.sandbox.protocol import JobCases, WireCase
from evaluator_host.services import Services
from evaluator_host.shared.lru import LRU
from evaluator_host.store.db import utcnow
from evaluator_host.store.jobs import JobRecord

__all__ = ["DatabaseAway", "WorkerHost"]

log = logging.getLogger(__name__)

_UNFINISHED = ("queued", "running")
_JOBS_KEPT = 64  # jobs whose bound revision and mapper a host keeps
_WATCH_S = 0.5  # how often running jobs' status is read (the cancel channel's fallback)
T = TypeVar("T")
P = ParamSpec("P")


class DatabaseAway(Exception):
    """The database did not answer for ``queue_db_retry_s``: the chunk goes back to the queue."""


@dataclass
class _Job:
    record: JobRecord
    bound: Bound
    mapper: RowMapper


class WorkerHost:
    """Runs chunk tasks on ``services`` (its pool, builder and database) as host ``name``."""

    def __init__(self, services: Services, name: str) -> None:
        self.services = services
        self.settings = services.settings
        self.store = services.runner.store
        self.name = name
        self._keys = task_keys(self.settings)  # QueueKeyMissing without EVALUATOR_HOST_SECRETS_KEY
        self.refused = 0  # chunk tasks refused as forged or altered
        self.loop: asyncio.AbstractEventLoop | None = None
        self._jobs: LRU[str, _Job] = LRU(_JOBS_KEPT)
        self._running: dict[str, set[asyncio.Task[Any]]] = {}
        self._cancelled: set[str] = set()
        self._stop = threading.Event()
        self._redis = redis_client(self.settings)
        self._listener = threading.Thread(target=self._listen, name="evh-cancel-listener", daemon=True)
        self._watcher: asyncio.Task[None] | None = None

    # -- lifecycle (on the host's event loop) ----------------------------------------------
    async def start(self) -> None:
        """Listen for cancels and watch running jobs."""
        self.loop = asyncio.get_running_loop()
        self._listener.start()
        self._watcher = asyncio.ensure_future(self._watch())

    async def close(self) -> None:
        """Stop listening (running chunks have finished: a drain waits for them)."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        await asyncio.to_thread(self._listener.join, 5)
        with contextlib.suppress(Exception):
            self._redis.close()

    # -- one chunk -------------------------------------------------------------------------
    async def chunk(self, job_id: str, owner: str, rows_text: str, signature: object = None) -> str:
        """Run and commit one chunk task; what became of it (for the log). A task without this
        deployment's signature is refused before anything is read or run."""
        if not verify(self._keys, job_id, owner, rows_text, signature):
            return self._refuse("unsigned" if signature is None else "bad signature", job_id)
        task = asyncio.current_task()
        assert task is not None
        self._running.setdefault(job_id, set()).add(task)
        try:
            return await self._chunk(job_id, owner, rows_text)
        except asyncio.CancelledError:
            if job_id in self._cancelled:
                return "cancelled"
            raise
        except JobNotHeld:
            return "dropped: the job is no longer running"
        except QuotaExceeded as exc:  # the commit marked the job failed (the store's quota rule)
            log.warning("job %s stopped at its workspace's storage quota: %s", job_id, exc.message)
            return "stopped the job: its workspace's storage quota"
        except DatabaseAway:
            raise  # the chunk goes back to the queue
        except Exception as exc:  # a defect, or a task this release cannot read: fail the job, clearly, once
            # (left unhandled, the task would be acknowledged and lost, and the service would send the
            # same rows again every QUEUE_STALL_S, failing the same way, with the job "running" forever)
            log.exception("job %s: a chunk could not be run", job_id)
            message = f"a chunk could not be run: {type(exc).__name__}: {exc}"[:500]
            await self._fail(job_id, owner, "InternalError", message)
            return f"failed the job: {type(exc).__name__}"
        finally:
            running = self._running.get(job_id)
            if running is not None:
                running.discard(task)
                if not running:
                    del self._running[job_id]

    def _refuse(self, reason: str, job_id: object) -> str:
        self.refused += 1
        metrics = self.services.runner.metrics
        if metrics is not None:
            metrics.queue_refused.labels(reason).inc()
        log.warning(
            "refused a chunk task (%s) naming job %.64r: not run (%d refused so far)", reason, job_id, self.refused
        )
        return f"refused: {reason}"

    async def _chunk(self, job_id: str, owner: str, rows_text: str) -> str:
        rows = decode_rows(rows_text)
        job = await self._job(job_id, owner)
        if job is None:
            return "dropped: the job is no longer running"
        indices = [idx for idx, _ in rows]
        if len(set(indices)) != len(indices) or not all(0 <= idx < job.record.total for idx in indices):
            return self._refuse("indices outside the job's rows", job_id)
        stored = await self._db(self.store.stored_among, job_id, [idx for idx, _ in rows])
        todo = [(idx, line) for idx, line in rows if idx not in stored]
        if not todo:
            return f"skipped: its {len(rows)} rows were stored already"
        cases = job.mapper.wire_cases([line for _, line in todo])
        started = time.monotonic()
        try:
            outcomes = await self._run(job.bound, cases, JobCases(job.mapper.pick))
        except EvaluatorHostError as exc:
            await self._fail(job_id, owner, exc.type_name, exc.message)
            return f"failed the job: {exc.message}"
        seconds = time.monotonic() - started
        bound, cap = job.bound, self.settings.max_stored_result_bytes
        results = stored_rows(outcomes, bound.prepared, bound.public, cap)
        bound.count(result.status for result in results)
        committed = [(idx, r.status, r.text, r) for (idx, _), r in zip(todo, results, strict=True)]
        outcome = await self._db(
            self.store.commit_shared,
            job_id,
            owner,
            committed,
            revision=job.record.revision,
            runtime_id=bound.runtime.id,
            worker=self.name,
        )
        self._report(job_id, seconds / len(todo))
        metrics = self.services.runner.metrics
        if metrics is not None and outcome.stored:
            failed = sum(1 for idx, status, _, _ in committed if status != "ok")
            metrics.job_rows.labels("ok").inc(len(committed) - failed)
            metrics.job_rows.labels("failed").inc(failed)
        end = "; the job is complete" if outcome.finished else ""
        return f"{outcome.stored} of {len(rows)} rows stored ({outcome.done}/{outcome.total}){end}"

    async def _job(self, job_id: str, owner: str) -> _Job | None:
        """The job's bound revision and mapper (kept), when it is unfinished and ``owner``'s; else None."""
        record = await self._db(self.store.get_job, job_id)
        if record.status not in _UNFINISHED or record.owner != owner:
            return None
        known = self._jobs.get(job_id)
        if known is not None:
            return known
        try:
            revision = await self._db(
                self.services.store.get_revision, record.workspace_id, record.evaluator_id, record.revision
            )
            dataset = await self._db(self.store.get_dataset, record.dataset_id)
            mapper = RowMapper(FieldMapping(**record.field_mapping), dataset.columns)
            bound = await self.services.evaluators.bind(revision)  # builds the runtime here, once
        except EvaluatorHostError as exc:
            await self._fail(job_id, owner, exc.type_name, exc.message)
            return None
        job = _Job(record, bound, mapper)
        self._jobs.put(job_id, job)
        return job

    async def _run(self, bound: Bound, cases: list[WireCase], sent: JobCases) -> list[RawOutcome]:
        retries = self.settings.job_retries
        for attempt in range(retries + 1):
            try:
                return await bound.run(cases, held_replies=True, job_cases=sent)
            except SandboxError as exc:
                if attempt == retries:
                    raise
                log.warning("chunk failed (%s); retry %d of %d", exc.message, attempt + 1, retries)
                await asyncio.sleep(min(2.0**attempt, 10.0))
        raise AssertionError("unreachable")

    async def _fail(self, job_id: str, owner: str, type_name: str, message: str) -> None:
        error = {"type": type_name, "message": f"{message} (on worker host {self.name})"}
        log.warning("job %s failed on this host: %s", job_id, message)
        await self._db(
            self.store.set_job,
            job_id,
            only_unfinished=True,
            held_by=owner,
            status="failed",
            error=error,
            finished_at=utcnow(),
        )

    async def _db(self, call: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``call`` in a thread; an unreachable database is retried for ``queue_db_retry_s``."""
        deadline = time.monotonic() + self.settings.queue_db_retry_s
        pause = 0.2
        while True:
            try:
                return await asyncio.to_thread(call, *args, **kwargs)
            except OperationalError as exc:
                if time.monotonic() + pause > deadline:
                    raise DatabaseAway(f"the database did not answer for {self.settings.queue_db_retry_s:g} s") from exc
                log.warning("the database does not answer (%s); retrying in %.1f s", exc.orig, pause)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 5.0)

    def _report(self, job_id: str, per_row: float) -> None:
        with contextlib.suppress(Exception):  # a hint for chunk sizes: Redis away costs nothing here
            self._redis.set(row_seconds_key(job_id), f"{per_row:.6g}", ex=3600)

    # -- cancel ----------------------------------------------------------------------------
    def cancel(self, job_id: str) -> None:
        """Interrupt ``job_id``'s running chunks here (on the loop)."""
        tasks = self._running.get(job_id)
        if not tasks:
            return
        self._cancelled.add(job_id)
        self._jobs.pop(job_id)
        log.info("job %s was cancelled: stopping its %d running chunks", job_id, len(tasks))
        for task in list(tasks):
            task.cancel()

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(_WATCH_S)
            for job_id in list(self._running):
                with contextlib.suppress(Exception):
                    record = await asyncio.to_thread(self.store.get_job, job_id)
                    if record.status not in _UNFINISHED:
                        self.cancel(job_id)

    def _listen(self) -> None:
        """The cancel channel (a thread): each job id published there is cancelled on the loop."""
        while not self._stop.is_set():
            try:
                with self._redis.pubsub(ignore_subscribe_messages=True) as pubsub:  # type: ignore[no-untyped-call]
                    pubsub.subscribe(CANCEL_CHANNEL)
                    while not self._stop.is_set():
                        message = pubsub.get_message(timeout=0.5)
                        if message and self.loop is not None:
                            job_id = message["data"].decode()
                            self.loop.call_soon_threadsafe(self.cancel, job_id)
            except (redis.RedisError, OSError) as exc:
                log.warning("the cancel channel is away (%s); listening again in 1 s", exc)
                self._stop.wait(1.0)
