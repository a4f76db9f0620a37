"""The long-lived components of one service process, started and stopped together."""

from __future__ import annotations

import gc
import logging
from dataclasses import dataclass

from evaluator_host.catalog import Catalog
from evaluator_host.jobs.catalog import DatasetCatalog
from evaluator_host.jobs.results import ResultReader
from evaluator_host.jobs.runner import JobRunner
from evaluator_host.sandbox.backend import SandboxBackend
from evaluator_host.sandbox.pool import WorkerPool
from evaluator_host.sandbox.process import ProcessBackend
from evaluator_host.service import EvaluationService
from evaluator_host.settings import Settings
from evaluator_host.store import EvaluatorStore
from evaluator_host.store.db import make_engine
from evaluator_host.store.jobs import JobStore

__all__ = ["Services", "select_backend"]

log = logging.getLogger(__name__)


def select_backend(settings: Settings) -> SandboxBackend:
    """The configured backend.

    ``docker`` requires an engine and the base image (``BackendUnavailable`` otherwise);
    ``auto`` uses docker when an engine answers and the base image is there, else the
    process backend (saying why in the log); ``process`` is the embedded sandbox.
    """
    if settings.backend == "process":
        return ProcessBackend(settings)
    from evaluator_host.sandbox.docker_backend import DockerBackend
    from evaluator_host.sandbox.docker_engine import unusable_reason

    if settings.backend == "auto" and (reason := unusable_reason(settings)) is not None:
        log.info("the docker backend is not usable (%s): using the process backend", reason)
        return ProcessBackend(settings)
    return DockerBackend(settings)


@dataclass
class Services:
    """Settings, stores, backend, pool, the evaluation service, evaluators, datasets and jobs."""

    settings: Settings
    store: EvaluatorStore
    backend: SandboxBackend
    pool: WorkerPool
    evaluation: EvaluationService
    catalog: Catalog
    datasets: DatasetCatalog
    runner: JobRunner
    results: ResultReader

    @classmethod
    def start(cls, settings: Settings) -> Services:
        """Create the data dir and every component (jobs resume in :meth:`resume`)."""
        settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if settings.gc_threshold:
            gc.freeze()  # what is alive at start-up lives for good: keep it out of full collections
            gc.set_threshold(settings.gc_threshold, 10, 10)
        engine = make_engine(settings.resolved_database_url)
        store = EvaluatorStore(engine)
        jobs = JobStore(engine)
        backend = select_backend(settings)
        pool = WorkerPool(backend, settings)
        evaluation = EvaluationService(settings, pool, backend.builder)
        datasets = DatasetCatalog(settings, jobs)
        runner = JobRunner(settings, jobs, store, evaluation, datasets)
        results = ResultReader(jobs, datasets.files)
        return cls(settings, store, backend, pool, evaluation, Catalog(store, evaluation), datasets, runner, results)

    async def resume(self) -> None:
        """Resume the jobs a previous run of the service left queued or running."""
        await self.runner.start()

    async def close(self) -> None:
        """Stop running jobs (they resume on the next start), every worker, and the database."""
        await self.runner.close()
        await self.pool.close()
        self.store.engine.dispose()
