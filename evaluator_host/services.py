"""The long-lived components of one service process, started and stopped together.

One data dir belongs to one live service process: :meth:`Services.start` holds an exclusive
lock on ``data_dir/service.lock`` until :meth:`Services.close` (the kernel drops it when the
process dies, however it dies), so a second process on the same data dir is refused before
it touches anything — above all before the docker backend's start-up sweep, which removes
every container labelled with the data dir. An in-process CLI run uses
:meth:`Services.start_private`: a scratch data dir of its own, sharing only the build cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import gc
import logging
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path

from evaluator_host.builds.build_once import BuildOnce
from evaluator_host.builds.catalog import RuntimeCatalog
from evaluator_host.errors import DataDirInUse
from evaluator_host.evaluation.evaluators import Evaluators
from evaluator_host.evaluation.path import Evaluation
from evaluator_host.jobs.datasets.uploads import DatasetCatalog
from evaluator_host.jobs.results.exports import ResultReader
from evaluator_host.jobs.results.retention import Retention
from evaluator_host.jobs.running.runner import JobRunner
from evaluator_host.jobs.sink_rows import row_ids
from evaluator_host.observability.metrics import Metrics
from evaluator_host.online.components import OnlineScoring
from evaluator_host.online.levels.assembly import Assembly
from evaluator_host.online.receive.forwarding import Forwarder, Target, default_targets, workspace_targets
from evaluator_host.online.receive.ingest import Ingest
from evaluator_host.review.queues import Review
from evaluator_host.sandbox.base import SandboxBackend
from evaluator_host.sandbox.pool.workers import WorkerPool
from evaluator_host.sandbox.process.backend import ProcessBackend
from evaluator_host.settings import Settings
from evaluator_host.sinks.delivery import SinkDelivery
from evaluator_host.store import EvaluatorStore
from evaluator_host.store.db import DEFAULT_WORKSPACE, make_engine
from evaluator_host.store.idempotency import IdempotencyStore
from evaluator_host.store.jobs.repository import QUEUE_SUFFIX, JobStore
from evaluator_host.store.online.spans import OnlineSpanStore
from evaluator_host.store.rate_buckets import RateBuckets
from evaluator_host.store.secrets import SecretStore
from evaluator_host.store.sinks.deliveries import SinkDeliveryStore
from evaluator_host.store.workspaces import WorkspaceRecord, WorkspaceStore
from evaluator_host.tenancy.quotas import QuotaGuard
from evaluator_host.tenancy.vault import Vault
from evaluator_host.tenancy.workspaces import SYNC_S, Workspaces

__all__ = ["Services", "lock_data_dir", "select_backend", "service_id"]

log = logging.getLogger(__name__)
_frozen = False  # whether this process froze its start-up objects (_freeze_start_up)


def _freeze_start_up() -> None:
    """Move what is alive at the process's first service start (its imports, settings, this app) out of the
    cyclic collector's reach for good: full collections then skip it (``gc.freeze``). Once per process: a later
    start in the same process (a test suite's next app, an embedder's) would freeze the services before it too —
    garbage by then, but frozen objects are never collected, so every app started after the first stayed in
    memory for the process's life (about 1 MB an app: the suite's test processes grew past 1.5 GB)."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.freeze()


def select_backend(settings: Settings) -> SandboxBackend:
    """The configured backend.

    ``docker`` requires an engine and the base image (``BackendUnavailable`` otherwise);
    ``auto`` uses docker when an engine answers and the base image is there, else the
    process backend (saying why in the log); ``process`` is the embedded sandbox.
    """
    if settings.backend == "process":
        return ProcessBackend(settings)
    from evaluator_host.sandbox.docker.backend import DockerBackend
    from evaluator_host.sandbox.docker.engine import unusable_reason

    if settings.backend == "auto" and (reason := unusable_reason(settings)) is not None:
        log.info("the docker backend is not usable (%s): using the process backend", reason)
        return ProcessBackend(settings)
    return DockerBackend(settings)


def lock_data_dir(data_dir: Path, role: str = "service") -> int:
    """Take ``data_dir``'s service lock (an open fd, kept until closed); ``DataDirInUse`` if held.

    The lock file says who holds it: ``PID ROLE`` (``service``, ``worker``, ...), read by
    ``evaluator-host worker --drain`` so that it never stops a process other than a worker host.
    """
    path = data_dir / "service.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = (os.pread(fd, 64, 0).decode(errors="replace").split() or ["?"])[0]
        os.close(fd)
        raise DataDirInUse(
            f"another evaluator-host process (pid {holder}) is using the data dir {data_dir}: stop it, "
            "or give this one its own EVALUATOR_HOST_DATA_DIR (in-process `run` does so by itself)"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {role}\n".encode(), 0)
    return fd


def service_id(data_dir: Path) -> str:
    """The data dir's service id (made once, kept in ``data_dir/service-id``): the owner of the jobs
    it runs in a database several services may share. A restored copy of the data dir is the same service."""
    path = data_dir / "service-id"
    with contextlib.suppress(FileNotFoundError):
        if known := path.read_text().strip():
            return known
    made = f"{socket.gethostname()[:40]}-{uuid.uuid4().hex[:12]}"
    tmp = path.with_name(f".service-id.{os.getpid()}")
    tmp.write_text(made + "\n")
    os.replace(tmp, path)
    return made


CLOSE_STEP_S = 60.0  # how long one part of the service may take to stop (Services.close)


async def _bounded(name: str, step: Awaitable[object]) -> None:
    """Await ``step`` for :data:`CLOSE_STEP_S` at most; past it, log that ``name`` did not stop and go on."""
    try:
        async with asyncio.timeout(CLOSE_STEP_S):
            await step
    except TimeoutError:
        log.error("shutting down: %s did not stop within %.0f s; going on without it", name, CLOSE_STEP_S)


@dataclass
class Services:
    """Settings, stores, backend, pool, the evaluation service, evaluators, datasets and jobs."""

    settings: Settings
    store: EvaluatorStore
    backend: SandboxBackend
    pool: WorkerPool
    evaluation: Evaluation
    evaluators: Evaluators
    datasets: DatasetCatalog
    runner: JobRunner
    results: ResultReader
    workspaces: Workspaces
    vault: Vault
    quotas: QuotaGuard
    lock_fd: int = -1
    scratch: Path | None = field(default=None, repr=False)  # removed on close (private runs)
    syncer: asyncio.Task[None] | None = field(default=None, repr=False)  # see :meth:`_sync`

    @functools.cached_property
    def idempotency(self) -> IdempotencyStore:
        """The ``Idempotency-Key`` answers (same database as the rest)."""
        return IdempotencyStore(self.store.engine, self.settings.idempotency_claim_s)

    @functools.cached_property
    def retention(self) -> Retention:
        """The sweep of finished jobs past ``RESULTS_RETENTION_DAYS`` (idle when that is off)."""
        return Retention(self.settings, self.runner)

    @functools.cached_property
    def online(self) -> OnlineScoring:
        """Online rules, the scoring queue, its router and scorer (started in :meth:`resume`)."""
        metrics = self.pool.metrics
        return OnlineScoring(self, self.store.engine, metrics, service_id(self.settings.data_dir))

    @functools.cached_property
    def review(self) -> Review:
        """Review queues, items and verdicts (issue 53; a rule's queue also fills from the scorer's store hook)."""
        return Review(self.settings, self.store.engine, self.runner.store, self.datasets.files)

    @functools.cached_property
    def runtimes(self) -> RuntimeCatalog:
        """``/v1/runtimes``: the backend's builds and built runtimes."""
        return RuntimeCatalog(self.backend.builder)

    @functools.cached_property
    def ingest(self) -> Ingest:
        """The OTLP receiver's use case (``POST /v1/traces``), its spans offered to :attr:`forwarder`."""
        ingest = Ingest(self.settings, OnlineSpanStore(self.store.engine), self.pool.metrics, self.quotas)
        ingest.forward = self.forwarder.offer
        ingest.forwards = self.forwarder.forwards
        return ingest

    @functools.cached_property
    def sink_delivery(self) -> SinkDelivery:
        """Scores written into their rules' sinks (Phoenix, Langfuse), started in :meth:`resume`."""
        return SinkDelivery(
            self.settings,
            SinkDeliveryStore(self.store.engine),
            service_id(self.settings.data_dir),
            lambda workspace, names: self.vault.values(workspace, names, "the rule's sinks"),
            lambda workspace: self.workspaces.get(workspace).network_allow,
            lambda: not self.workspaces.auth_required,
            job_rows=lambda dataset, mapping, indexes: row_ids(self.datasets.files, dataset, mapping, indexes),
        )

    @functools.cached_property
    def forwarder(self) -> Forwarder:
        """Received spans forwarded to the workspaces' OTLP endpoints (started in :meth:`resume`)."""
        fixed = default_targets(self.settings)

        def targets(workspace: str) -> tuple[Target, ...]:
            own = workspace_targets(self.workspaces.get(workspace).forwarding)
            return (*fixed, *own) if workspace == DEFAULT_WORKSPACE else own

        return Forwarder(
            self.settings,
            self.pool.metrics,
            targets,
            lambda workspace, names: self.vault.values(workspace, names, "the span forwarding's headers"),
            lambda workspace: self.workspaces.get(workspace).network_allow,
            lambda: not self.workspaces.auth_required,
        )

    @functools.cached_property
    def assembly(self) -> Assembly:
        """The periodic pass making quiet traces ready, and raw-span retention (woken when spans are stored)."""
        assembly = Assembly(
            self.settings, self.ingest.store, self.ingest, self.pool.metrics, on_ready=lambda: self.online.router.wake()
        )
        self.ingest.on_stored = assembly.wake
        return assembly

    @classmethod
    def start(cls, settings: Settings, role: str = "service") -> Services:
        """Lock the data dir (as ``role``: see :func:`lock_data_dir`), then create every component
        (jobs resume in :meth:`resume`).

        Raises ``DataDirInUse`` when another live process holds the data dir.
        """
        settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock_fd = lock_data_dir(settings.data_dir, role)
        try:
            return cls._components(settings, lock_fd)
        except BaseException:
            os.close(lock_fd)
            raise

    @classmethod
    def start_private(cls, settings: Settings) -> Services:
        """Services in a scratch data dir of their own (removed on close), for in-process CLI runs.

        Nothing of the configured data dir is touched — its database (a configured
        ``database_url`` too: the run has a SQLite file of its own), its datasets' bucket (``blob_url``: its
        rows stay in the scratch dir; a sweep of the bucket against the scratch database would remove every
        dataset), its jobs, its worker dirs, its containers — except the build cache (``cache_dir``, default the
        data dir), which is made to be shared: a package set built by the server is not built again, and the
        reverse.
        """
        scratch = Path(tempfile.mkdtemp(prefix="evaluator-host-run-"))
        private = settings.model_copy(
            update={
                "data_dir": scratch,
                "cache_dir": settings.resolved_cache_dir,
                "database_url": None,
                "blob_url": None,
            }
        )
        try:
            services = cls.start(private)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        services.scratch = scratch
        return services

    @classmethod
    def _components(cls, settings: Settings, lock_fd: int) -> Services:
        if settings.gc_threshold:
            _freeze_start_up()
            gc.set_threshold(settings.gc_threshold, 10, 10)
        engine = make_engine(settings.resolved_database_url)
        store = EvaluatorStore(engine)
        # a queued job belongs to the service's queue: each mode adopts the other's unfinished jobs
        me, queue = service_id(settings.data_dir), service_id(settings.data_dir) + QUEUE_SUFFIX
        jobs = JobStore(engine, owner=queue, adopts=me) if settings.queue_url else JobStore(engine, me, adopts=queue)
        jobs.lease_s = settings.job_lease_s  # held while renewed; adopted by another service once it runs out
        workspaces = Workspaces(settings, WorkspaceStore(engine))
        vault = Vault(settings, SecretStore(engine))
        # PostgreSQL: the rate buckets live in the database, shared by every service on it (issue 54)
        quotas = QuotaGuard(workspaces, RateBuckets(engine) if engine.dialect.name == "postgresql" else None)
        backend = select_backend(settings)
        metrics = Metrics()
        metrics.swept.inc(getattr(backend, "swept", 0))
        if isinstance(backend.builder, BuildOnce):
            backend.builder.metrics = metrics
        pool = WorkerPool(backend, settings, metrics)
        # rlimits only (no namespaces, no private root): the restricted policy is the default there
        weak = backend.isolation.get("mode") == "rlimits"
        evaluation = Evaluation(settings, pool, backend.builder, weak_isolation=weak)
        datasets = DatasetCatalog(settings, jobs, quotas)
        evaluators = Evaluators(store, evaluation, vault, workspaces, quotas)
        evaluators.shared = engine.dialect.name == "postgresql"  # others save and delete on it: read the latest
        runner = JobRunner(settings, jobs, evaluators, datasets, quotas)
        runner.metrics = metrics
        if settings.queue_url:
            from evaluator_host.jobs.queue.dispatch import Dispatcher

            runner.remote = Dispatcher(settings, jobs, datasets.files)
        results = ResultReader(jobs, datasets.files)
        services = cls(
            settings,
            store,
            backend,
            pool,
            evaluation,
            evaluators,
            datasets,
            runner,
            results,
            workspaces,
            vault,
            quotas,
            lock_fd,
        )
        for record in workspaces.list_all():
            services.apply_workspace(record)
        return services

    def apply_workspace(self, record: WorkspaceRecord) -> None:
        """Put a workspace's quotas and allowlist in force where they are enforced: the pool (warm
        workers) and the egress proxy (network_allow; checked at every connection)."""
        self.pool.workspace_caps[record.id] = record.quotas.get("max_warm_workers")
        if self.backend.egress is not None:
            self.backend.egress.workspace_allow[record.id] = frozenset(record.network_allow)

    async def resume(self) -> None:
        """Sweep what a killed predecessor left half-written, start the bare runtimes' spares, resume the
        jobs a previous run left queued or running, and start the retention sweep (when
        ``RESULTS_RETENTION_DAYS`` is set)."""
        swept = await asyncio.to_thread(self.datasets.sweep)
        if swept:
            log.info("removed %d dataset files a stopped service left half-written", swept)
        moved = await asyncio.to_thread(self.datasets.move_files_in)
        if moved:
            log.info("moved the rows of %d datasets into %s", moved, self.datasets.where)
        self.evaluation.warm_bare_runtimes()
        await self.runner.start()
        self.retention.start()
        await self.online.start()
        self.forwarder.start()
        self.sink_delivery.start()
        self.online.scorer.on_stored.append(self.sink_delivery.ticker.nudge)  # a score stored: delivery looks if idle
        self.assembly.start()
        self.syncer = asyncio.ensure_future(self._sync())

    async def _sync(self) -> None:
        """Every ``SYNC_S``: put in force what other services sharing the database changed — revoked
        keys, workspaces' quotas and allowlists, secrets (``Workspaces.sync``, ``Vault.sync``)."""
        while True:
            await asyncio.sleep(SYNC_S)
            try:
                for record in await self.workspaces.sync():
                    self.apply_workspace(record)
                await self.vault.sync()
            except Exception:  # a database hiccup: the next period tries again, the service goes on
                log.exception("reading the workspaces other services changed failed")

    async def close(self) -> None:
        """Stop running jobs (they resume on the next start), every worker, and the database. Each part has
        :data:`CLOSE_STEP_S` to stop: one that does not (a worker that never answers, a commit that never
        returns) is logged by name and left behind, so a service asked to stop always stops."""
        try:
            if self.syncer is not None:
                self.syncer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await _bounded("the key syncer", self.syncer)
            for name in ("runtimes", "retention", "assembly", "online", "forwarder", "sink_delivery"):
                if name in self.__dict__:  # assembly before online: it wakes the online router
                    await _bounded(name, self.__dict__[name].close())
            await _bounded("the job runner", self.runner.close())
            await _bounded("the evaluators", self.evaluators.close())
            await _bounded("the worker pool", self.pool.close())
            await _bounded("the workspaces", self.workspaces.close())
            self.evaluation.close()
            self.store.engine.dispose()
        finally:
            with contextlib.suppress(OSError):
                os.close(self.lock_fd)
            if self.scratch is not None:
                shutil.rmtree(self.scratch, ignore_errors=True)
