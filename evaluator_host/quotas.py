"""Workspace quotas: what a workspace may use at once, checked where it is used.

* ``max_evaluations_per_s``: a token bucket per workspace (it holds one second of the rate, at
  least 1 token), charged one token per case of ``/v1/evaluate`` and
  ``/v1/evaluators/{id}/evaluate``; a call that would overdraw it answers 429 with Retry-After =
  the seconds until it would fit (a call larger than the bucket can never fit: its 429 says so, and carries
  no Retry-After).
* ``max_concurrent_jobs``: jobs queued or running; one more answers 429 (Retry-After 5).
* ``max_dataset_bytes``: stored dataset bytes (uploads and jobs' inline rows); an upload is cut off
  as soon as its raw bytes exceed the room left, and refused after parsing when its stored bytes do.
* ``max_warm_workers``: enforced by the pool (:mod:`evaluator_host.sandbox.leasing`): a workspace's
  keys hold at most that many workers; calls beyond wait for one of them (no 429).

Quotas are read from the cached workspace record: a ``PATCH`` is in force for the next call.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from evaluator_host.errors import QuotaExceeded
from evaluator_host.workspaces import Workspaces

__all__ = ["QuotaGuard"]

_JOBS_RETRY_S = 5
_BYTES_RETRY_S = 60


@dataclass
class _Bucket:
    rate: float
    tokens: float
    at: float


class QuotaGuard:
    """Checks the quotas of :mod:`evaluator_host.quotas` (one per service)."""

    def __init__(self, workspaces: Workspaces) -> None:
        self.workspaces = workspaces
        self._buckets: dict[str, _Bucket] = {}

    def _limit(self, workspace_id: str, name: str) -> float | None:
        value = self.workspaces.get(workspace_id).quotas.get(name)
        return None if value is None else float(value)

    def take_evaluations(self, workspace_id: str, cases: int) -> None:
        """Charge ``cases`` evaluations to ``workspace_id``; ``QuotaExceeded`` when over its rate."""
        rate = self._limit(workspace_id, "max_evaluations_per_s")
        if rate is None:
            return
        now = time.monotonic()
        capacity = max(rate, 1.0)
        bucket = self._buckets.get(workspace_id)
        if bucket is None or bucket.rate != rate:
            bucket = self._buckets[workspace_id] = _Bucket(rate, capacity, now)
        bucket.tokens = min(capacity, bucket.tokens + (now - bucket.at) * rate)
        bucket.at = now
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
        """Bytes of datasets ``workspace_id`` may still store (None: unlimited), given ``used``."""
        limit = self._limit(workspace_id, "max_dataset_bytes")
        return None if limit is None else max(0, int(limit) - used)

    @staticmethod
    def over_dataset_bytes(workspace_id: str, size: int, room: int) -> QuotaExceeded:
        """The error for a dataset of ``size`` bytes where ``room`` are left."""
        return QuotaExceeded(
            f"this dataset ({size:,} bytes so far) does not fit in the {room:,} bytes left of workspace "
            f"{workspace_id}'s max_dataset_bytes (delete datasets to make room)",
            quota="max_dataset_bytes",
            retry_after_s=_BYTES_RETRY_S,
        )
