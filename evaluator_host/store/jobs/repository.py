"""Datasets' metadata and jobs (their rows' results: :mod:`evaluator_host.store.jobs.results`).

Ownership: a job belongs to the service (``owner``: its data dir's id) that created, claimed or
adopted it, for as long as that service renews its lease (:mod:`evaluator_host.store.jobs.leases`: a
job whose lease ran out is adopted by another service sharing the database). The owner resumes it,
and a commit lands only while the job is still unfinished *and* the committer's — in the same
transaction as the rows, so a job cancelled or deleted (by any service sharing the database),
claimed or adopted elsewhere takes no more rows (``JobNotHeld``). Jobs from before owners existed
are claimed by the first service that resumes them (``FOR UPDATE SKIP LOCKED`` on PostgreSQL:
concurrent starters split them).
Every statement is portable SQL (SQLite and PostgreSQL).

Queued jobs (``EVALUATOR_HOST_QUEUE_URL``) are owned by ``<service id>/queue`` (worker hosts commit
for it: ``JobResults.commit_shared``). A service adopts its jobs of the other mode when it starts (a
queue turned on or off mid-job); from then on the other mode's commits are fenced off like another
service's.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.orm import Session

from evaluator_host.errors import NotFoundError
from evaluator_host.store.db import DatasetRow, JobRow, newest_first, utcnow
from evaluator_host.store.jobs.generations import GENERATIONS
from evaluator_host.store.jobs.leases import JobLeases
from evaluator_host.store.jobs.outcome import finished_fields
from evaluator_host.store.jobs.records import (
    GET_JOB,
    DatasetRecord,
    JobRecord,
    SharedCommit,
    StoredResult,
    dataset_record,
    job_record,
)
from evaluator_host.store.jobs.results import RESULTS, UNFINISHED, JobResults
from evaluator_host.store.online.rows import SinkDeliveryRow

__all__ = ["QUEUE_SUFFIX", "DatasetRecord", "JobRecord", "JobStore", "SharedCommit", "StoredResult"]

QUEUE_SUFFIX = "/queue"  # the owner of a service's queued jobs is its id with this suffix

RowT = TypeVar("RowT", "DatasetRow", "JobRow")


def _found(session: Session, table: type[RowT], key: str, what: str, workspace_id: str | None) -> RowT:
    """The row of ``table`` with primary key ``key`` (in ``workspace_id``, when given), or
    :class:`NotFoundError` naming ``what`` — the same answer for another workspace's row."""
    row = session.get(table, key)
    if row is None or (workspace_id is not None and row.workspace_id != workspace_id):
        raise NotFoundError(f"{what} {key!r} does not exist")
    return row


class JobStore(JobLeases, JobResults):
    """Short transactions over datasets and jobs, and (:class:`JobResults`) their results; call from a
    thread: they block.

    ``owner`` names the service these jobs run in (default: one of its own, for tests and tools);
    ``lease_s`` how long its hold on a job lasts unrenewed (:class:`JobLeases`).
    """

    # -- datasets ------------------------------------------------------------------------
    def add_dataset(self, record: DatasetRecord) -> None:
        """Store a dataset's metadata."""
        with Session(self.engine) as session, session.begin():
            session.add(DatasetRow(**dataclasses.asdict(record)))

    def jobs_of_dataset(self, dataset_id: str) -> list[str]:
        """Ids of the jobs that run on ``dataset_id``."""
        with Session(self.engine) as session:
            return list(session.scalars(select(JobRow.id).where(JobRow.dataset_id == dataset_id)))

    def delete_dataset(self, dataset_id: str) -> None:
        """Remove a dataset's metadata (only for datasets no job refers to)."""
        with Session(self.engine) as session, session.begin():
            row = session.get(DatasetRow, dataset_id)
            if row is not None:
                session.delete(row)

    def get_dataset(self, dataset_id: str, workspace_id: str | None = None) -> DatasetRecord:
        """One dataset (of ``workspace_id``; None: any, for the service's own use), or :class:`NotFoundError`."""
        with Session(self.engine) as session:
            return dataset_record(_found(session, DatasetRow, dataset_id, "dataset", workspace_id))

    def list_datasets(
        self, workspace_id: str, *, limit: int | None = None, before: tuple[datetime, str] | None = None
    ) -> list[DatasetRecord]:
        """Uploaded datasets (not jobs' inline rows) of ``workspace_id``, newest first (ties: greater id
        first); with ``before`` (a ``(created_at, id)``), only those after it in that order; at most
        ``limit`` (None: all) — read a page at a time in the database."""
        query = select(DatasetRow).where(DatasetRow.inline.is_(False), DatasetRow.workspace_id == workspace_id)
        with Session(self.engine) as session:
            return [
                dataset_record(r)
                for r in session.scalars(newest_first(query, DatasetRow.created_at, DatasetRow.id, limit, before))
            ]

    def dataset_bytes(self, workspace_id: str) -> int:
        """What the datasets of ``workspace_id`` (inline rows too) add up to."""
        with Session(self.engine) as session:
            total = session.scalar(select(func.sum(DatasetRow.bytes)).where(DatasetRow.workspace_id == workspace_id))
            return int(total or 0)

    # -- jobs ----------------------------------------------------------------------------
    def active_jobs(self, workspace_id: str) -> int:
        """Jobs of ``workspace_id`` queued or running."""
        with Session(self.engine) as session:
            query = select(func.count()).where(JobRow.workspace_id == workspace_id, JobRow.status.in_(UNFINISHED))
            return int(session.scalar(query) or 0)

    def create_job(self, **fields: Any) -> JobRecord:
        """Store a new job (``queued``), owned by this store's service, leased for ``lease_s``."""
        with Session(self.engine) as session, session.begin():
            row = JobRow(
                status="queued",
                done=0,
                failed=0,
                active_s=0.0,
                created_at=utcnow(),
                owner=self.owner,
                lease_until=self.lease_until(),
                **fields,
            )
            session.add(row)
            session.flush()
            session.refresh(row)  # the lease's end, as the database computed it
            return job_record(row)

    def get_job(self, job_id: str, workspace_id: str | None = None) -> JobRecord:
        """One job (of ``workspace_id``; None: any, for the service's own use), or :class:`NotFoundError`
        (the same for another workspace's). A Core query, not an ORM load: jobs are polled."""
        with self.engine.connect() as conn:
            row = conn.execute(GET_JOB, {"id": job_id}).one_or_none()
        if row is None or (workspace_id is not None and row.workspace_id != workspace_id):
            raise NotFoundError(f"job {job_id!r} does not exist")
        return job_record(row)

    def list_jobs(
        self,
        workspace_id: str | None,
        *,
        status: str | None = None,
        evaluator_id: str | None = None,
        limit: int | None = None,
        before: tuple[datetime, str] | None = None,
    ) -> list[JobRecord]:
        """Jobs of ``workspace_id`` (None: of every workspace, for the service's own use, e.g. the
        retention sweep), newest first (ties: greater id first), optionally filtered; with ``before`` (a
        ``(created_at, id)``), only those after it in that order; at most ``limit`` (None: all) — read a
        page at a time in the database."""
        query = select(JobRow)
        if workspace_id is not None:
            query = query.where(JobRow.workspace_id == workspace_id)
        if status is not None:
            query = query.where(JobRow.status == status)
        if evaluator_id is not None:
            query = query.where(JobRow.evaluator_id == evaluator_id)
        with Session(self.engine) as session:
            return [
                job_record(r) for r in session.scalars(newest_first(query, JobRow.created_at, JobRow.id, limit, before))
            ]

    def unfinished(self) -> list[JobRecord]:
        """This owner's jobs that are queued or were running when the service stopped, oldest first, their
        leases renewed (a job another service adopted meanwhile is not this owner's any more).

        Unfinished jobs without an owner (stored before owners existed) are claimed first; rows
        another starter has locked meanwhile are skipped (they are that starter's).
        """
        ownerless: Any = JobRow.owner.is_(None)
        if self.adopts is not None:
            ownerless = or_(ownerless, JobRow.owner == self.adopts)
        orphans = select(JobRow.id).where(JobRow.status.in_(UNFINISHED), ownerless).with_for_update(skip_locked=True)
        with Session(self.engine) as session, session.begin():
            session.execute(
                update(JobRow)
                .where(JobRow.id.in_(orphans.scalar_subquery()), ownerless)
                .values(owner=self.owner, lease_until=self.lease_until())
            )
        self.renew_leases()
        with Session(self.engine) as session:
            rows = session.scalars(
                select(JobRow)
                .where(JobRow.status.in_(UNFINISHED), JobRow.owner == self.owner)
                .order_by(JobRow.created_at)
            )
            return [job_record(r) for r in rows]

    def claim(self, job_id: str, **fields: Any) -> bool:
        """Mark a queued or running job ``running`` here (and set ``fields``), its lease renewed, atomically;
        False when it is finished, gone, or another service's."""
        query = (
            update(JobRow)
            .where(self._owned(job_id))
            .values(status="running", owner=self.owner, lease_until=self.lease_until(), **fields)
        )
        with self.engine.begin() as conn:
            return bool(conn.execute(query).rowcount)

    def set_job(
        self,
        job_id: str,
        *,
        only_unfinished: bool = False,
        only_held: bool = False,
        held_by: str | None = None,
        **fields: Any,
    ) -> bool:
        """Update fields; with ``only_unfinished`` only a queued/running job, with ``only_held`` only
        this owner's job, with ``held_by`` only that owner's (a worker host acting for it); False otherwise."""
        query = update(JobRow).where(JobRow.id == job_id)
        if only_unfinished:
            query = query.where(JobRow.status.in_(UNFINISHED))
        if only_held:
            query = query.where(self._mine())
        if held_by is not None:
            query = query.where(JobRow.owner == held_by)
        with self.engine.begin() as conn:
            return bool(conn.execute(query.values(**fields)).rowcount)

    def finish(self, job_id: str, **fields: Any) -> bool:
        """End a job whose rows are all stored, with ``fields`` (``active_s``, ...), when it is unfinished and
        this owner's: ``succeeded``, or ``failed`` (``AllRowsErrored``) when every row is an error
        (:mod:`evaluator_host.store.jobs.outcome`); False when it was not this owner's unfinished job."""
        with self.engine.begin() as conn:
            held = update(JobRow).where(self._owned(job_id)).values(done=JobRow.done)
            if not conn.execute(held).rowcount:  # the write lock first: no commit lands between the read and this
                return False
            job = conn.execute(select(JobRow.done, JobRow.failed, JobRow.total).where(JobRow.id == job_id)).one()
            ending = finished_fields(conn, job_id, job.done, job.failed, job.total)
            conn.execute(update(JobRow).where(JobRow.id == job_id).values(**ending, **fields))
            return True

    def delete_job(self, job_id: str) -> None:
        """Remove a job and every stored result (and generation) of it, in one transaction."""
        with self.engine.begin() as conn:
            conn.execute(delete(GENERATIONS).where(GENERATIONS.c.job_id == job_id))
            conn.execute(delete(RESULTS).where(RESULTS.c.job_id == job_id))
            sent = SinkDeliveryRow
            conn.execute(delete(sent).where(sent.source == "job", sent.rule_id == job_id))  # its sinks' deliveries
            conn.execute(delete(JobRow).where(JobRow.id == job_id))
