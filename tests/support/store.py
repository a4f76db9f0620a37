"""Job store records for the store's tests: a dataset, a job, the owner a queued job is held by."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from evaluator_host.store.db import utcnow
from evaluator_host.store.jobs.repository import DatasetRecord, JobStore

QUEUE_OWNER = "service-1/queue"


def dataset(dataset_id: str = "ds_1", *, inline: bool = False, age_s: int = 0) -> DatasetRecord:
    return DatasetRecord(
        id=dataset_id,
        name=f"name of {dataset_id}",
        format="jsonl",
        row_count=3,
        columns=["q", "a"],
        bytes=42,
        inline=inline,
        created_at=utcnow() - timedelta(seconds=age_s),
    )


def new_job(store: JobStore, dataset_id: str = "ds_1", **overrides: Any) -> str:
    fields = {
        "id": "job_1",
        "evaluator_id": "ev_1",
        "revision": 1,
        "runtime_id": "python-1",
        "dataset_id": dataset_id,
        "field_mapping": {"output": "a"},
        "parallelism": 2,
        "total": 10,
        "warnings": [],
        **overrides,
    }
    return store.create_job(**fields).id
