"""A running job's progress, kept in memory by the service that runs it (``JobRunner``).

* :class:`Live`: the job as claimed, with its committed counters and aggregate (what reads of a
  running job answer from, without the database), its running time and whether it is being cancelled;
* :class:`Sizer`: chunk sizes that take about ``job_chunk_s`` each, from the observed time per row
  (the first chunk is small, so the first committed row comes early);
* :func:`bitmap`: which rows already have a stored result (a resumed job skips them);
* :func:`pending_chunks`: the rows without one, in chunks of the sizer's size, read as needed;
* :func:`job_view`: the API's :class:`Job` of a stored job, with a running job's live progress.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from evaluator_host.evaluation.outcomes.aggregate import Accumulator
from evaluator_host.jobs.datasets.mapping import RowMapper
from evaluator_host.jobs.models import FieldMapping, Job, JobProgress
from evaluator_host.sandbox.protocol import WireCase
from evaluator_host.store.jobs.repository import JobRecord

__all__ = ["FIRST_CHUNK", "Live", "Sizer", "bitmap", "job_view", "pending_chunks"]

FIRST_CHUNK = 32
ASYNC_ROUNDS = 4  # an async evaluator's smallest chunk: this many times its in-flight rows (Sizer.for_evaluator)


@dataclass
class Live:
    """A running job's committed progress, kept in memory for fast reads (with the job as it runs)."""

    record: JobRecord
    done: int
    failed: int
    acc: Accumulator
    active_s: float  # running time before this run
    started: float = field(default_factory=time.monotonic)
    cancelling: bool = False
    stored_bytes: int = 0  # result bytes this run of the job has stored (a bound, not a bill)
    cached: int = 0  # committed rows answered from the result cache

    def active(self) -> float:
        return self.active_s + (time.monotonic() - self.started)


class Sizer:
    """Chunk sizes that take about ``target_s`` each, from the observed time per row: a faster sample
    is taken at once (a job's first chunks pay for binding and warming the worker, and a small chunk
    for its fixed costs: averaging them in kept chunks small for several more), a slower one is
    averaged in. ``min_rows``: no chunk is smaller (an async evaluator's: several rounds of its in-flight
    rows, or its worker would idle while a chunk's last rows finish)."""

    @classmethod
    def for_evaluator(cls, target_s: float, max_rows: int, in_flight: int) -> Sizer:
        """The sizer of a job's scoring lanes (jobs/running/lanes.py, and a model target's:
        jobs/running/targeted.py), the one place of the rule: an async evaluator's (``in_flight`` > 1) chunks are
        at least :data:`ASYNC_ROUNDS` × ``in_flight`` rows (within ``max_rows``), a sync one's as the time per row
        says."""
        return cls(target_s, max_rows, ASYNC_ROUNDS * in_flight if in_flight > 1 else 1)

    def __init__(self, target_s: float, max_rows: int, min_rows: int = 1) -> None:
        self.target_s = target_s
        self.max_rows = max_rows
        self.min_rows = min(max(1, min_rows), max_rows)
        self.per_row: float | None = None

    def observe(self, rows: int, seconds: float) -> None:
        sample = seconds / max(rows, 1)
        if self.per_row is None or sample < self.per_row:
            self.per_row = sample
        else:
            self.per_row = 0.5 * self.per_row + 0.5 * sample

    def size(self) -> int:
        if self.per_row is None:
            return max(self.min_rows, min(FIRST_CHUNK, self.max_rows))
        return max(self.min_rows, min(self.max_rows, int(self.target_s / max(self.per_row, 1e-7))))


def bitmap(indices: Iterator[int], total: int) -> bytearray:
    """One bit per row of ``total``, set for each of ``indices``."""
    bits = bytearray((total + 7) // 8)
    for idx in indices:
        bits[idx >> 3] |= 1 << (idx & 7)
    return bits


def pending_chunks(
    lines: Iterator[tuple[int, bytes]], bits: bytearray, mapper: RowMapper, sizer: Sizer, max_bytes: int
) -> Iterator[list[tuple[int, WireCase]]]:
    """Chunks of (index, case) for the rows of ``lines`` (a dataset's, as (index, line), read as needed)
    whose bit in ``bits`` is not set: each as many rows as ``sizer`` says when it starts, or fewer
    once its lines reach ``max_bytes``."""
    indices: list[int] = []
    chunk: list[bytes] = []
    size, used = sizer.size(), 0
    for idx, line in lines:
        if bits[idx >> 3] & (1 << (idx & 7)):
            continue
        indices.append(idx)
        chunk.append(line)
        used += len(line)
        if len(chunk) >= size or used >= max_bytes:
            yield list(zip(indices, mapper.wire_cases(chunk), strict=True))
            indices, chunk, size, used = [], [], sizer.size(), 0
    if chunk:
        yield list(zip(indices, mapper.wire_cases(chunk), strict=True))


def job_view(record: JobRecord, live: Live | None) -> Job:
    """The API shape of ``record``, overlaid with ``live`` progress when it is running (here)."""
    if live is not None and record.status == "running":
        done, failed, acc, active, cached = live.done, live.failed, live.acc, live.active(), live.cached
    else:
        done, failed, active, cached = record.done, record.failed, record.active_s, record.cached
        acc = Accumulator.restore(record.acc_state)
    return Job(
        id=record.id,
        evaluator_id=record.evaluator_id,
        revision=record.revision,
        status=record.status,
        progress=JobProgress(total=record.total, done=done, failed=failed, cached=cached),
        rows_per_s=done / active if active > 0 and done else None,
        created_at=record.created_at,
        started_at=record.started_at,
        finished_at=record.finished_at,
        aggregate=acc.result() if record.status != "queued" else None,
        error=record.error,
        dataset_id=record.dataset_id,
        field_mapping=FieldMapping(**record.field_mapping),
        parallelism=record.parallelism,
        runtime_id=record.runtime_id,
        warnings=record.warnings,
    )
