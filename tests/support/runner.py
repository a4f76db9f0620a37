"""The job runner on the fake backend: the service's wiring (``services.py``) with a :class:`FakeBackend`
under a real pool and a real store, the runner's retry back-off recorded instead of slept."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from evaluator_host.evaluation.evaluators import Evaluators
from evaluator_host.evaluation.models import EvaluatorCreate
from evaluator_host.evaluation.path import Evaluation
from evaluator_host.jobs.datasets.uploads import DatasetCatalog
from evaluator_host.jobs.models import Job, JobCreate
from evaluator_host.jobs.running.executor import ChunkExecutor
from evaluator_host.jobs.running.runner import JobRunner
from evaluator_host.sandbox.pool.workers import WorkerPool
from evaluator_host.services import service_id
from evaluator_host.settings import Settings
from evaluator_host.store import EvaluatorStore
from evaluator_host.store.db import DEFAULT_WORKSPACE, make_engine
from evaluator_host.store.jobs.repository import JobStore
from evaluator_host.store.secrets import SecretStore
from evaluator_host.store.workspaces import WorkspaceStore
from evaluator_host.tenancy.quotas import QuotaGuard
from evaluator_host.tenancy.vault import Vault
from evaluator_host.tenancy.workspaces import Workspaces
from evaluator_host.testing.fake import FakeBackend, FakeWorker, Handler, Reply, StartHook

WS = DEFAULT_WORKSPACE

CODE = "def evaluate(inputs, outputs, trace):\n    return float(inputs['i'] % 2)\n"


class FastRunner(JobRunner):
    """The runner with its chunk executor's retry back-off (injected) recorded instead of slept."""

    def __init__(self, settings: Settings, *args: Any) -> None:
        self.backoffs: list[int] = []

        def backoff(attempt: int) -> float:
            self.backoffs.append(attempt)
            return 0.0

        super().__init__(settings, *args, executor=ChunkExecutor(settings, backoff=backoff))


@dataclass
class Wired:
    settings: Settings
    backend: FakeBackend
    pool: WorkerPool
    evaluators: Evaluators
    jobs: JobStore
    runner: FastRunner
    scores: list[float] = field(default_factory=list)

    async def evaluator(self, **settings: Any) -> str:
        body = EvaluatorCreate(name="t", language="python", code=CODE, settings=settings)  # type: ignore[arg-type]
        return (await self.evaluators.create(WS, body)).id

    async def job(self, evaluator_id: str, rows: int, **body: Any) -> str:
        create = JobCreate(evaluator_id=evaluator_id, rows=[{"i": i, "outputs": None} for i in range(rows)], **body)
        return (await self.runner.create(WS, create)).id

    async def finished(self, job_id: str) -> Job:
        while (job := await self.runner.get(WS, job_id)).status in ("queued", "running"):
            await asyncio.sleep(0.005)
        return job

    async def stored(self, job_id: str) -> dict[int, dict[str, Any]]:
        rows = await asyncio.to_thread(self.jobs.results, job_id, 0, 1 << 30)
        return {r.idx: json.loads(r.result) for r in rows}

    def worker_of(self, row: int) -> FakeWorker:
        """The worker whose handler was called with row ``row``."""
        (worker,) = [w for w in self.backend.workers if row in (index(c) for c in w.handled)]
        return worker

    def handled(self) -> list[int]:
        """The row index of every case the fake handlers were called with, sorted."""
        return sorted(case["inputs"]["i"] for w in self.backend.workers for case in w.handled)


@asynccontextmanager
async def wired(
    data_dir: Path,
    handler: Handler,
    *,
    start: StartHook | None = None,
    engine: Engine | None = None,
    **overrides: Any,
) -> AsyncIterator[Wired]:
    """The service's components on a fake backend (``services.py``'s wiring); started, closed afterwards."""
    settings = Settings(data_dir=data_dir, **{"spare_workers": 0, "job_parallelism": 1, **overrides})
    engine = engine or make_engine(f"sqlite:///{data_dir / 'db.sqlite'}")
    backend = FakeBackend(handler, start=start)
    pool = WorkerPool(backend, settings)
    evaluation = Evaluation(settings, pool, backend.builder)
    jobs = JobStore(engine, owner=service_id(data_dir))
    workspaces = Workspaces(settings, WorkspaceStore(engine))
    quotas = QuotaGuard(workspaces)
    vault = Vault(settings, SecretStore(engine))
    evaluators = Evaluators(EvaluatorStore(engine), evaluation, vault, workspaces, quotas)
    runner = FastRunner(settings, jobs, evaluators, DatasetCatalog(settings, jobs, quotas), quotas)
    await runner.start()
    try:
        yield Wired(settings, backend, pool, evaluators, jobs, runner)
    finally:
        await runner.close()
        await pool.close()
    assert backend.errors == []


def index(case: dict[str, Any]) -> int:
    return int(case["inputs"]["i"])


def parity(_load: dict[str, Any], case: dict[str, Any]) -> Reply:
    return {"value": float(index(case) % 2)}
