"""``evaluator-host worker``: a worker host of queued jobs (a Celery worker underneath).

It runs on its own data dir (the data dir's lock: one worker or service per data dir), backend and
build cache, takes chunk tasks from ``EVALUATOR_HOST_QUEUE_URL`` — ``--lanes`` at a time
(``EVALUATOR_HOST_WORKER_LANES``), each on a warm worker of its pool — and commits their rows to the
shared database (``EVALUATOR_HOST_DATABASE_URL``). The Celery worker runs on threads in this
process; the pool, the builder and the database calls live on one asyncio loop beside it.

The worker host's parts come from this process's services (``Services.start(role="worker")``): the
job store, the stored evaluators (their pool and builder) and the metrics are handed to
:class:`~evaluator_host.jobs.queue.host.WorkerHost` here (:func:`worker_host`), so ``jobs/`` never
imports the service's assembly.

Stopping: SIGTERM (or ``evaluator-host worker --drain`` on the same data dir, which sends it and waits)
drains the host: it takes no new chunk, finishes and commits the ones it runs, then exits 0; chunks
it had taken but not started go back to the queue. A second SIGTERM or SIGINT, or SIGQUIT, stops at
once; chunks it was running come back to the queue after ``queue_visibility_s``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from evaluator_host.errors import DataDirInUse

if TYPE_CHECKING:
    from evaluator_host.jobs.queue.host import WorkerHost
    from evaluator_host.services import Services
    from evaluator_host.settings import Settings

__all__ = ["add_parser", "worker_host"]

log = logging.getLogger("evaluator_host.worker")


def add_parser(sub: Any) -> None:
    """The ``worker`` subcommand."""
    worker = sub.add_parser("worker", help="run queued jobs' chunks on this host (EVALUATOR_HOST_QUEUE_URL)")
    worker.add_argument("--lanes", type=int, help="chunks run at once (default EVALUATOR_HOST_WORKER_LANES)")
    worker.add_argument("--name", help="this host's name in results' `worker` (default: the data dir's service id)")
    worker.add_argument("--backend", choices=["auto", "process", "docker"])
    worker.add_argument("--log-level", default=None, help="default: EVALUATOR_HOST_LOG_LEVEL (info)")
    worker.add_argument(
        "--drain",
        action="store_true",
        help="drain the worker running on this data dir: it finishes its chunks, takes no new one, exits",
    )
    worker.add_argument("--timeout", type=float, default=600.0, help="--drain: wait at most this long (s)")
    worker.set_defaults(func=_worker)


def _worker(args: argparse.Namespace) -> int:
    from evaluator_host.settings import Settings

    settings = Settings(**({"backend": args.backend} if args.backend else {}))
    if args.drain:
        return _drain(settings, args.timeout)
    if not settings.queue_url:
        sys.stderr.write(
            "evaluator-host: worker needs EVALUATOR_HOST_QUEUE_URL (the broker, e.g. redis://host:6379/0)\n"
        )
        return 2
    if args.lanes is not None:
        if not 1 <= args.lanes <= 64:
            sys.stderr.write("evaluator-host: --lanes must be between 1 and 64\n")
            return 2
        settings = settings.model_copy(update={"worker_lanes": args.lanes})
    from evaluator_host.observability.logs import configure

    level = args.log_level or settings.log_level
    configure(level, settings.log_format, access_log=False)
    for name in ("celery", "kombu"):
        logging.getLogger(name).handlers[:] = logging.getLogger("evaluator_host").handlers
        logging.getLogger(name).setLevel("DEBUG" if os.environ.get("EVH_DEBUG_CELERY") else "WARNING")
        logging.getLogger(name).propagate = False
    import warnings

    from celery.platforms import SecurityWarning

    # root is how the process backend isolates workers (docs/security.md); tasks take JSON only, never pickle
    warnings.filterwarnings("ignore", category=SecurityWarning)
    return _Host(settings, args.name).serve()


class _Host:
    """The asyncio loop (pool, builder, database) and the Celery worker that feeds it."""

    def __init__(self, settings: Settings, name: str | None) -> None:
        self.settings = settings
        self.name = name
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="evh-host-loop", daemon=True)

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def serve(self) -> int:
        from evaluator_host.jobs.queue.signing import QueueKeyMissing
        from evaluator_host.services import service_id

        self.thread.start()
        try:
            services = self._call(_start(self.settings))
        except DataDirInUse as exc:
            sys.stderr.write(f"evaluator-host: {exc.message}\n")
            return 2
        except Exception as exc:  # the database or the backend cannot be used: one line, exit 2
            sys.stderr.write(f"evaluator-host: worker cannot start: {exc}\n")
            return 2
        try:
            name = self.name or service_id(self.settings.data_dir)
            try:
                host = worker_host(services, name)
            except QueueKeyMissing as exc:
                sys.stderr.write(f"evaluator-host: worker cannot start: {exc}\n")
                return 2
            self._call(host.start())
            code = self._celery(host, services.backend.name)
            self._call(host.close())
            return code
        finally:
            self._call(services.close())
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)

    def _celery(self, host: Any, backend: str) -> int:
        from celery.exceptions import Reject

        from evaluator_host.jobs.queue.broker import CHUNK_TASK, make_app
        from evaluator_host.jobs.running.executor import DatabaseAway

        app = make_app(self.settings)
        loop = self.loop

        @app.task(name=CHUNK_TASK, acks_late=True, reject_on_worker_lost=True)  # type: ignore[untyped-decorator]
        def chunk(job_id: str, owner: str, rows: str, signature: str | None = None) -> None:
            try:
                outcome = asyncio.run_coroutine_threadsafe(host.chunk(job_id, owner, rows, signature), loop).result()
            except DatabaseAway as exc:
                log.warning("job %s: a chunk goes back to the queue: %s", job_id, exc)
                raise Reject(str(exc), requeue=True) from exc
            log.info("job %s: chunk %s", job_id, outcome)

        log.info(
            "worker host %s: %d lanes on queue %s (backend %s)",
            host.name,
            self.settings.worker_lanes,
            self.settings.queue_name,
            backend,
        )
        worker = app.Worker(
            pool="threads",
            concurrency=self.settings.worker_lanes,
            hostname=f"{host.name}@evaluator-host",
            queues=[self.settings.queue_name],
            without_heartbeat=True,
            without_gossip=True,
            without_mingle=True,
            quiet=True,
            loglevel="WARNING",
        )
        worker.start()
        log.info("worker host %s stopped", host.name)
        return int(worker.exitcode or 0)


def worker_host(services: Services, name: str) -> WorkerHost:
    """The :class:`~evaluator_host.jobs.queue.host.WorkerHost` named ``name`` on ``services``' parts (its job
    store, stored evaluators and metrics); ``QueueKeyMissing`` without ``EVALUATOR_HOST_SECRETS_KEY``."""
    from evaluator_host.jobs.queue.host import WorkerHost

    runner = services.runner
    return WorkerHost(services.settings, runner.store, services.evaluators, name, metrics=runner.metrics)


async def _start(settings: Settings) -> Any:
    from evaluator_host.services import Services

    return Services.start(settings, role="worker")


def _drain(settings: Settings, timeout_s: float) -> int:
    """SIGTERM the worker holding this data dir, then wait until it has let go of it; never signal
    another kind of process holding it (the service, `db` commands): say so and exit 1."""
    from evaluator_host.services import lock_data_dir

    path = settings.data_dir / "service.lock"
    try:
        holder = path.read_text().split()
        pid, role = int(holder[0]), holder[1] if len(holder) > 1 else "process of an older release"
    except (OSError, ValueError, IndexError):
        sys.stderr.write(f"evaluator-host: no worker runs on {settings.data_dir}\n")
        return 1
    try:
        fd = lock_data_dir(settings.data_dir)
    except DataDirInUse:
        fd = -1
    if fd >= 0:  # nobody holds it: nothing to drain
        os.close(fd)
        sys.stderr.write(f"evaluator-host: no worker runs on {settings.data_dir}\n")
        return 1
    if role != "worker":
        sys.stderr.write(
            f"evaluator-host: the process on {settings.data_dir} (pid {pid}) is not a worker host but a {role}: "
            "--drain stops worker hosts only (set EVALUATOR_HOST_DATA_DIR to the worker's data dir; "
            f"a worker of an older release: kill -TERM {pid})\n"
        )
        return 1
    os.kill(pid, signal.SIGTERM)
    sys.stdout.write(f"draining the worker (pid {pid}): it finishes its chunks and takes no new ones\n")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.2)
        with contextlib.suppress(DataDirInUse):
            os.close(lock_data_dir(settings.data_dir))
            sys.stdout.write("drained: the worker has stopped\n")
            return 0
    sys.stderr.write(f"evaluator-host: the worker (pid {pid}) still runs after {timeout_s:g} s\n")
    return 1
