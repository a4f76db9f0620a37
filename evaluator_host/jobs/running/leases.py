"""The lease keeper: this service's hold on its jobs renewed, and other services' expired jobs adopted.

Contract (the store's side, atomic adoption and why a late commit of the old owner is refused:
:mod:`evaluator_host.store.jobs.leases`):

* Every ``job_lease_s / 4`` the keeper renews the leases of all this service's unfinished jobs (one
  statement), then adopts the jobs of other services sharing the database whose lease ran out, and hands
  each to the runner to run (rows already stored are skipped, the rest run once: the runner's resume).
  With the default 10 s lease a job is adopted at most 12.5 s after its owner last renewed it (the lease,
  then at most one period), so within 15 s of the owner's death.
* Only jobs this service can run are adopted: their dataset it can read (its rows are in the database on
  PostgreSQL, files in a datasets folder on SQLite: ``jobs.datasets.files``), and not a model-target job
  when its jobs run on a queue (those run on a service's own lanes); another job stays for a service that
  can run it, or its owner once it is back.
* A database that does not answer is logged and tried again next period; the keeper never stops on an
  error (a missed renewal costs at most an adoption elsewhere, which the fenced commits make safe).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from evaluator_host.jobs.datasets.files import DatasetFiles
from evaluator_host.shared.tasks import stop
from evaluator_host.store.jobs.repository import JobRecord, JobStore

__all__ = ["LeaseKeeper"]

log = logging.getLogger(__name__)

RENEWALS_PER_LEASE = 4  # a lease is renewed this many times over its length


class LeaseKeeper:
    """Renews ``store``'s owner's leases and hands adopted jobs to ``adopted`` (see the module's contract)."""

    def __init__(
        self,
        store: JobStore,
        files: DatasetFiles,
        adopted: Callable[[JobRecord], Awaitable[None]],
        targets: Callable[[], bool] = lambda: True,
    ) -> None:
        self.store = store
        self.files = files
        self.adopted = adopted
        self.targets = targets  # whether this service runs model-target jobs (not on a queue)
        self._task: asyncio.Task[None] | None = None

    @property
    def period_s(self) -> float:
        """How often leases are renewed and expired ones looked for."""
        return self.store.lease_s / RENEWALS_PER_LEASE

    def start(self) -> None:
        """Start renewing and adopting (once)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._loop())

    async def close(self) -> None:
        """Stop: no renewal, no adoption from now on (this service's jobs are adopted once their leases end)."""
        task, self._task = self._task, None
        await stop(task)

    def _can_run(self, dataset_id: str, has_target: bool) -> bool:
        return (self.targets() or not has_target) and self.files.exists(dataset_id)

    async def tick(self) -> list[JobRecord]:
        """One period's work: renew this owner's leases, adopt what expired elsewhere; the jobs adopted."""
        await asyncio.to_thread(self.store.renew_leases)
        taken = await asyncio.to_thread(self.store.adopt_expired, self._can_run)
        for record in taken:
            log.warning(
                "adopted job %s: its owner's lease ran out (%d of %d rows done)", record.id, record.done, record.total
            )
            await self.adopted(record)
        return taken

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.period_s)
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database away: next period
                log.warning("job leases: could not renew or adopt (%s); trying again in %.1f s", exc, self.period_s)
