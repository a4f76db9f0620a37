"""The builders of the calls of datasets and jobs (``calls.py`` states the contract); the steps that
take several calls (waiting for a job, paging its results) are the clients' own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evaluator_host.client.calls import Call, Upload, body_of, model, nothing, rows_bytes
from evaluator_host.evaluation.models import (
    Case,
    EvaluatorSettings,
)
from evaluator_host.jobs.models import Dataset, DatasetList, DatasetRowPage, FieldMapping, Job, JobList, JobResultPage
from evaluator_host.targets.models import Target

Json = Any
Settings = EvaluatorSettings | Mapping[str, Any] | None
Cases = Sequence[Case | Mapping[str, Any]]

# --- datasets -----------------------------------------------------------------------------------


def upload_dataset(
    source: str | Path | Sequence[Mapping[str, Any]] | Any, *, name: str | None = None, format: str | None = None
) -> Call[Dataset]:
    """``POST /v1/datasets`` from a file path (JSONL, CSV or a JSON array; streamed), a list of dicts, or a
    pandas DataFrame (sent as JSONL; pandas is needed only for that)."""
    if isinstance(source, str | Path):
        path = Path(source)
        upload = Upload(path.name, path)
    else:
        from evaluator_host.client.frames import records_of

        upload = Upload(f"{name or 'rows'}.jsonl", rows_bytes(records_of(source)), "application/x-ndjson")
    return Call("POST", "/v1/datasets", model(Dataset), params={"name": name, "format": format}, upload=upload)


def get_dataset(dataset_id: str) -> Call[Dataset]:
    """``GET /v1/datasets/{id}``."""
    return Call("GET", f"/v1/datasets/{dataset_id}", model(Dataset))


def list_datasets(*, limit: int | None = None, cursor: str | None = None) -> Call[DatasetList]:
    """``GET /v1/datasets``."""
    return Call("GET", "/v1/datasets", model(DatasetList), params={"limit": limit, "cursor": cursor})


def dataset_rows(dataset_id: str, *, offset: int = 0, limit: int = 20) -> Call[DatasetRowPage]:
    """``GET /v1/datasets/{id}/rows``: a page of its rows."""
    params = {"offset": offset, "limit": limit}
    return Call("GET", f"/v1/datasets/{dataset_id}/rows", model(DatasetRowPage), params=params)


def delete_dataset(dataset_id: str) -> Call[None]:
    """``DELETE /v1/datasets/{id}`` (409 while jobs run on it)."""
    return Call("DELETE", f"/v1/datasets/{dataset_id}", nothing)


# --- jobs ---------------------------------------------------------------------------------------


def start_job(
    evaluator_id: str,
    *,
    dataset_id: str | None = None,
    rows: Sequence[Mapping[str, Any]] | None = None,
    revision: int | None = None,
    field_mapping: FieldMapping | Mapping[str, Any] | None = None,
    parallelism: int | None = None,
    target: Target | Mapping[str, Any] | None = None,
    sinks: Sequence[Mapping[str, Any]] | None = None,
) -> Call[Job]:
    """``POST /v1/jobs`` over a stored dataset or inline ``rows`` (exactly one): the queued job; ``sinks``: where
    each row's result is also written (the rows' ``trace_id``/``span_id``)."""
    body = body_of(
        evaluator_id=evaluator_id, dataset_id=dataset_id, rows=rows, revision=revision, field_mapping=field_mapping,
        parallelism=parallelism, target=target, sinks=sinks,
    )  # fmt: skip
    return Call("POST", "/v1/jobs", model(Job), body)


def get_job(job_id: str, *, wait_s: float | None = None) -> Call[Job]:
    """``GET /v1/jobs/{id}``; with ``wait_s`` (≤ 60) answered once the job is finished or after that long."""
    timeout = None if not wait_s else wait_s + 30
    return Call("GET", f"/v1/jobs/{job_id}", model(Job), params={"wait_s": wait_s or None}, timeout_s=timeout)


def list_jobs(*, limit: int | None = None, cursor: str | None = None) -> Call[JobList]:
    """``GET /v1/jobs``, newest first."""
    return Call("GET", "/v1/jobs", model(JobList), params={"limit": limit, "cursor": cursor})


def cancel_job(job_id: str) -> Call[Job]:
    """``POST /v1/jobs/{id}/cancel``."""
    return Call("POST", f"/v1/jobs/{job_id}/cancel", model(Job))


def delete_job(job_id: str) -> Call[None]:
    """``DELETE /v1/jobs/{id}`` (a running job is cancelled first; its results go with it)."""
    return Call("DELETE", f"/v1/jobs/{job_id}", nothing)


def job_results(job_id: str, *, offset: int = 0, limit: int = 100) -> Call[JobResultPage]:
    """``GET /v1/jobs/{id}/results``: one page, rows in input order (``next_offset`` for the next)."""
    params = {"offset": offset, "limit": limit}
    return Call("GET", f"/v1/jobs/{job_id}/results", model(JobResultPage), params=params)
