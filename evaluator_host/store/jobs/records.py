"""The records the job store hands out (frozen dataclasses, no ORM state) and how rows become them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select

from evaluator_host.store.db import DEFAULT_WORKSPACE, DatasetRow, JobRow, as_utc

__all__ = [
    "GET_JOB",
    "DatasetRecord",
    "JobRecord",
    "SharedCommit",
    "StoredResult",
    "aware",
    "dataset_record",
    "job_record",
]


def aware(value: datetime | None) -> datetime | None:
    """``value`` as UTC-aware (a database may give it back naive)."""
    return None if value is None else as_utc(value)


@dataclass(frozen=True)
class DatasetRecord:
    """A dataset's metadata (its rows are files, see ``jobs.datasets.files``)."""

    id: str
    name: str
    format: str
    row_count: int
    columns: list[str]
    bytes: int
    inline: bool
    created_at: datetime
    workspace_id: str = DEFAULT_WORKSPACE


@dataclass(frozen=True)
class JobRecord:
    """A job as stored."""

    id: str
    evaluator_id: str
    revision: int
    runtime_id: str
    dataset_id: str
    field_mapping: dict[str, Any]
    parallelism: int
    status: str
    total: int
    done: int
    failed: int
    acc_state: dict[str, Any] | None
    active_s: float
    error: dict[str, Any] | None
    warnings: list[str]
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    owner: str | None = None  # the service (``<id>/queue``: its queue) that runs it
    workspace_id: str = DEFAULT_WORKSPACE
    result_bytes: int = 0  # bytes of its stored results (what it counts against the storage quota)
    target: dict[str, Any] | None = None  # its model target (None: outputs come from its rows)
    cached: int = 0  # rows of ``done`` answered from the result cache
    sinks: list[dict[str, Any]] | None = None  # issue 52: where its results are also written (None: nowhere)
    lease_until: float | None = None  # until when ``owner`` holds it (Unix s, the database's clock; None: not leased)


@dataclass(frozen=True)
class StoredResult:
    """One stored row result."""

    idx: int
    revision: int
    runtime_id: str
    result: str  # JSON
    worker: str | None = None  # the worker host that ran it (queued jobs); None: the service itself


@dataclass(frozen=True)
class SharedCommit:
    """What :meth:`JobStore.commit_shared` did: rows new to the store, and the job's counters after."""

    stored: int
    done: int
    failed: int
    total: int
    finished: bool  # this commit stored the job's last row and finished it (succeeded, or failed: AllRowsErrored)


JOB_FIELDS = [f.name for f in dataclasses.fields(JobRecord)]
DATASET_FIELDS = [f.name for f in dataclasses.fields(DatasetRecord)]


GET_JOB = select(*(JobRow.__table__.c[name] for name in JOB_FIELDS)).where(JobRow.__table__.c.id == bindparam("id"))


def job_record(row: Any) -> JobRecord:
    """The record of a ``jobs`` row (ORM object or Core row), its times timezone-aware."""
    values = {name: getattr(row, name) for name in JOB_FIELDS}
    for name in ("created_at", "started_at", "finished_at"):
        values[name] = aware(values[name])
    return JobRecord(**values)


def dataset_record(row: DatasetRow) -> DatasetRecord:
    """The record of a ``datasets`` row, its time timezone-aware."""
    values = {name: getattr(row, name) for name in DATASET_FIELDS}
    values["created_at"] = aware(values["created_at"])
    return DatasetRecord(**values)
