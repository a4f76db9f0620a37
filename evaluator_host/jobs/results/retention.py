"""Retention: finished jobs older than ``RESULTS_RETENTION_DAYS`` are deleted by a periodic sweep.

Off by default. When on, the service sweeps at start-up and every ``RETENTION_SWEEP_S``
(an hour): every job that ended (``succeeded``, ``failed``, ``cancelled``) more than N days ago
is deleted exactly as ``DELETE /v1/jobs/{id}`` deletes it — its stored results and its inline
rows with it; an uploaded dataset stays (it is the user's, and ``DELETE /v1/datasets/{id}``
removes it). Queued and running jobs are never touched, however old. The clock is injected
(``clock``), so the rule is tested without waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from evaluator_host.errors import NotFoundError
from evaluator_host.jobs.running.runner import JobRunner
from evaluator_host.settings import Settings
from evaluator_host.shared.tasks import stop

__all__ = ["Retention"]

log = logging.getLogger(__name__)

_FINISHED = ("succeeded", "failed", "cancelled", "stopped")


class Retention:
    """The sweep of one service (see the module docstring)."""

    def __init__(self, settings: Settings, runner: JobRunner, clock: Callable[[], float] = time.time) -> None:
        self.days = settings.results_retention_days
        self.every_s = settings.retention_sweep_s
        self.runner = runner
        self.clock = clock
        self._task: asyncio.Task[None] | None = None

    async def sweep(self) -> list[str]:
        """Delete every job that finished more than ``days`` ago; the ids deleted."""
        if self.days is None:
            return []
        cutoff = self.clock() - self.days * 86400
        store = self.runner.store
        expired: list[tuple[str, str]] = []  # (workspace, job id): every workspace's jobs expire alike
        for status in _FINISHED:
            for record in await asyncio.to_thread(store.list_jobs, None, status=status):
                if record.finished_at is not None and record.finished_at.timestamp() < cutoff:
                    expired.append((record.workspace_id, record.id))
        for workspace, job_id in expired:
            with contextlib.suppress(NotFoundError):  # deleted meanwhile by a client
                await self.runner.delete(workspace, job_id)
        if expired:
            log.info("retention: deleted %d jobs finished over %g days ago", len(expired), self.days)
        return [job_id for _, job_id in expired]

    def start(self) -> None:
        """Sweep now and every ``every_s`` in the background (nothing when retention is off)."""
        if self.days is not None and self._task is None:
            self._task = asyncio.ensure_future(self._loop())

    async def _loop(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception:  # a failed sweep is retried at the next period; the service goes on
                log.exception("retention sweep failed")
            await asyncio.sleep(self.every_s)

    async def close(self) -> None:
        """Stop the periodic sweep."""
        task, self._task = self._task, None
        await stop(task)
