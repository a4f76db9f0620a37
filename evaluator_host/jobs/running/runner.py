"""Jobs: created, run, resumed, read and cancelled — dataset rows streamed in chunks to warm workers.

Contract:

* A job runs ONE evaluator revision on ONE runtime; every stored row carries both.
* Rows are read from the dataset file as they are needed, mapped to cases and handed
  out in *chunks* to ``parallelism`` lanes (``jobs/running/lanes.py``); each chunk is run, retried,
  stored and counted by the one chunk executor (``jobs/running/executor.py``) that worker hosts of queued
  jobs use too. Chunk sizes adapt so one chunk takes about ``job_chunk_s`` (a slow evaluator gets
  small chunks, so progress, cancel and resume stay fine-grained); at most
  ``2 × parallelism × job_chunk_rows`` rows are in memory, whatever the dataset's size.
* A chunk's results, the job's counters and its aggregate state are committed in one
  transaction (``JobStore.commit_rows``). On start the runner resumes every queued or
  running job: rows with a stored result are skipped, the rest run exactly once more.
* A row that fails (raises, times out, exhausts memory, kills its worker) is that row's
  result; the pool replaces the worker and the job goes on. Only infrastructure failures
  that outlast ``job_retries`` retries, or a revision/dataset that is gone, fail a job.
* A chunk's commit is charged to the workspace's storage quota (``max_dataset_bytes``: datasets and job
  results, :mod:`evaluator_host.tenancy.quotas`): of a chunk that does not fit the room left only its leading
  rows that do are stored, and the job stops ``failed`` (``QuotaExceeded``), keeping every row stored;
  the queued path applies the same rule.
* A full data disk (:class:`StorageFull`) fails no job: a chunk's results wait in memory and
  their commit is retried with back-off until the disk has room again (a lane holds at most
  one chunk waiting and runs no further, so nothing piles up); a job being cancelled or a service stopping gives up the
  chunk (its rows run again on resume).
* Cancel stops a job promptly: running chunks are interrupted (their workers are
  killed), rows already committed are kept, the status becomes ``cancelled``.
* With a queue (``EVALUATOR_HOST_QUEUE_URL``) a job's rows go to worker hosts instead of lanes here
  (``runner.remote``: ``queue/dispatch.py``); creating, reading, cancelling and deleting are the same.
* A job runs in the service that holds it (the store's ``owner``: the one that created it, resumed it,
  or adopted it), and only there: a service resumes its own jobs, renews their leases, and adopts the
  jobs of other services sharing the database whose leases ran out (``jobs/running/leases.py``). A
  commit that finds its job no longer held (cancelled or deleted by another service sharing the
  database, or adopted by one while this service was paused) stores nothing and stops the job here.
* A job with a model ``target`` generates each row's outputs before scoring it (``jobs/running/targeted.py``); its
  target is checked at creation (egress, template, key's secret) and it answers its ``usage``; a spent
  budget ends it ``stopped``. It runs on this service's lanes (refused with a queue).
* The chunk executor is a constructor parameter (default: the production one), so tests inject its
  back-off and clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from datetime import datetime
from typing import Any, Protocol

from evaluator_host.errors import EvaluatorHostError, JobNotHeld, NothingCompared, QuotaExceeded, TargetError
from evaluator_host.evaluation.evaluators import Evaluators
from evaluator_host.evaluation.path import ignored_fields
from evaluator_host.jobs.datasets.mapping import RowMapper, column_gaps
from evaluator_host.jobs.datasets.uploads import DatasetCatalog
from evaluator_host.jobs.models import FieldMapping, Job, JobCreate, JobSinkSummary
from evaluator_host.jobs.running.executor import ChunkExecutor
from evaluator_host.jobs.running.lanes import FINISHED, Lanes
from evaluator_host.jobs.running.leases import LeaseKeeper
from evaluator_host.jobs.running.progress import Live, job_view
from evaluator_host.jobs.running.targeted import checked_target, usage_of
from evaluator_host.jobs.sink_rows import check_traced, uncounted
from evaluator_host.observability.metrics import Metrics
from evaluator_host.settings import Settings
from evaluator_host.store import RevisionRecord
from evaluator_host.store.db import utcnow
from evaluator_host.store.jobs.repository import DatasetRecord, JobRecord, JobStore
from evaluator_host.store.jobs.sink_deliveries import JobSinkStore
from evaluator_host.targets.models import Target
from evaluator_host.tenancy.quotas import QuotaGuard

__all__ = ["JobRunner", "RemoteJobs"]

log = logging.getLogger(__name__)

_WAIT_POLL_S = 0.25  # how often a wait re-reads a job that runs elsewhere


def _first(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups: what a lane raised."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _mapped(mapping: FieldMapping) -> dict[str, Any]:
    """The case fields ``mapping`` names a column for (the value stands for that column)."""
    return {name: column for name in ("trace", "app_params") if (column := getattr(mapping, name)) is not None}


class RemoteJobs(Protocol):
    """Where a queued job runs instead of this process's lanes (``queue.dispatch.Dispatcher``)."""

    async def run(self, job_id: str) -> None: ...

    async def cancelled(self, job_id: str) -> None: ...

    def close(self) -> None: ...


class JobRunner:
    """Creates, runs, resumes and cancels jobs (one instance per service process)."""

    def __init__(
        self,
        settings: Settings,
        store: JobStore,
        evaluators: Evaluators,
        datasets: DatasetCatalog,
        quotas: QuotaGuard,
        *,
        executor: ChunkExecutor | None = None,
    ) -> None:
        self.settings = settings
        self.quotas = quotas
        self._creating = asyncio.Lock()
        self.store = store
        self.evaluators = evaluators.store
        self.revisions = evaluators
        self.datasets = datasets
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._live: dict[str, Live] = {}
        self._slots = asyncio.Semaphore(settings.max_running_jobs)
        self.executor = executor or ChunkExecutor(settings)  # run, retry, store and count each chunk
        self.lanes = Lanes(settings, store, evaluators, datasets, quotas, self.executor, self._live)
        self.remote: RemoteJobs | None = None  # set by the service when a queue runs its jobs
        self.sinks = JobSinkStore(store.engine)  # its results' deliveries to its sinks (issue 52)
        # renews ours, adopts expired ones (a model-target job only when it runs here, not on a queue)
        self.leases = LeaseKeeper(store, datasets.files, self._adopt, lambda: self.remote is None)

    @property
    def metrics(self) -> Metrics | None:
        """Where committed rows are counted (set by the service)."""
        return self.executor.metrics

    @metrics.setter
    def metrics(self, metrics: Metrics | None) -> None:
        self.executor.metrics = metrics

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Resume every job that was queued or running when the service last stopped, then keep their
        leases and adopt other services' expired jobs (``jobs/running/leases.py``)."""
        for record in await asyncio.to_thread(self.store.unfinished):
            log.info("resuming job %s (%d of %d rows done)", record.id, record.done, record.total)
            self._launch(record.id)
        self.leases.start()

    async def close(self) -> None:
        """Stop running jobs without changing their status: the next start resumes them (or, once their
        leases run out, another service sharing the database adopts them)."""
        await self.leases.close()
        self.executor.stop()
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.remote is not None:
            self.remote.close()

    async def _adopt(self, record: JobRecord) -> None:
        """Run a job adopted from another service; a task of an earlier hold of it here (this service was
        paused, the job adopted elsewhere, then back) is stopped first: it counted from what it had read."""
        old = self._tasks.get(record.id)
        if old is not None:
            old.cancel()
            await asyncio.wait([old])  # its end (whatever it raised); a cancel of ours still propagates
        self._live.pop(record.id, None)
        self._launch(record.id)

    def _launch(self, job_id: str) -> None:
        task = asyncio.ensure_future(self._execute(job_id))
        self._tasks[job_id] = task
        task.add_done_callback(lambda t: self._tasks.pop(job_id) if self._tasks.get(job_id) is t else None)

    # -- API -------------------------------------------------------------------------------
    async def create(self, workspace: str, body: JobCreate) -> Job:
        """Check the revision, the dataset (rows: a dataset of none is 422 ``NothingCompared``) and the mapping
        (``warnings``: mapped columns some rows lack), store the job (``queued``) in ``workspace`` and start it;
        ``QuotaExceeded`` (429) past the workspace's ``max_concurrent_jobs``, or while what it
        stores (datasets and job results) is at or over its ``max_dataset_bytes``.

        Inline ``rows`` become a dataset of their own, removed again if the job is refused.
        """
        record = await asyncio.to_thread(self.evaluators.get, workspace, body.evaluator_id, body.revision)  # 404 first
        async with self._creating:  # the count and the new row together: two calls never both take the last place
            self.quotas.check_jobs(workspace, await asyncio.to_thread(self.store.active_jobs, workspace))
            if self.quotas.storage_limited(workspace):  # no new job while its results could not be stored
                self.quotas.check_storage(workspace, await asyncio.to_thread(self.store.storage_bytes, workspace))
            if body.rows is None:
                dataset = await self.datasets.get(workspace, body.dataset_id or "")
                return await self._create(workspace, body, record, dataset)
            dataset = await self.datasets.from_rows(workspace, body.rows)
            try:
                return await self._create(workspace, body, record, dataset)
            except BaseException:
                await self.datasets.discard(dataset)
                raise

    async def _create(self, workspace: str, body: JobCreate, record: RevisionRecord, dataset: DatasetRecord) -> Job:
        if dataset.row_count == 0:  # a job of no rows would check nothing, yet end succeeded
            raise NothingCompared(
                f"dataset {dataset.id!r} has no rows: a job over it would check nothing",
                field="rows",
                rows=0,
                columns=dataset.columns,
            )
        mapping = body.field_mapping or FieldMapping()
        mapper = RowMapper(mapping, dataset.columns)  # FieldMappingError (422) before anything is stored
        filled = await asyncio.to_thread(self.datasets.files.filled, dataset.id)
        gaps = column_gaps(mapping, filled, dataset.row_count, outputs=body.target is None)
        target: dict[str, Any] | None = None
        if body.target is not None:  # generate, then score (running/targeted.py): checked before anything is stored
            if self.remote is not None:
                raise TargetError("jobs with a target run in the service: not with EVALUATOR_HOST_QUEUE_URL (yet)")
            first = await self.datasets.rows(workspace, dataset.id, 0, 1)  # the prompt is tried on it
            target = await checked_target(
                self.settings,
                self.revisions,
                workspace,
                body.target,
                mapping,
                dataset.columns,
                mapper,
                first[0][1] if first else None,
            )
        sinks = [sink.model_dump(exclude_none=True) for sink in body.sinks or []]
        if sinks:  # a job whose rows name no trace would deliver nothing, yet end green: 422 first
            await asyncio.to_thread(
                check_traced, self.datasets.files, dataset.id, mapping.model_dump(), dataset.row_count
            )
        job = await asyncio.to_thread(
            self.store.create_job,
            id=f"job_{uuid.uuid4().hex[:20]}",
            workspace_id=workspace,
            evaluator_id=record.id,
            revision=record.revision,
            runtime_id=record.runtime_id,
            dataset_id=dataset.id,
            field_mapping=mapping.model_dump(),
            parallelism=min(body.parallelism or self.settings.job_parallelism, self.settings.max_workers),
            total=dataset.row_count,
            warnings=mapper.warnings + gaps + ignored_fields(record.interface, _mapped(mapping)),
            target=target,
            **({"sinks": sinks} if sinks else {}),
        )
        self._launch(job.id)
        return self.view(job)

    async def get(self, workspace: str, job_id: str) -> Job:
        """The job (of ``workspace``: another's is not found), with live progress while it runs.

        A job running here is answered from memory (jobs are polled, often): what it shows is what this
        service committed. A cancel or delete by another service sharing the database shows here when
        this service's next commit finds the job no longer held (within a chunk's time)."""
        live = self._live.get(job_id)
        if live is not None and live.record.workspace_id == workspace and not live.cancelling:
            record = live.record
        else:
            record = await asyncio.to_thread(self.store.get_job, job_id, workspace)
        job = self.view(record)
        if job.target is not None and job.usage is None:  # not generating here: what its generations add up to
            totals = await asyncio.to_thread(self.lanes.targeted.store.usage, job_id)
            job.usage = usage_of(totals, job.target.model, self.lanes.targeted.prices)
        return await self._with_sinks(record, job)

    async def _with_sinks(self, record: JobRecord, job: Job) -> Job:
        """``job`` with each sink's deliveries as stored (a job with sinks)."""
        if record.sinks:
            summary = await asyncio.to_thread(self.sinks.summary, record.id, record.sinks, job.progress.done)
            job.sinks = [JobSinkSummary(**one) for one in summary]
        return job

    async def wait(self, workspace: str, job_id: str, wait_s: float) -> Job:
        """The job once it is finished, or as it is ``wait_s`` seconds from now, whichever comes first.

        A job running (or queued) in this service is waited for without polling; any other (another
        service's, a queue's) is read again every :data:`_WAIT_POLL_S` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        job = await self.get(workspace, job_id)
        while job.status not in FINISHED and (left := deadline - loop.time()) > 0:
            task = self._tasks.get(job_id)
            if task is not None and not task.done():
                await asyncio.wait([task], timeout=left)
            else:
                await asyncio.sleep(min(_WAIT_POLL_S, left))
            job = await self.get(workspace, job_id)
        return job

    async def list_all(
        self,
        workspace: str,
        status: str | None = None,
        evaluator_id: str | None = None,
        *,
        limit: int | None = None,
        before: tuple[datetime, str] | None = None,
    ) -> list[Job]:
        """The jobs of ``workspace``, newest first (ties: greater id first): every one, or at most ``limit``
        after ``before`` (a ``(created_at, id)``) in that order, read a page at a time in the database."""
        records = await asyncio.to_thread(
            self.store.list_jobs, workspace, status=status, evaluator_id=evaluator_id, limit=limit, before=before
        )
        jobs = [self.view(r) for r in records]
        for record, job in zip(records, jobs, strict=True):
            if job.target is not None and job.usage is None:  # a model-target job not generating here
                totals = await asyncio.to_thread(self.lanes.targeted.store.usage, job.id)
                job.usage = usage_of(totals, job.target.model, self.lanes.targeted.prices)
            await self._with_sinks(record, job)
        return jobs

    async def cancel(self, workspace: str, job_id: str) -> Job:
        """Cancel a queued or running job (a finished job is returned unchanged)."""
        record = await asyncio.to_thread(self.store.get_job, job_id, workspace)
        if record.status in FINISHED:
            return self.view(record)
        live = self._live.get(job_id)
        if live is not None:
            live.cancelling = True
        task = self._tasks.get(job_id)
        await asyncio.to_thread(
            self.store.set_job, job_id, only_unfinished=True, status="cancelled", finished_at=utcnow()
        )
        if self.remote is not None:
            await self.remote.cancelled(job_id)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(task)  # until its chunks have stopped and its last commit landed
        return await self.get(workspace, job_id)

    async def delete(self, workspace: str, job_id: str) -> None:
        """Remove a job and its stored results (404 when unknown); a queued or running job is cancelled
        first. The job's own inline rows go with it; an uploaded dataset stays (``DELETE`` it apart)."""
        record = await asyncio.to_thread(self.store.get_job, job_id, workspace)
        if record.status not in FINISHED:
            await self.cancel(workspace, job_id)
        await asyncio.to_thread(self.store.delete_job, job_id)
        self._live.pop(job_id, None)
        dataset = await asyncio.to_thread(self.store.get_dataset, record.dataset_id)
        if dataset.inline and not await asyncio.to_thread(self.store.jobs_of_dataset, dataset.id):
            await self.datasets.discard(dataset)

    async def job_and_revision(self, workspace: str, job_id: str) -> tuple[JobRecord, RevisionRecord]:
        """The stored job of ``workspace`` and the revision it runs (for reading results)."""
        record = await asyncio.to_thread(self.store.get_job, job_id, workspace)
        revision = await asyncio.to_thread(
            self.evaluators.get_revision, workspace, record.evaluator_id, record.revision
        )
        return record, revision

    def view(self, record: JobRecord) -> Job:
        """The API shape of ``record``, overlaid with live progress when it is running here (and a model-target
        job's usage while it generates here)."""
        job = job_view(record, self._live.get(record.id))
        if record.target is not None:
            job.target = Target(**record.target)
            job.usage = self.lanes.targeted.live_usage(record.id, job.target.model)
        job.sinks.extend(uncounted(record.sinks or [], job.progress.done))  # get and list_all add the counts
        return job

    # -- execution -------------------------------------------------------------------------
    async def _execute(self, job_id: str) -> None:
        try:
            async with self._slots:
                await (self.lanes.run(job_id) if self.remote is None else self.remote.run(job_id))
        except asyncio.CancelledError:
            raise
        except Exception as group:  # a bug must not leave the job "running" forever either
            exc = _first(group)
            if isinstance(exc, JobNotHeld):
                log.info("job %s stopped here: %s", job_id, exc.message)
            elif isinstance(exc, QuotaExceeded):  # the storage quota stopped it: named as the store names it
                await self._fail(job_id, exc.type_name, exc.message, quota=exc.quota)
            elif isinstance(exc, EvaluatorHostError):
                await self._fail(job_id, exc.type_name, exc.message)
            else:
                log.error("job %s failed", job_id, exc_info=exc)
                await self._fail(job_id, type(exc).__name__, str(exc))
        finally:
            self._live.pop(job_id, None)

    async def _fail(self, job_id: str, type_name: str, message: str, **extra: str) -> None:
        error = {"type": type_name, "message": message, **extra}
        with contextlib.suppress(Exception):
            await asyncio.to_thread(
                self.store.set_job,
                job_id,
                only_unfinished=True,
                only_held=True,
                status="failed",
                error=error,
                finished_at=utcnow(),
            )
