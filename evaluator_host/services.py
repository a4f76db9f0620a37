"""The long-lived components of one service process, started and stopped together."""

from __future__ import annotations

from dataclasses import dataclass

from evaluator_host.catalog import Catalog
from evaluator_host.errors import BackendUnavailable
from evaluator_host.sandbox.backend import SandboxBackend
from evaluator_host.sandbox.builder import RuntimeBuilder
from evaluator_host.sandbox.pool import WorkerPool
from evaluator_host.sandbox.process import ProcessBackend
from evaluator_host.service import EvaluationService
from evaluator_host.settings import Settings
from evaluator_host.store import EvaluatorStore
from evaluator_host.store.db import make_engine

__all__ = ["Services", "select_backend"]


def select_backend(settings: Settings) -> SandboxBackend:
    """The configured backend: ``auto`` and ``process`` give the process backend.

    ``docker`` is refused with :class:`BackendUnavailable` until that backend exists, rather
    than silently running on another one.
    """
    if settings.backend == "docker":
        raise BackendUnavailable("the docker backend is not available in this version; use auto or process")
    return ProcessBackend(settings)


@dataclass
class Services:
    """Settings, store, backend, pool and the evaluation service."""

    settings: Settings
    store: EvaluatorStore
    backend: SandboxBackend
    pool: WorkerPool
    evaluation: EvaluationService
    catalog: Catalog

    @classmethod
    def start(cls, settings: Settings) -> Services:
        """Create the data dir and every component."""
        settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        store = EvaluatorStore(make_engine(settings.resolved_database_url))
        backend = select_backend(settings)
        pool = WorkerPool(backend, settings)
        evaluation = EvaluationService(settings, pool, RuntimeBuilder(settings))
        return cls(settings, store, backend, pool, evaluation, Catalog(store, evaluation))

    async def close(self) -> None:
        """Stop every worker and release the database."""
        await self.pool.close()
        self.store.engine.dispose()
