"""Workspace quotas: what a workspace may use at once, checked where it is used.

* ``max_evaluations_per_s``: a token bucket per workspace (it holds one second of the rate, at
  least 1 token; in the database on PostgreSQL, so every service on it shares the workspace's one bucket:
  :mod:`evaluator_host.store.rate_buckets`), charged one token per case that runs the workspace's code,
  whatever asked for it.
  Running cases takes a :class:`Charged` receipt, and only this module makes one:
  ``Bound.run`` (:mod:`evaluator_host.evaluation.bound`), the one function that hands cases to a
  worker, spends it before any case leaves, and refuses a run its receipt does not cover. So a route
  or loop that forgets the charge cannot run code (mypy: the argument has no default; at run time:
  :meth:`Charged.spend`). Three ways to get one:

  - :meth:`QuotaGuard.take_evaluations` — a call (``/v1/evaluate``, ``/v1/evaluators/{id}/evaluate``,
    the fixtures of a save, ``/v1/evaluators/{id}/test``, a revision compare, a migration's differential
    run, a replay): a call that would overdraw the bucket answers 429 with Retry-After = the seconds until
    it would fit (a call larger than the bucket can never fit: its 429 says so, and carries no Retry-After).
  - :meth:`QuotaGuard.pace_evaluations` — throughput (online rules, and backfills through them): as many
    of the cases as the bucket holds now, and the seconds until the rest may start; the caller runs the
    first and puts the rest back for later — delayed, never failed.
  - :func:`job_chunks` — a job's chunks: a job's rows are bounded by ``max_concurrent_jobs`` and the
    storage quota, not by this rate (the 429 above tells a caller to run large sets as a job).
* ``max_concurrent_jobs``: jobs queued or running; one more answers 429 (Retry-After 5).
* ``max_dataset_bytes``: the workspace's stored bytes: its datasets (uploads and jobs' inline rows)
  *and* its jobs' stored results (each job counts the UTF-8 bytes of the results it stored,
  ``jobs.result_bytes``, grown in the transaction that stores them). An upload is cut off as soon as
  its raw bytes exceed the room left, and refused after parsing when its stored bytes do; a new job
  is refused while the workspace is at or over the quota; a job's chunk commit is charged by
  :meth:`evaluator_host.store.jobs.repository.JobStore.commit_rows` / ``commit_shared`` (the embedded runner and
  queued worker hosts alike, one rule): of a chunk that would take the workspace past the quota only
  the leading rows that fit are stored (:func:`fitting`) and the job stops ``failed`` with
  :func:`storage_exceeded`'s error; a chunk of a workspace already at or over it stores nothing, and
  its job stops the same way. The rows a job stored are kept; deleting jobs or datasets frees their
  bytes. The embedded runner cuts its chunk before the commit (the aggregate is the runner's); its
  commit, if the room shrank meanwhile (another service), stores the whole chunk: past the quota by
  at most one chunk, then. A workspace's stored OTLP spans count too (their bodies' UTF-8 bytes,
  ``online_usage``): ``POST /v1/traces`` stores the leading spans that fit and answers 429 when none
  does (:mod:`evaluator_host.store.online.usage`); retention releases them.
* ``max_warm_workers``: enforced by the pool (:mod:`evaluator_host.sandbox.pool.leasing`): a workspace's
  keys hold at most that many workers; calls beyond wait for one of them (no 429). Warm workers are a
  service's own processes: the cap holds per service (N replicas: at most N times it, one pool each).
* ``max_concurrent_jobs`` and ``max_dataset_bytes`` are counted from the database: shared by every service.

Quotas are read from the cached workspace record: a ``PATCH`` is in force for the next call.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from evaluator_host.errors import EvaluatorHostError, QuotaExceeded

if TYPE_CHECKING:  # the store imports this module (storage_limit, storage_exceeded): no cycle through it
    from evaluator_host.store.rate_buckets import BucketState, RateBuckets
    from evaluator_host.tenancy.workspaces import Workspaces

T = TypeVar("T")

__all__ = ["STORAGE_QUOTA", "Charged", "QuotaGuard", "fitting", "job_chunks", "storage_exceeded", "storage_limit"]

STORAGE_QUOTA = "max_dataset_bytes"  # datasets, job results and spans: the workspace's stored bytes

_JOBS_RETRY_S = 5
_BYTES_RETRY_S = 60


def storage_limit(quotas: Mapping[str, Any] | None) -> int | None:
    """The storage quota (bytes) in a workspace's ``quotas``; None: unlimited."""
    value = (quotas or {}).get(STORAGE_QUOTA)
    return None if value is None else int(value)


def storage_exceeded(workspace_id: str, limit: int, used: int, *, stored: int) -> QuotaExceeded:
    """The error that stops a job at the storage quota: ``used`` bytes (datasets, job results and spans, this
    commit's included) of ``limit``; ``stored``, the rows the job keeps."""
    return QuotaExceeded(
        f"workspace {workspace_id}'s stored data ({used:,} bytes: datasets, job results and spans) leaves no room "
        f"for this job's next results under its {STORAGE_QUOTA} quota of {limit:,} bytes; the job stopped "
        f"with the {stored:,} rows it stored (kept). Delete jobs or datasets to make room",
        quota=STORAGE_QUOTA,
        retry_after_s=_BYTES_RETRY_S,
    )


def fitting(texts: Sequence[str], room: int) -> tuple[int, int]:
    """How many leading results of ``texts`` fit in ``room`` bytes (UTF-8), and their bytes."""
    used = 0
    for count, text in enumerate(texts):
        size = len(text.encode())
        if used + size > room:
            return count, used
        used += size
    return len(texts), used


_MINT = object()  # only this module makes receipts


class Charged:
    """A receipt for ``cases`` evaluations of ``workspace`` charged to its ``max_evaluations_per_s``
    (``cases`` None: a job's chunks, unmetered: :func:`job_chunks`). Made here only; spent by the runs
    that use it (:meth:`spend`): a receipt of 10 covers runs of 10 cases in all, once."""

    __slots__ = ("_left", "workspace")

    def __init__(self, workspace: str, cases: int | None, *, _mint: object = None) -> None:
        if _mint is not _MINT:
            raise TypeError("evaluations are charged by QuotaGuard (evaluator_host.tenancy.quotas), nowhere else")
        self.workspace = workspace
        self._left = cases

    @property
    def cases(self) -> int | None:
        """Cases this receipt still covers (None: unmetered)."""
        return self._left

    def spend(self, workspace: str, cases: int) -> None:
        """Use ``cases`` of this receipt for a run in ``workspace``; an ``EvaluatorHostError`` (500: a bug,
        never the caller's) for a run of another workspace or of more cases than are left uncharged."""
        if workspace != self.workspace:
            raise EvaluatorHostError(f"a run in workspace {workspace} offered a receipt of {self.workspace}")
        if self._left is None:
            return
        if cases > self._left:
            raise EvaluatorHostError(f"a run of {cases} cases was charged {self._left}: uncharged code never runs")
        self._left -= cases


def job_chunks(workspace: str) -> Charged:
    """The receipt of a job's chunks in ``workspace``: unmetered by the rate (a job is bounded by
    ``max_concurrent_jobs`` and the storage quota); only the job executor takes one (tests/unit/test_use_cases.py)."""
    return Charged(workspace, None, _mint=_MINT)


@dataclass
class _Bucket:
    rate: float
    tokens: float
    at: float
    booked: float = 0.0  # when the last batch of paced evaluations put off is due to run (the bucket's clock)


class _Bucketed(Protocol):
    rate: float
    tokens: float
    at: float
    booked: float


def _refill(bucket: _Bucketed, now: float) -> None:
    """Refill ``bucket`` to ``now`` (one second of the rate, at least 1 token, at most)."""
    bucket.tokens = min(max(bucket.rate, 1.0), bucket.tokens + max(0.0, now - bucket.at) * bucket.rate)
    bucket.at = max(bucket.at, now)


def _take(bucket: _Bucketed, workspace_id: str, cases: int) -> Charged:
    """Take ``cases`` tokens from a refilled ``bucket``, or raise the call's 429."""
    rate, capacity = bucket.rate, max(bucket.rate, 1.0)
    if cases > capacity:
        raise QuotaExceeded(
            f"{cases} cases in one call exceed this workspace's max_evaluations_per_s={rate:g}; "
            "send fewer per call or run them as a job",
            quota="max_evaluations_per_s",
            retry_after_s=None,  # waiting never makes this call fit: no Retry-After
        )
    if bucket.tokens < cases:
        wait = (cases - bucket.tokens) / rate
        raise QuotaExceeded(
            f"this workspace's max_evaluations_per_s={rate:g} is used up; retry in {wait:.2f} s",
            quota="max_evaluations_per_s",
            retry_after_s=max(1, math.ceil(wait)),
        )
    bucket.tokens -= cases
    return Charged(workspace_id, cases, _mint=_MINT)


def _pace(bucket: _Bucketed, workspace_id: str, cases: int) -> tuple[Charged, list[float]]:
    """:meth:`QuotaGuard.pace_evaluations` on a refilled ``bucket``."""
    now_ = min(cases, math.floor(bucket.tokens))
    bucket.tokens -= now_
    rest = cases - now_
    if not rest:
        return Charged(workspace_id, now_, _mint=_MINT), []
    per = max(1, math.floor(max(bucket.rate, 1.0)))  # rows a bucket holds
    step = per / bucket.rate
    first = max(bucket.at + max(0.0, per - bucket.tokens) / bucket.rate, bucket.booked + step)
    due = [first + (i // per) * step - bucket.at for i in range(rest)]
    bucket.booked = bucket.at + due[-1]
    return Charged(workspace_id, now_, _mint=_MINT), due


class QuotaGuard:
    """Checks the quotas of :mod:`evaluator_host.tenancy.quotas` (one per service).

    ``shared``: the database's buckets (:mod:`evaluator_host.store.rate_buckets`; the service passes them on
    PostgreSQL), so services on one database share each workspace's ``max_evaluations_per_s`` — one
    transaction per charge of a workspace with a rate quota, none for the others. None (SQLite: the embedded
    single service): the buckets live in this object's memory, on the monotonic clock."""

    def __init__(self, workspaces: Workspaces, shared: RateBuckets | None = None) -> None:
        self.workspaces = workspaces
        self.shared = shared
        self._buckets: dict[str, _Bucket] = {}

    def _limit(self, workspace_id: str, name: str) -> float | None:
        value = self.workspaces.get(workspace_id).quotas.get(name)
        return None if value is None else float(value)

    def _bucket(self, workspace_id: str, rate: float) -> _Bucket:
        """``workspace_id``'s in-memory bucket at ``rate``, refilled to now."""
        now = time.monotonic()
        bucket = self._buckets.get(workspace_id)
        if bucket is None or bucket.rate != rate:
            bucket = self._buckets[workspace_id] = _Bucket(rate, max(rate, 1.0), now)
        _refill(bucket, now)
        return bucket

    def _charge(self, workspace_id: str, rate: float, change: Callable[[_Bucketed], T]) -> T:
        """``change`` on ``workspace_id``'s bucket at ``rate``, refilled to now: the shared one under its lock
        (written back unless ``change`` raises) or the in-memory one."""
        if self.shared is None:
            return change(self._bucket(workspace_id, rate))

        def refilled(bucket: BucketState, now: float) -> T:
            _refill(bucket, now)
            return change(bucket)

        return self.shared.update(workspace_id, rate, refilled)

    def take_evaluations(self, workspace_id: str, cases: int) -> Charged:
        """Charge ``cases`` evaluations to ``workspace_id`` (a call): the receipt its runs spend;
        ``QuotaExceeded`` (429) when over its rate."""
        rate = self._limit(workspace_id, "max_evaluations_per_s")
        if rate is None:
            return Charged(workspace_id, cases, _mint=_MINT)
        return self._charge(workspace_id, rate, lambda bucket: _take(bucket, workspace_id, cases))

    def pace_evaluations(self, workspace_id: str, cases: int) -> tuple[Charged, list[float]]:
        """Charge as many of ``cases`` as ``workspace_id``'s bucket holds now (throughput: online rules):
        the receipt for those (its :attr:`Charged.cases`, possibly 0), and for each of the rest, in order,
        the seconds after which to try it again. Never raises: the rest waits.

        The rest is put off a bucketful at a time, each batch due when the refill has room for it after
        the batches put off before it (``booked``), so a backlog comes back spread at the rate — not all at
        once, to be put off again — and a workspace's paced rows are tried about once or twice each."""
        rate = self._limit(workspace_id, "max_evaluations_per_s")
        if rate is None:
            return Charged(workspace_id, cases, _mint=_MINT), []
        return self._charge(workspace_id, rate, lambda bucket: _pace(bucket, workspace_id, cases))

    def check_jobs(self, workspace_id: str, active: int) -> None:
        """``QuotaExceeded`` when ``active`` jobs (queued or running) leave no room for one more."""
        limit = self._limit(workspace_id, "max_concurrent_jobs")
        if limit is not None and active >= limit:
            raise QuotaExceeded(
                f"this workspace has {active} job{'' if active == 1 else 's'} queued or running; its "
                f"max_concurrent_jobs is {limit:g} "
                "(retry when one finishes, or cancel one)",
                quota="max_concurrent_jobs",
                retry_after_s=_JOBS_RETRY_S,
            )

    def dataset_room(self, workspace_id: str, used: int) -> int | None:
        """Bytes ``workspace_id`` may still store (None: unlimited), given ``used`` (all it stores)."""
        limit = self._limit(workspace_id, STORAGE_QUOTA)
        return None if limit is None else max(0, int(limit) - used)

    def storage_limited(self, workspace_id: str) -> bool:
        """Whether ``workspace_id`` has a storage quota (else its usage need not be read)."""
        return self._limit(workspace_id, STORAGE_QUOTA) is not None

    def storage_quota(self, workspace_id: str) -> int | None:
        """``workspace_id``'s storage quota in bytes (None: unlimited)."""
        limit = self._limit(workspace_id, STORAGE_QUOTA)
        return None if limit is None else int(limit)

    def check_storage(self, workspace_id: str, used: int) -> None:
        """``QuotaExceeded`` when ``used`` stored bytes (datasets, job results and spans) leave no room: no new job."""
        limit = self._limit(workspace_id, STORAGE_QUOTA)
        if limit is not None and used >= limit:
            raise QuotaExceeded(
                f"workspace {workspace_id} stores {used:,} bytes (datasets, job results and spans), at or over its "
                f"{STORAGE_QUOTA} quota of {int(limit):,} bytes: no new job until jobs or datasets are deleted",
                quota=STORAGE_QUOTA,
                retry_after_s=_BYTES_RETRY_S,
            )

    @staticmethod
    def over_dataset_bytes(workspace_id: str, size: int, room: int) -> QuotaExceeded:
        """The error for a dataset of ``size`` bytes where ``room`` are left."""
        return QuotaExceeded(
            f"this dataset ({size:,} bytes so far) does not fit in the {room:,} bytes left of workspace "
            f"{workspace_id}'s {STORAGE_QUOTA} (datasets, job results and spans count; delete jobs or datasets "
            "to make room)",
            quota=STORAGE_QUOTA,
            retry_after_s=_BYTES_RETRY_S,
        )
