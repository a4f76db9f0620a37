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
  counters added under the job's lock), each row marked with this host's name. A job whose evaluator is
  cached (``evaluation/caching/cache.py``) looks its chunk's rows up first, as the embedded lanes do: only the
  misses run; the hits are committed with them (``cached: true``, counted in the job's ``cached``) and
  the misses are added to the cache once committed. That commit charges
  the workspace's storage quota by the embedded runner's rule: past it the job is failed there
  (``QuotaExceeded``) and the task ends.
* A chunk is run, retried, stored and counted by the one chunk executor (``jobs/running/executor.py``), as in
  the embedded runner: a row's failure is its result; a chunk's infrastructure failure is retried
  ``job_retries`` times, then fails the job (an unreachable backend counts as one: a host does not wait
  for its engine). So do a revision or a dataset that is gone. This module has no retry of its own.
* An unreachable database is waited for (the executor's :meth:`~ChunkExecutor.database`), up to
  ``queue_db_retry_s`` for each read or commit; past it :class:`DatabaseAway` is raised and the task
  gives the chunk back to the queue.
* A host is given its parts (settings, the job store, the stored evaluators, the metrics): ``cli/operate/worker.py``
  assembles them from the process's services; nothing here imports the service's assembly.
* Cancel: a job id published on the cancel channel, or a running job's status seen not running (checked
  every half second), interrupts its running chunks here at once (their workers are killed); their
  tasks end as done, so the queue forgets them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from evaluator_host.errors import EvaluatorHostError, JobNotHeld, QuotaExceeded
from evaluator_host.evaluation.caching.cache import JobCache, ResultCache
from evaluator_host.evaluation.evaluators import Evaluators
from evaluator_host.evaluation.path import Bound
from evaluator_host.jobs.datasets.mapping import RowMapper
from evaluator_host.jobs.models import FieldMapping
from evaluator_host.jobs.queue.broker import CancelListener, redis_client, row_seconds_key
from evaluator_host.jobs.queue.chunks import decode_rows
from evaluator_host.jobs.queue.signing import task_keys, verify
from evaluator_host.jobs.running.cached import hit_row, look_up
from evaluator_host.jobs.running.executor import ChunkExecutor, DatabaseAway
from evaluator_host.jobs.running.rows import StoredRow
from evaluator_host.observability.metrics import Metrics
from evaluator_host.sandbox.protocol import JobCases
from evaluator_host.settings import Settings
from evaluator_host.shared.lru import LRU
from evaluator_host.store.db import utcnow
from evaluator_host.store.jobs.repository import JobRecord, JobStore
from evaluator_host.store.result_cache import ResultCacheStore

__all__ = ["DatabaseAway", "WorkerHost"]

log = logging.getLogger(__name__)

_UNFINISHED = ("queued", "running")
_JOBS_KEPT = 64  # jobs whose bound revision and mapper a host keeps
_WATCH_S = 0.5  # how often running jobs' status is read (the cancel channel's fallback)
T = TypeVar("T")
P = ParamSpec("P")


@dataclass
class _Job:
    record: JobRecord
    bound: Bound
    mapper: RowMapper
    cache: JobCache | None = None  # the job's rows are cached (looked up only when ``look``)
    look: bool = False


class WorkerHost:
    """Runs chunk tasks as host ``name``: on ``evaluators``' pool and builder, committed to ``store``.

    ``executor`` defaults to the production one (its back-off and clock): tests inject theirs."""

    def __init__(
        self,
        settings: Settings,
        store: JobStore,
        evaluators: Evaluators,
        name: str,
        *,
        metrics: Metrics | None = None,
        executor: ChunkExecutor | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.evaluators = evaluators
        self.metrics = metrics
        self.name = name
        # a host does not wait for its backend: a chunk it cannot run fails its job, naming the host
        self.executor = executor or ChunkExecutor(settings, metrics, await_backend=False)
        self.cache = ResultCache(settings, ResultCacheStore(store.engine))
        self._keys = task_keys(self.settings)  # QueueKeyMissing without EVALUATOR_HOST_SECRETS_KEY
        self.refused = 0  # chunk tasks refused as forged or altered
        self.loop: asyncio.AbstractEventLoop | None = None
        self._jobs: LRU[str, _Job] = LRU(_JOBS_KEPT)
        self._running: dict[str, set[asyncio.Task[Any]]] = {}
        self._cancelled: set[str] = set()
        self._redis = redis_client(self.settings)
        self._listener = CancelListener(self._redis, self._cancel_soon)
        self._watcher: asyncio.Task[None] | None = None

    # -- lifecycle (on the host's event loop) ----------------------------------------------
    async def start(self) -> None:
        """Listen for cancels and watch running jobs."""
        self.loop = asyncio.get_running_loop()
        self._listener.start()
        self._watcher = asyncio.ensure_future(self._watch())

    async def close(self) -> None:
        """Stop listening (running chunks have finished: a drain waits for them)."""
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        await asyncio.to_thread(self._listener.stop, 5)
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
        if self.metrics is not None:
            self.metrics.queue_refused.labels(reason).inc()
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
        keys: list[bytes] = []
        hits: dict[int, tuple[str, str]] = {}
        looked = 0.0
        if job.cache is not None:  # only the rows the cache does not hold run
            found = await look_up(job.cache, cases, job.look)
            keys, hits, looked = found.keys, found.hits, found.seconds
        misses = [case for pos, case in enumerate(cases) if pos not in hits]
        seconds = 0.0
        results: list[StoredRow] = []
        millis: list[float] = []
        if misses:
            try:
                ran = await self.executor.run(job.bound, misses, JobCases(job.mapper.pick))
            except EvaluatorHostError as exc:
                await self._fail(job_id, owner, exc.type_name, exc.message)
                return f"failed the job: {exc.message}"
            seconds = ran.seconds
            results = self.executor.stored_rows(job.bound, ran.outcomes)
            millis = [outcome.duration_ms for outcome in ran.outcomes]
        fresh = iter(results)
        rows_out = [hit_row(*hits[pos]) if pos in hits else next(fresh) for pos in range(len(todo))]
        committed = [(idx, r.status, r.text, r) for (idx, _), r in zip(todo, rows_out, strict=True)]
        outcome = await self._db(
            self.store.commit_shared,
            job_id,
            owner,
            committed,
            revision=job.record.revision,
            runtime_id=job.bound.runtime.id,
            worker=self.name,
            cached=[todo[pos][0] for pos in hits],
        )
        if job.cache is not None and misses:  # what ran, once committed (a failure is logged, never raised)
            ran_keys = [key for pos, key in enumerate(keys) if pos not in hits]
            await asyncio.to_thread(
                job.cache.remember, ran_keys, [r.status for r in results], [r.text for r in results], millis
            )
        if hits:  # the chunk's time is its lookup's and its misses' (all hits: the service's chunks grow, not 32 rows)
            self._report(job_id, (looked + seconds) / len(todo))
        elif misses:
            self._report(job_id, seconds / len(misses))
        if outcome.stored:
            self.executor.count(len(committed), sum(1 for _, status, _, _ in committed if status != "ok"))
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
                self.evaluators.store.get_revision, record.workspace_id, record.evaluator_id, record.revision
            )
            dataset = await self._db(self.store.get_dataset, record.dataset_id)
            mapper = RowMapper(FieldMapping(**record.field_mapping), dataset.columns)
            bound = await self.evaluators.bind(revision)  # builds the runtime here, once
        except EvaluatorHostError as exc:
            await self._fail(job_id, owner, exc.type_name, exc.message)
            return None
        cache = self.cache.for_job(bound.prepared, bound.runtime, record.workspace_id, mapper.pick)
        look = cache is not None and await asyncio.to_thread(cache.seen)  # a first run looks nothing up
        job = _Job(record, bound, mapper, cache, look)
        self._jobs.put(job_id, job)
        return job

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
        """``call`` in a thread; an unreachable database is asked again for ``queue_db_retry_s`` (the executor)."""
        return await self.executor.database(functools.partial(call, *args, **kwargs))

    def _report(self, job_id: str, per_row: float) -> None:
        with contextlib.suppress(Exception):  # a hint for chunk sizes: Redis away costs nothing here
            self._redis.set(row_seconds_key(job_id), f"{per_row:.6g}", ex=3600)

    # -- cancel ----------------------------------------------------------------------------
    def _cancel_soon(self, job_id: str) -> None:
        """A job id from the cancel channel (the listener's thread): cancelled on the loop."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.cancel, job_id)

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
