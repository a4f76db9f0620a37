"""The storage quota's rule in ``JobStore`` (issue 28, item 4), on SQLite and PostgreSQL, for both commits
(the embedded runner's ``commit_rows`` and the worker hosts' ``commit_shared``): a job's ``result_bytes``
grow with what it stores; the chunk that takes the workspace past ``max_dataset_bytes`` is stored and the
job is failed with it (the queued commit stores only its leading rows that fit); a chunk of a
workspace already over is not stored and its job is failed the same
way; a workspace without the quota is charged but never stopped."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from evaluator_host.errors import QuotaExceeded
from evaluator_host.store.db import DEFAULT_WORKSPACE, make_engine
from evaluator_host.store.jobs.repository import JobStore
from evaluator_host.store.workspaces import WorkspaceStore
from tests.support.store import QUEUE_OWNER, dataset, new_job

QUOTA = 10_000
BLOB = '{"status": "ok", "score": 1.0, "details": "' + "x" * 1_000 + '"}'  # ~1 kB a row
SIZE = len(BLOB.encode())


@pytest.fixture
def store(database_url: str) -> Iterator[JobStore]:
    store = JobStore(make_engine(database_url))
    store.add_dataset(dataset())  # 42 bytes
    yield store
    store.engine.dispose()


def _local(store: JobStore, job_id: str, start: int, n: int, done: int) -> None:
    rows = [(job_id, idx, "ok", 1, "python-1", BLOB) for idx in range(start, start + n)]
    store.commit_rows(job_id, rows, done=done + n, failed=0, acc_state={}, active_s=0.1)


def _shared(store: JobStore, job_id: str, start: int, n: int) -> None:
    from evaluator_host.jobs.running.rows import StoredRow

    rows = [(idx, "ok", BLOB, StoredRow("ok", "", 1.0)) for idx in range(start, start + n)]
    store.commit_shared(job_id, QUEUE_OWNER, rows, revision=1, runtime_id="python-1", worker="host-a")


@pytest.mark.parametrize("path", ["local", "shared"])
def test_the_commit_that_passes_the_quota_stops_the_job_and_the_next_job_stores_nothing(
    store: JobStore, path: str
) -> None:
    WorkspaceStore(store.engine).set(DEFAULT_WORKSPACE, quotas={"max_dataset_bytes": QUOTA})
    first, second = new_job(store, id="job_1", total=100), new_job(store, id="job_2", total=100)
    if path == "shared":
        for job_id in (first, second):
            store.set_job(job_id, owner=QUEUE_OWNER, status="running")

    def chunk(job_id: str, start: int, n: int, done: int) -> None:
        _local(store, job_id, start, n, done) if path == "local" else _shared(store, job_id, start, n)

    chunk(first, 0, 5, 0)  # 5 kB + 42: under the quota
    assert store.get_job(first).result_bytes == 5 * SIZE and store.get_job(first).status != "failed"
    with pytest.raises(QuotaExceeded) as crossed:
        chunk(first, 5, 6, 5)  # 11 kB: this chunk passes the quota; the job stops
    assert crossed.value.quota == "max_dataset_bytes" and f"{QUOTA:,}" in crossed.value.message
    # the queued commit stores the leading rows that fit; the runner's (its counters cover the whole
    # chunk, and it cut the chunk to the room itself before) stores all of it: the backstop
    kept = 5 + ((QUOTA - 42 - 5 * SIZE) // SIZE if path == "shared" else 6)
    job = store.get_job(first)
    assert (job.status, job.done, job.result_bytes) == ("failed", kept, kept * SIZE)
    assert job.error is not None and job.error["type"] == "QuotaExceeded" and job.error["quota"] == "max_dataset_bytes"
    assert f"the {kept} rows it stored" in job.error["message"]
    assert len(store.results(first, 0, 100)) == kept
    assert store.storage_bytes(DEFAULT_WORKSPACE) == 42 + kept * SIZE
    if path == "shared":
        assert store.storage_bytes(DEFAULT_WORKSPACE) <= QUOTA

    with pytest.raises(QuotaExceeded):
        chunk(second, 0, 1, 0)  # the workspace is over already: nothing of this chunk is stored
    job = store.get_job(second)
    assert (job.status, job.done, job.result_bytes) == ("failed", 0, 0) and store.results(second, 0, 10) == []

    store.delete_job(first)  # freed: the workspace is back to its dataset's bytes
    assert store.storage_bytes(DEFAULT_WORKSPACE) == 42


def test_without_a_quota_results_are_counted_and_never_stop_a_job(store: JobStore) -> None:
    job_id = new_job(store, id="job_1", total=100)
    _local(store, job_id, 0, 50, 0)
    job = store.get_job(job_id)
    assert (job.status, job.done, job.result_bytes) == ("queued", 50, 50 * SIZE)
