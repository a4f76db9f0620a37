"""Job leases (issue 54): a job is held by a lease its owner renews, not by the owner's process.

Contract:

* ``jobs.lease_until`` is when the owner's hold on an unfinished job ends, in Unix seconds by the
  **database's** clock (PostgreSQL ``clock_timestamp()``, SQLite ``julianday('now')``), so services on
  hosts whose clocks disagree still agree on who holds what. A job gets its lease when it is created,
  claimed or resumed, and its owner renews the leases of all its unfinished jobs in one statement
  (:meth:`JobLeases.renew_leases`, every quarter of ``lease_s``).
* A job unfinished past its lease (its owner was killed, paused, or lost its host), or never leased (stored
  before leases existed, or without an owner), is **adoptable**: :meth:`JobLeases.adopt_expired` makes it this
  store's owner's, with a fresh lease, atomically — one winner whatever number of services try at once:
  on PostgreSQL the candidates are locked ``FOR UPDATE SKIP LOCKED`` (a job whose row another transaction
  holds — its owner committing a chunk, another adopter — is skipped: its owner is alive, or someone else is
  adopting it), and on both databases the UPDATE repeats the conditions (unfinished, the owner it was seen
  with, lease expired), so of two adopters only the first one's UPDATE changes the row.
* Adopting changes ``owner``, and every commit is fenced by ``owner`` in the commit's own transaction
  (:mod:`evaluator_host.store.jobs.results`): the old owner, should it come back (a paused process
  continued), stores no further row of the job (``JobNotHeld``), so every row is stored exactly once.
  A lease is no part of the fence: an owner whose lease ran out but whose job nobody adopted commits as
  before and its next renewal holds the job again.
* Every statement is portable SQL (SQLite and PostgreSQL); call from a thread: they block.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import ColumnElement, Float, and_, literal_column, or_, select, update
from sqlalchemy.engine import Engine

from evaluator_host.store.db import JobRow
from evaluator_host.store.jobs.records import JobRecord, job_record

__all__ = ["DEFAULT_LEASE_S", "JobLeases", "database_now"]

DEFAULT_LEASE_S = 10.0  # Settings.job_lease_s's default
_UNFINISHED = ("queued", "running")
_ADOPT_AT_ONCE = 100  # jobs adopted in one call at most (the next call takes the rest)


def database_now(engine: Engine) -> ColumnElement[float]:
    """The database's clock now, in Unix seconds (fractional), as an SQL expression."""
    if engine.dialect.name == "postgresql":
        return literal_column("extract(epoch from clock_timestamp())", Float)
    return literal_column("((julianday('now') - 2440587.5) * 86400.0)", Float)


class JobLeases:
    """Renewing and adopting jobs' leases; a base of :class:`~evaluator_host.store.jobs.repository.JobStore`, whose
    ``engine`` and ``owner`` it uses. ``lease_s``: how long a lease lasts (the service sets ``job_lease_s``)."""

    engine: Engine
    owner: str
    lease_s: float = DEFAULT_LEASE_S

    def _now(self) -> ColumnElement[float]:
        return database_now(self.engine)

    def lease_until(self) -> ColumnElement[float]:
        """A fresh lease's end, as an SQL expression (the database's clock + ``lease_s``)."""
        return self._now() + self.lease_s

    def _expired(self) -> ColumnElement[bool]:
        """An unfinished job that is not this owner's and whose lease ran out (or that has none)."""
        return and_(
            JobRow.status.in_(_UNFINISHED),
            or_(JobRow.owner.is_(None), JobRow.owner != self.owner),
            or_(JobRow.lease_until.is_(None), JobRow.lease_until < self._now()),
        )

    def renew_leases(self) -> int:
        """Extend the lease of every unfinished job of this owner; how many there are. A job adopted by
        another service meanwhile is not this owner's any more and is left alone."""
        query = (
            update(JobRow)
            .where(JobRow.owner == self.owner, JobRow.status.in_(_UNFINISHED))
            .values(lease_until=self.lease_until())
        )
        with self.engine.begin() as conn:
            return int(conn.execute(query).rowcount or 0)

    def adopt_expired(self, can_run: Callable[[str, bool], bool] = lambda _dataset, _target: True) -> list[JobRecord]:
        """Make the adoptable jobs (the module's contract) that ``can_run(dataset_id, has_target)`` says this
        service can run (it reads the dataset; it runs model-target jobs) this owner's, with a fresh lease;
        the jobs adopted, oldest first. Another is left for a service that can run it (or its owner, when it
        comes back)."""
        candidates = (
            select(JobRow.id, JobRow.owner, JobRow.dataset_id, JobRow.target)
            .where(self._expired())
            .order_by(JobRow.created_at)
            .limit(_ADOPT_AT_ONCE)
            .with_for_update(skip_locked=True)
        )
        with self.engine.begin() as conn:
            seen = [row for row in conn.execute(candidates) if can_run(row.dataset_id, row.target is not None)]
            adopted: list[str] = []
            for job_id, owner, _dataset, _target in seen:
                was: Any = JobRow.owner.is_(None) if owner is None else JobRow.owner == owner
                taken = conn.execute(
                    update(JobRow)
                    .where(JobRow.id == job_id, was, self._expired())
                    .values(owner=self.owner, lease_until=self.lease_until())
                ).rowcount
                if taken:
                    adopted.append(job_id)
            if not adopted:
                return []
            table = JobRow.__table__
            rows = conn.execute(select(table).where(table.c.id.in_(adopted)).order_by(table.c.created_at))
            return [job_record(row) for row in rows]
