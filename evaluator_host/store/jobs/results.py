"""A job's row results: the two commits (with the storage quota's rule) and reading results back.

The resume invariant lives here: :meth:`JobResults.commit_rows` inserts a chunk's results
and sets the job's ``done``/``failed`` counters and aggregate state in ONE transaction,
and ``(job_id, idx)`` is the results' primary key. After a crash the stored counters
always equal the stored rows, and a row can never be stored twice. A commit lands only while the
job is still unfinished *and* the committer's (the ownership rule of :mod:`evaluator_host.store.jobs.repository`),
in the same transaction as the rows (``JobNotHeld`` otherwise).

Storage quota: both commits charge the workspace's storage quota (``max_dataset_bytes``: datasets and
job results, see :mod:`evaluator_host.tenancy.quotas`) in the same transaction, by one rule
(:meth:`JobResults._charge`): the job's ``result_bytes`` grow by the UTF-8 bytes of the results stored;
a chunk that takes the workspace past the quota is stored only as far as it fits (``commit_shared``: the
leading rows that fit; ``commit_rows``, whose counters the runner computed for the whole chunk: all of
it — the runner cuts its chunk to the room before, so this is the backstop for a room that shrank
meanwhile) and the job is marked ``failed`` (``QuotaExceeded``) with it; a chunk of a workspace already
at or over the quota stores nothing and the job is marked the same way. The committer then gets the
:class:`QuotaExceeded`. On PostgreSQL the workspace's row is locked for the check, so concurrent commits
of one workspace take turns.

Queued jobs (``EVALUATOR_HOST_QUEUE_URL``) are owned by ``<service id>/queue``: worker hosts
commit their chunks on the owner's behalf with :meth:`JobResults.commit_shared`, which is idempotent
(a row already stored is skipped and not counted) and adds to the counters and the aggregate
instead of setting them, under the job row's lock, so redelivered and concurrent chunks count each
row once. Every statement is portable SQL (SQLite and PostgreSQL).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any

from sqlalchemy import Table, and_, func, insert, or_, select, update
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Connection, Engine

from evaluator_host.errors import JobNotHeld, QuotaExceeded
from evaluator_host.evaluation.outcomes.aggregate import Accumulator, Scored
from evaluator_host.store import sqlite_bulk
from evaluator_host.store.db import DatasetRow, JobResultRow, JobRow, WorkspaceRow, utcnow
from evaluator_host.store.jobs.leases import DEFAULT_LEASE_S
from evaluator_host.store.jobs.outcome import finished_fields
from evaluator_host.store.jobs.records import SharedCommit, StoredResult
from evaluator_host.store.jobs.refusals import fenced, not_held, uncommitted
from evaluator_host.store.online.rows import OnlineUsageRow
from evaluator_host.store.pg_sessions import idle_bound
from evaluator_host.tenancy.quotas import fitting, storage_exceeded, storage_limit

__all__ = ["RESULTS", "UNFINISHED", "JobResults", "storage_used"]

RESULTS: Table = JobResultRow.__table__  # type: ignore[assignment]
UNFINISHED = ("queued", "running")
_RESULT_COLUMNS = ("job_id", "idx", "status", "revision", "runtime_id", "result")
_PG_INSERT_NEW = (
    "INSERT INTO job_results (job_id, idx, status, revision, runtime_id, result, worker) "
    "SELECT %s, u.idx, u.status, %s, %s, u.result, %s "
    "FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS u(idx, status, result) "
    "ON CONFLICT (job_id, idx) DO NOTHING RETURNING idx"
)
# a chunk's rows as one statement over six arrays (no executemany: its pipeline would leave a frozen
# committer's session holding the job's row, store/pg_sessions.py); a row stored before: IntegrityError
_PG_INSERT = (
    "INSERT INTO job_results (job_id, idx, status, revision, runtime_id, result) "
    "SELECT * FROM unnest(%s::text[], %s::bigint[], %s::text[], %s::integer[], %s::text[], %s::text[])"
)


def _utf8_bytes(texts: Iterable[str]) -> int:
    """What ``texts`` take stored (UTF-8)."""
    return len("".join(texts).encode())


def _stopped(error: QuotaExceeded) -> dict[str, Any]:
    """A job's fields once the storage quota stopped it."""
    return {
        "status": "failed",
        "error": {"type": error.type_name, "message": error.message, "quota": error.quota},
        "finished_at": utcnow(),
    }


def storage_used(conn: Connection, workspace_id: str, *, lock: bool = False) -> int:
    """What ``workspace_id`` stores: its datasets (inline rows too), its jobs' stored results and its
    stored spans (``online_usage``, issue 47.5). ``lock``: its workspace row locked first (PostgreSQL:
    writers of one workspace's storage take turns)."""
    if lock:
        conn.execute(select(WorkspaceRow.id).where(WorkspaceRow.id == workspace_id).with_for_update())
    datasets = conn.execute(
        select(func.coalesce(func.sum(DatasetRow.bytes), 0)).where(DatasetRow.workspace_id == workspace_id)
    ).scalar_one()
    results = conn.execute(
        select(func.coalesce(func.sum(JobRow.result_bytes), 0)).where(JobRow.workspace_id == workspace_id)
    ).scalar_one()
    spans = conn.execute(select(OnlineUsageRow.bytes).where(OnlineUsageRow.workspace_id == workspace_id)).scalar()
    return int(datasets) + int(results) + int(spans or 0)


class JobResults:
    """Short transactions over jobs' results (call from a thread: they block); the base of
    :class:`~evaluator_host.store.jobs.repository.JobStore`, which adds datasets and jobs.

    ``owner`` names the service these jobs run in (default: one of its own, for tests and tools);
    ``lease_s`` bounds how long a chunk's commit (:meth:`commit_rows`) may idle on PostgreSQL
    (:func:`~evaluator_host.store.pg_sessions.idle_bound`: a frozen owner frees the job's row for the adoption
    as its lease runs out, not a minute later).
    """

    lease_s: float = DEFAULT_LEASE_S

    def __init__(self, engine: Engine, owner: str | None = None, *, adopts: str | None = None) -> None:
        self.engine = engine
        self.owner = owner or f"store-{uuid.uuid4().hex[:16]}"
        self.adopts = adopts  # another owner whose unfinished jobs this one takes over when it resumes
        self._pg = engine.dialect.name == "postgresql"
        self._sqlite = engine.dialect.name == "sqlite" and engine.dialect.paramstyle == "qmark"

    def _mine(self) -> Any:
        return or_(JobRow.owner == self.owner, JobRow.owner.is_(None))

    def _owned(self, job_id: str) -> Any:
        """The condition of a job this owner may write to: unfinished and its own (or nobody's)."""
        return and_(JobRow.id == job_id, JobRow.status.in_(UNFINISHED), self._mine())

    def storage_bytes(self, workspace_id: str) -> int:
        """What ``workspace_id`` stores: its datasets (inline rows too), its jobs' stored results, its spans."""
        with self.engine.connect() as conn:
            return self._storage_used(conn, workspace_id)

    @staticmethod
    def _storage_used(conn: Connection, workspace_id: str) -> int:
        return storage_used(conn, workspace_id)

    @staticmethod
    def _quota(conn: Connection, workspace_id: str) -> tuple[int, int] | None:
        """``(limit, used)`` of ``workspace_id``'s storage quota, in the committing transaction (on
        PostgreSQL, when it has one, its workspace row locked: commits of one workspace take turns);
        None: no quota (and no lock: commits of a workspace without one never wait for each other)."""
        query = select(WorkspaceRow.quotas).where(WorkspaceRow.id == workspace_id)
        if storage_limit(conn.execute(query).scalar_one_or_none()) is None:
            return None
        limit = storage_limit(conn.execute(query.with_for_update()).scalar_one_or_none())  # as of the lock
        return None if limit is None else (limit, JobResults._storage_used(conn, workspace_id))

    @staticmethod
    def _charge(
        workspace_id: str, quota: tuple[int, int] | None, texts: Sequence[str], before: int, *, partial: bool
    ) -> tuple[int, dict[str, Any], QuotaExceeded | None]:
        """The storage quota's rule (the module docstring's) for a chunk of results ``texts`` of a job that
        stored ``before`` rows: (how many leading rows to store, the job's fields to set beside its
        counters, the error to raise once committed). ``partial``: the rows that fit may be stored alone
        (else a chunk that crosses the quota is stored whole: the caller's counters cover it all)."""
        adding = _utf8_bytes(texts)
        if quota is None or quota[1] + adding <= quota[0]:
            return len(texts), {"result_bytes": JobRow.result_bytes + adding}, None
        limit, used = quota
        if used >= limit:  # already at or over it (another job took the room): nothing of this chunk
            keep, kept = 0, 0
        elif partial:
            keep, kept = fitting(texts, limit - used)
        else:
            keep, kept = len(texts), adding
        error = storage_exceeded(workspace_id, limit, used + kept, stored=before + keep)
        return keep, {"result_bytes": JobRow.result_bytes + kept, **_stopped(error)}, error

    def commit_rows(
        self,
        job_id: str,
        rows: Sequence[tuple[str, int, str, int, str, str]],
        *,
        done: int,
        failed: int,
        acc_state: dict[str, Any],
        active_s: float,
        workspace_id: str | None = None,
        cached: int | None = None,
    ) -> None:
        """Insert ``rows`` (job_id, idx, status, revision, runtime_id, result) and the counters, atomically.

        Lands only while the job is unfinished and this owner's; otherwise nothing is stored and
        :class:`JobNotHeld` is raised — also when the transaction fails in the database (a session the
        server ended while this service was frozen, a lost connection) and the job, read afresh, is no
        longer this owner's: the refusal, whichever way it came; a job still held whose connection was lost
        before the ``COMMIT`` is committed once more (:mod:`~evaluator_host.store.jobs.refusals`).
        A row stored before (same ``(job_id, idx)``) or a job that does not exist is an ``IntegrityError``,
        and nothing of the chunk is stored either.
        The job's ``result_bytes`` grow by the rows' bytes, charged to ``workspace_id``'s storage quota
        (the module docstring's rule; None: the job's own workspace, read here): past it the job is
        marked failed in this transaction and :class:`QuotaExceeded` is raised once it is committed.
        ``cached``: the job's rows answered from the result cache so far (set with the counters; None: left).
        The rows go to the driver directly (no per-row SQL compilation): on PostgreSQL as one statement
        over arrays, on SQLite as multi-row ``INSERT`` statements (:func:`~evaluator_host.store.sqlite_bulk.insert`)
        (``executemany`` releases and takes back the GIL around every row's step, which stalls the event
        loop's thread at each hand-over).
        """

        def write() -> QuotaExceeded | None:
            nonlocal workspace_id
            with self.engine.begin() as conn, uncommitted():  # (a COMMIT's own failure: not wrapped)
                idle_bound(conn, self.lease_s)
                if workspace_id is None:
                    workspace_id = conn.execute(select(JobRow.workspace_id).where(JobRow.id == job_id)).scalar() or ""
                quota = self._quota(conn, workspace_id)
                keep, values, over = self._charge(
                    workspace_id, quota, [row[5] for row in rows], done - len(rows), partial=False
                )
                store = keep > 0 or not rows
                if rows and store:
                    if self._sqlite:
                        self._insert_sqlite(conn, rows)
                    elif self._pg:
                        conn.exec_driver_sql(_PG_INSERT, tuple(list(column) for column in zip(*rows, strict=True)))
                    else:
                        conn.execute(insert(RESULTS), [dict(zip(_RESULT_COLUMNS, row, strict=True)) for row in rows])
                counters = {"done": done, "failed": failed, "acc_state": acc_state} if store else {}
                if store and cached is not None:  # rows of ``done`` answered from the result cache
                    counters["cached"] = cached
                held = conn.execute(
                    update(JobRow).where(self._owned(job_id)).values(**counters, active_s=active_s, **values)
                ).rowcount
                if not held:
                    raise JobNotHeld(not_held(job_id, "its rows were not stored"))
            return over

        over = fenced(job_id, write, lambda: self._holds(job_id))
        if over is not None:
            raise over

    def _holds(self, job_id: str) -> bool:
        """Whether ``job_id`` is unfinished and this owner's (read afresh)."""
        query = select(JobRow.id).where(self._owned(job_id))
        with self.engine.connect() as conn:
            return conn.execute(query).first() is not None

    def commit_shared(
        self,
        job_id: str,
        owner: str,
        rows: Sequence[tuple[int, str, str, Scored]],
        *,
        revision: int,
        runtime_id: str,
        worker: str,
        cached: Collection[int] = (),
    ) -> SharedCommit:
        """Store a queued chunk's rows ``(idx, status, result JSON, scored)`` for ``owner``, idempotently
        (``cached``: the indices answered from the result cache; the job's ``cached`` grows by those inserted).

        In one transaction: the job row is locked while it is unfinished and ``owner``'s (else
        :class:`JobNotHeld`, nothing stored); rows whose ``(job_id, idx)`` is stored already are
        skipped (``ON CONFLICT DO NOTHING``); ``done``/``failed`` grow by the rows actually inserted
        and their aggregate is merged into the job's; the commit that stores the last row marks the
        job ``succeeded`` (``failed``, ``AllRowsErrored``, when every row is an error: ``job_outcome``).
        A chunk delivered twice, or two hosts committing at once, count each row once.
        The rows' bytes are charged to the workspace's storage quota (the module docstring's rule): past
        it the job is marked failed here and :class:`QuotaExceeded` is raised once committed.
        """
        with self.engine.begin() as conn:
            # the write lock first (PostgreSQL: the job row; SQLite: the database), so concurrent
            # committers of one job take turns on the read-modify-write of its counters below
            held = conn.execute(
                update(JobRow)
                .where(JobRow.id == job_id, JobRow.status.in_(UNFINISHED), JobRow.owner == owner)
                .values(done=JobRow.done)
            ).rowcount
            if not held:
                raise JobNotHeld(f"job {job_id!r} is finished, deleted or not {owner!r}'s: its rows were not stored")
            job = conn.execute(
                select(JobRow.done, JobRow.failed, JobRow.total, JobRow.acc_state, JobRow.workspace_id).where(
                    JobRow.id == job_id
                )
            ).one()
            # the rows new to the store (the job's row lock keeps other committers of it out meanwhile)
            stored = self._stored_in(conn, job_id, [idx for idx, _, _, _ in rows])
            new = [row for row in rows if row[0] not in stored]
            quota = self._quota(conn, job.workspace_id)
            keep, charged, over = self._charge(
                job.workspace_id, quota, [text for _, _, text, _ in new], job.done, partial=True
            )
            inserted = self._insert_new(conn, job_id, new[:keep], revision, runtime_id, worker)
            if len(inserted) != keep:  # what landed is what is counted (the lock makes them the same)
                charged["result_bytes"] = JobRow.result_bytes + _utf8_bytes(
                    text for idx, _, text, _ in new if idx in inserted
                )
            fresh = Accumulator()
            landed = [(status, scored) for idx, status, _, scored in rows if idx in inserted]
            fresh.add_all(scored for _, scored in landed)
            failed = sum(1 for status, _ in landed if status != "ok")
            done = job.done + len(inserted)
            values: dict[str, Any] = {"done": done, "failed": job.failed + failed, **charged}
            if cached and (hit := len(inserted.intersection(cached))):
                values["cached"] = JobRow.cached + hit
            if inserted:
                acc = Accumulator.restore(job.acc_state)
                acc.merge(fresh)
                values["acc_state"] = acc.state()
            finished = done >= job.total and over is None
            if finished:
                values.update(finished_fields(conn, job_id, done, values["failed"], job.total))
            conn.execute(update(JobRow).where(JobRow.id == job_id).values(**values))
        if over is not None:
            raise over
        return SharedCommit(len(inserted), done, values["failed"], job.total, finished)

    @staticmethod
    def _insert_new(
        conn: Connection,
        job_id: str,
        rows: Sequence[tuple[int, str, str, Scored]],
        revision: int,
        runtime_id: str,
        worker: str,
    ) -> set[int]:
        """Insert the rows not stored yet; the indices inserted."""
        if not rows:
            return set()
        if conn.dialect.name == "postgresql":
            # one statement over three arrays: the driver sends them as parameters, nothing is
            # compiled or split per row (what executemany with RETURNING would cost)
            found = conn.exec_driver_sql(
                _PG_INSERT_NEW,
                (
                    job_id,
                    revision,
                    runtime_id,
                    worker,
                    [idx for idx, _, _, _ in rows],
                    [status for _, status, _, _ in rows],
                    [text for _, _, text, _ in rows],
                ),
            )
            return {idx for (idx,) in found}
        values = [
            {
                "job_id": job_id,
                "idx": idx,
                "status": status,
                "revision": revision,
                "runtime_id": runtime_id,
                "result": text,
                "worker": worker,
            }
            for idx, status, text, _ in rows
        ]
        query = sqlite.insert(RESULTS).on_conflict_do_nothing(index_elements=["job_id", "idx"]).returning(RESULTS.c.idx)
        return set(conn.execute(query, values).scalars())

    def stored_among(self, job_id: str, indices: Sequence[int]) -> set[int]:
        """Which of ``indices`` have a stored result (one range query)."""
        with self.engine.connect() as conn:
            return self._stored_in(conn, job_id, indices)

    @staticmethod
    def _stored_in(conn: Connection, job_id: str, indices: Sequence[int]) -> set[int]:
        if not indices:
            return set()
        query = select(RESULTS.c.idx).where(
            RESULTS.c.job_id == job_id, RESULTS.c.idx >= min(indices), RESULTS.c.idx <= max(indices)
        )
        return set(conn.execute(query).scalars()) & set(indices)

    def _insert_sqlite(self, conn: Connection, rows: Sequence[tuple[str, int, str, int, str, str]]) -> None:
        sqlite_bulk.insert(conn, "job_results", _RESULT_COLUMNS, rows)

    def done_indices(self, job_id: str) -> Iterator[int]:
        """Indices of the rows that have a result, ascending."""
        with self.engine.connect() as conn:
            result = conn.execute(select(RESULTS.c.idx).where(RESULTS.c.job_id == job_id).order_by(RESULTS.c.idx))
            for (idx,) in result:
                yield idx

    def results(self, job_id: str, start: int, limit: int) -> list[StoredResult]:
        """Up to ``limit`` results with ``idx >= start``, in index order."""
        query = (
            select(RESULTS.c.idx, RESULTS.c.revision, RESULTS.c.runtime_id, RESULTS.c.result, RESULTS.c.worker)
            .where(RESULTS.c.job_id == job_id, RESULTS.c.idx >= start)
            .order_by(RESULTS.c.idx)
            .limit(limit)
        )
        with self.engine.connect() as conn:
            return [StoredResult(*row) for row in conn.execute(query)]
