"""A job's rows run here: ``parallelism`` lanes of chunks on warm workers, each chunk committed as it ends.

Contract (for :class:`~evaluator_host.jobs.running.runner.JobRunner`, which decides *whether* a job runs here):

* :meth:`Lanes.run` claims the job for this service (a job cancelled meanwhile or another service's is
  left alone), binds its revision once, reads the rows not stored yet from the dataset file as they are
  needed and hands them out in chunks sized to take about ``job_chunk_s`` (an async evaluator's: at least
  ``ASYNC_ROUNDS`` × its ``in_flight`` rows, so its worker keeps them all awaiting: the rule is
  ``progress.Sizer.for_evaluator``, a model target's lanes use it too); each of ``parallelism`` lanes
  runs one chunk at a time through the :class:`~evaluator_host.jobs.running.executor.ChunkExecutor` (which retries
  it) while the lane's previous chunk is being stored, so at most ``2 × parallelism × job_chunk_rows``
  rows are in memory. Once the last commit landed the job is ``succeeded`` — or ``failed`` with
  ``AllRowsErrored`` when every row is an error (``store/jobs/outcome.py``).
* A chunk's results, the job's counters and its aggregate state are committed in one transaction
  (``JobStore.commit_rows``), waiting while the disk is full (a job being cancelled gives the chunk up);
  what a running job shows is :class:`~evaluator_host.jobs.running.progress.Live`, updated once a commit landed.
* The job's stored results are capped at ``max_job_result_bytes`` (``LimitError``), and a chunk is charged to
  the workspace's storage quota: of a chunk that does not fit the room left only its leading rows that do
  are stored, and the job stops (``QuotaExceeded``). This service's commits take turns, so the room read
  is the room at commit.
* A job whose evaluator is cached (:mod:`evaluator_host.evaluation.caching.cache`) looks each chunk's rows up first
  (one query per 500 rows); only the misses run, the hits are committed with them (``cached: true``,
  counted in ``progress.cached``), and the misses' results are added to the cache once committed (when their
  evaluator's time says they are worth it: ``JobCache.worth``); a chunk the cache answered is sized by its
  whole time (all hits: chunks grow as fast ones do, not 32 rows each).
* A job with a model ``target`` generates each row first (:mod:`evaluator_host.jobs.running.targeted`), then its
  chunks are committed the same way; a spent budget ends it ``stopped`` (``budget_exhausted``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from typing import Any

from evaluator_host.errors import LimitError, QuotaExceeded
from evaluator_host.evaluation.caching.cache import JobCache, ResultCache
from evaluator_host.evaluation.evaluators import Evaluators
from evaluator_host.evaluation.outcomes.aggregate import Accumulator
from evaluator_host.evaluation.path import Bound
from evaluator_host.jobs.datasets.mapping import RowMapper
from evaluator_host.jobs.datasets.uploads import DatasetCatalog
from evaluator_host.jobs.models import FieldMapping
from evaluator_host.jobs.running.cached import look_up, merged
from evaluator_host.jobs.running.executor import ChunkExecutor
from evaluator_host.jobs.running.progress import Live, Sizer, bitmap, pending_chunks
from evaluator_host.jobs.running.rows import stored_chunk
from evaluator_host.jobs.running.targeted import TargetedRows
from evaluator_host.observability import tracing
from evaluator_host.sandbox.base import RawOutcome
from evaluator_host.sandbox.protocol import JobCases, WireCase
from evaluator_host.settings import Settings
from evaluator_host.store.db import utcnow
from evaluator_host.store.jobs.generations import GenerationStore
from evaluator_host.store.jobs.repository import JobRecord, JobStore
from evaluator_host.store.result_cache import ResultCacheStore
from evaluator_host.targets.models import Target
from evaluator_host.tenancy.quotas import QuotaGuard, fitting, storage_exceeded

__all__ = ["FINISHED", "Lanes"]

FINISHED = ("succeeded", "failed", "cancelled", "stopped")


@dataclasses.dataclass(slots=True)
class _Cached:
    """A chunk's rows found in the result cache (position → status, text) and every row's key."""

    cache: JobCache
    keys: list[bytes]
    hits: dict[int, tuple[str, str]]


class Lanes:
    """Runs jobs on this process's lanes; ``live`` is the runner's map of the jobs running here."""

    def __init__(
        self,
        settings: Settings,
        store: JobStore,
        revisions: Evaluators,
        datasets: DatasetCatalog,
        quotas: QuotaGuard,
        executor: ChunkExecutor,
        live: dict[str, Live],
    ) -> None:
        self.settings = settings
        self.store = store
        self.revisions = revisions
        self.datasets = datasets
        self.quotas = quotas
        self.executor = executor
        self.live = live
        self._write = asyncio.Lock()
        self.targeted = TargetedRows(settings, revisions, GenerationStore(store.engine), executor)
        self.cache = ResultCache(settings, ResultCacheStore(store.engine))

    async def run(self, job_id: str) -> None:
        """Run the job's rows not stored yet, then mark it ``succeeded`` (see the module's contract)."""
        record = await asyncio.to_thread(self.store.get_job, job_id)
        if record.status in FINISHED:
            return
        revision = await asyncio.to_thread(
            self.revisions.store.get_revision, record.workspace_id, record.evaluator_id, record.revision
        )
        dataset = await asyncio.to_thread(self.store.get_dataset, record.dataset_id, record.workspace_id)
        mapper = RowMapper(FieldMapping(**record.field_mapping), dataset.columns)
        started = {"started_at": utcnow()} if record.started_at is None else {}
        if not await self.executor.until_stored(functools.partial(self.store.claim, job_id, **started)):
            return  # cancelled meanwhile, or another service's
        running = dataclasses.replace(record, status="running", started_at=started.get("started_at", record.started_at))
        live = Live(running, record.done, record.failed, Accumulator.restore(record.acc_state), record.active_s)
        live.cached = record.cached
        self.live[job_id] = live
        bound = await self.revisions.bind(revision)
        bits = await asyncio.to_thread(lambda: bitmap(self.store.done_indices(job_id), record.total))
        if record.target is not None:  # generate each row, then score it (jobs/running/targeted.py)
            pending = (
                (i, line) for i, line in self.datasets.files.lines(dataset.id) if not bits[i >> 3] & (1 << (i & 7))
            )

            async def stored(chunk: list[tuple[int, WireCase]], outcomes: list[RawOutcome]) -> None:
                with tracing.span("job.commit"):
                    await self._commit(record, live, bound, chunk, outcomes)

            target = Target(**record.target)
            why = await self.targeted.run(
                job_id, record.workspace_id, target, record.parallelism, bound, mapper, pending, stored
            )
            await self._finish(job_id, live, why)
            return
        # an async evaluator's chunks: at least ASYNC_ROUNDS × its rows in flight
        sizer = Sizer.for_evaluator(self.settings.job_chunk_s, self.settings.job_chunk_rows, bound.spec.in_flight)
        chunks = pending_chunks(
            self.datasets.files.lines(dataset.id), bits, mapper, sizer, self.settings.job_chunk_bytes
        )
        sent = JobCases(mapper.pick)
        cache = self.cache.for_job(bound.prepared, bound.runtime, record.workspace_id, mapper.pick)
        look = cache is not None and await asyncio.to_thread(cache.seen)  # a first run looks nothing up

        async def commit(chunk: list[tuple[int, WireCase]], outcomes: list[RawOutcome], cached: _Cached | None) -> None:
            with tracing.span("job.commit"):
                await self._commit(record, live, bound, chunk, outcomes, cached)

        async def lane(group: asyncio.TaskGroup) -> None:
            committing: asyncio.Task[None] | None = None  # the lane's previous chunk, being stored
            for chunk in chunks:
                traced: tracing.Attributes = {
                    **bound.traced,
                    "evaluator_host.job.id": job_id,
                    "evaluator_host.job.rows": len(chunk),
                }
                with tracing.span("job.chunk", traced, root=True) as span:  # each chunk a trace of its own
                    cases = [case for _, case in chunk]
                    cached: _Cached | None = None
                    looked = 0.0
                    if cache is not None:  # only the rows the cache does not hold run
                        found = await look_up(cache, cases, look)
                        cached, looked = _Cached(cache, found.keys, found.hits), found.seconds
                        if cached.hits:
                            cases = [case for pos, case in enumerate(cases) if pos not in cached.hits]
                    outcomes: list[RawOutcome] = []
                    ran_s = 0.0
                    if cases:
                        ran = await self.executor.run(bound, cases, sent)
                        ran_s, outcomes = ran.seconds, ran.outcomes
                    if cached is not None and cached.hits:  # the chunk's time is its lookup's and its misses'
                        sizer.observe(len(chunk), looked + ran_s)  # (all hits: chunks grow, not 32 rows each)
                    elif cases:
                        sizer.observe(len(cases), ran_s)
                    if span.is_recording():
                        tracing.outcome(span, (outcome.status for outcome in outcomes))
                    if committing is not None:
                        await committing  # one chunk stored at a time per lane: memory stays bounded
                    committing = group.create_task(commit(chunk, outcomes, cached))  # the worker goes on meanwhile
            if committing is not None:
                await committing

        async with asyncio.TaskGroup() as group:
            for _ in range(record.parallelism):
                group.create_task(lane(group))
        await self._finish(job_id, live, None)

    async def _finish(self, job_id: str, live: Live, stopped: str | None) -> None:
        """Mark the job ``succeeded`` (``failed``, ``AllRowsErrored``: every row an error) — or ``stopped``
        (``budget_exhausted``: ``stopped`` says why)."""
        if stopped is None:
            await self.executor.until_stored(functools.partial(self.store.finish, job_id, active_s=live.active()))
            return
        message = f"the job's budget is spent ({stopped}); rows scored so far are kept"
        finished: dict[str, Any] = {
            "status": "stopped",
            "finished_at": utcnow(),
            "active_s": live.active(),
            "error": {"type": "BudgetExhausted", "code": "budget_exhausted", "message": message},
        }
        write = functools.partial(self.store.set_job, job_id, only_unfinished=True, only_held=True, **finished)
        await self.executor.until_stored(write)

    async def _commit(
        self,
        record: JobRecord,
        live: Live,
        bound: Bound,
        chunk: list[tuple[int, WireCase]],
        outcomes: list[RawOutcome],
        cached: _Cached | None = None,
    ) -> None:
        """Store a chunk's results with the counters and aggregate state they produce, atomically (``outcomes``:
        of the rows not in ``cached.hits``, in order); then add what ran to the cache."""
        cap, prepared, public = self.settings.max_stored_result_bytes, bound.prepared, bound.public
        fresh = stored = self.executor.stored_chunk(bound, outcomes)
        hits = cached.hits if cached is not None else {}
        if hits:
            stored = merged(len(chunk), hits, fresh)
        runtime_id = bound.runtime.id
        job_id, revision = record.id, record.revision
        rows = [
            (job_id, idx, status, revision, runtime_id, text)
            for (idx, _), status, text in zip(chunk, stored.statuses, stored.texts, strict=True)
        ]
        live.stored_bytes += sum(map(len, stored.texts))
        if live.stored_bytes > self.settings.max_job_result_bytes:
            raise LimitError(
                f"the job's stored results exceed max_job_result_bytes={self.settings.max_job_result_bytes} "
                "(EVALUATOR_HOST_MAX_JOB_RESULT_BYTES); rows committed so far are kept"
            )
        cut: QuotaExceeded | None = None
        async with self._write:  # this service's commits take turns: the room read here is the room at commit
            if live.cancelling:
                return
            limit = self.quotas.storage_quota(record.workspace_id)
            if limit is not None:  # only the leading rows that fit the room left are stored (the store checks again)
                used = await asyncio.to_thread(self.store.storage_bytes, record.workspace_id)
                keep, kept = fitting(stored.texts, max(0, limit - used))
                if keep < len(rows):
                    cut = storage_exceeded(record.workspace_id, limit, used + kept, stored=live.done + keep)
                    ran = keep - sum(1 for pos in hits if pos < keep)  # the fresh rows among those kept
                    stored = stored_chunk(outcomes[:ran], prepared, public, cap)
                    hits = {pos: hit for pos, hit in hits.items() if pos < keep}
                    stored, rows = (merged(keep, hits, stored) if hits else stored), rows[:keep]
                    if not rows:
                        raise cut
            acc = Accumulator.restore(live.acc.state())  # applied to ``live`` only once committed
            new_failed = stored.failed()
            done, failed = live.done + len(rows), live.failed + new_failed
            now_cached = live.cached + len(hits)

            def landed(_: None) -> None:
                live.done, live.failed, live.acc, live.cached = done, failed, acc, now_cached
                self.executor.count(len(rows), new_failed)

            acc.add_all(stored.scored)
            acc.add_bools(stored.trues, stored.falses)

            def write() -> None:
                self.store.commit_rows(
                    record.id,
                    rows,
                    done=done,
                    failed=failed,
                    acc_state=acc.state(),
                    active_s=live.active(),
                    workspace_id=record.workspace_id,
                    cached=now_cached if cached is not None else None,
                )

            # nothing of a chunk that meets a full disk landed: it is held until the disk has room
            await self.executor.until_stored(
                write, what=f"job {record.id}", give_up=lambda: live.cancelling, landed=landed
            )
        if cached is not None and len(fresh.statuses) and cut is None:  # what ran, for the next run
            fresh_keys = [key for pos, key in enumerate(cached.keys) if pos not in cached.hits]
            millis = [outcome.duration_ms for outcome in outcomes]
            await asyncio.to_thread(cached.cache.remember, fresh_keys, fresh.statuses, fresh.texts, millis)
        if cut is not None:  # the rows that fit are stored: the job stops (failed, QuotaExceeded)
            raise cut
