"""Job results count against the workspace's storage quota (issue 28, item 4).

On main a workspace with a 50 kB ``max_dataset_bytes`` ran 400 rows of an evaluator returning ~60 kB
of ``details`` and stored 45 MB of results: the quota bounded uploads only, and one tenant could fill
the disk. Here the workspace's stored bytes are its datasets plus its jobs' stored results (tracked per
job as chunks commit); a job that takes the workspace past the quota stops ``failed`` /
``QuotaExceeded`` keeping the rows it stored (the leading rows of its last chunk that fit: never past
the quota), new jobs and uploads answer 429 while it is over, and deleting a job frees its bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from evaluator_host.api import create_app
from evaluator_host.store.schema import normalized_url
from tests.support.service import assert_healthy, make_settings
from tests.support.wait import wait_until

pytestmark = pytest.mark.databases  # on SQLite and on PostgreSQL

ADMIN = "operator-key-for-quota-tests"
KEY = "workspace-key-for-quota-tests"
QUOTA = 2_000_000  # bytes: datasets and job results
CHUNK_ROWS = 8  # the largest chunk: what one commit may add past the quota is bounded by it
DETAIL = 60_000  # each row's details, in characters (under max_stored_result_bytes: stored whole)
BIG = (
    "def evaluate(inputs, outputs, trace):\n"
    f"    return {{'score': 1.0, 'details': {{'blob': 'x' * {DETAIL}, 'i': inputs['i']}}}}\n"
)


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def service(tmp_path: Path, database_url: str) -> Iterator[tuple[TestClient, str]]:
    settings = make_settings(
        tmp_path / "data",
        backend="process",
        database_url=database_url,
        admin_key=ADMIN,
        api_keys=[KEY],
        job_chunk_rows=CHUNK_ROWS,
    )
    with TestClient(create_app(settings)) as client:
        client.headers.update(_auth(KEY))
        yield client, database_url


def _finished(client: TestClient, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = wait_until(
        lambda: (j := client.get(f"/v1/jobs/{job_id}").json())["status"] not in ("queued", "running") and j,
        180,
        what="the job to finish",
    )
    return job


def _stored_bytes(database_url: str, job_id: str) -> tuple[int, int]:
    """From the database itself: (result rows, their bytes) of the job."""
    engine = create_engine(normalized_url(database_url))
    try:
        with engine.connect() as conn:
            rows, size = conn.execute(
                text("SELECT count(*), coalesce(sum(length(result)), 0) FROM job_results WHERE job_id = :j"),
                {"j": job_id},
            ).one()
    finally:
        engine.dispose()
    return int(rows), int(size)


def test_job_results_count_against_the_storage_quota_and_deleting_frees_them(service: tuple[TestClient, str]) -> None:
    client, database_url = service
    patched = client.patch(
        "/v1/workspaces/ws_default", json={"quotas": {"max_dataset_bytes": QUOTA}}, headers=_auth(ADMIN)
    )
    assert patched.status_code == 200, patched.text
    ev = client.post("/v1/evaluators", json={"name": "big", "language": "python", "code": BIG})
    assert ev.status_code == 201, ev.text
    ev_id = ev.json()["id"]
    rows = [{"i": i, "outputs": 1} for i in range(400)]  # ~24 MB of results if nothing stops it

    started = client.post("/v1/jobs", json={"evaluator_id": ev_id, "rows": rows})
    assert started.status_code == 202, started.text
    job = _finished(client, started.json()["id"])
    assert job["status"] == "failed", job
    assert job["error"]["type"] == "QuotaExceeded" and job["error"]["quota"] == "max_dataset_bytes", job["error"]
    message = job["error"]["message"]
    assert "max_dataset_bytes" in message and f"{QUOTA:,}" in message, message
    count, size = _stored_bytes(database_url, job["id"])
    assert 0 < count < 400 and job["progress"]["done"] == count  # the rows it stored are kept, and counted
    # at the quota: the runner stores the leading rows of the last chunk that fit the room left
    assert QUOTA - 2 * (DETAIL + 1000) < size <= QUOTA, size
    results = client.get(f"/v1/jobs/{job['id']}/results", params={"format": "ndjson"})
    assert results.status_code == 200 and len(results.text.splitlines()) == count

    # while the workspace is over (here: the operator lowered its quota), new jobs and uploads are refused
    # (429, the quota named), not run
    lowered = client.patch(
        "/v1/workspaces/ws_default", json={"quotas": {"max_dataset_bytes": size // 2}}, headers=_auth(ADMIN)
    )
    assert lowered.status_code == 200, lowered.text
    refused = client.post("/v1/jobs", json={"evaluator_id": ev_id, "rows": [{"i": 0, "outputs": 1}]})
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["type"] == "QuotaExceeded"
    assert refused.json()["error"]["quota"] == "max_dataset_bytes" and "Retry-After" in refused.headers
    upload = client.post("/v1/datasets", content=b'{"i": 1}\n' * 10, headers={"content-type": "text/jsonl"})
    assert upload.status_code == 429 and upload.json()["error"]["quota"] == "max_dataset_bytes", upload.text
    assert_healthy(client)  # evaluate still answers

    # deleting the job frees its bytes: a new job runs to the end
    restored = client.patch(
        "/v1/workspaces/ws_default", json={"quotas": {"max_dataset_bytes": QUOTA}}, headers=_auth(ADMIN)
    )
    assert restored.status_code == 200, restored.text
    assert client.delete(f"/v1/jobs/{job['id']}").status_code == 204
    again = client.post("/v1/jobs", json={"evaluator_id": ev_id, "rows": rows[:10]})
    assert again.status_code == 202, again.text
    done = _finished(client, again.json()["id"])
    assert done["status"] == "succeeded" and done["progress"]["done"] == 10, done
    assert_healthy(client)
