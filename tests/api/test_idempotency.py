"""``Idempotency-Key``: a retried POST answers the first answer and creates nothing again."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

pytestmark = pytest.mark.databases  # on SQLite and on PostgreSQL

CODE = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"


@pytest.fixture(scope="module")
def client(process_client: TestClient) -> TestClient:
    """This module's own service (process backend), not the session's per-backend one."""
    return process_client


def test_a_retried_evaluator_creation_answers_the_first_answer_and_creates_one(client: TestClient) -> None:
    body = {"name": "idem", "language": "python", "code": CODE}
    first = client.post("/v1/evaluators", json=body, headers={"Idempotency-Key": "create-1"})
    again = client.post("/v1/evaluators", json=body, headers={"Idempotency-Key": "create-1"})
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again.headers["idempotent-replayed"] == "true"
    named = [e for e in client.get("/v1/evaluators").json()["data"] if e["name"] == "idem"]
    assert len(named) == 1
    other = client.post("/v1/evaluators", json=body, headers={"Idempotency-Key": "create-2"})
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]  # a new key: a new one


def test_a_retried_job_start_starts_one_job(client: TestClient) -> None:
    ev = client.post("/v1/evaluators", json={"name": "idem-job", "language": "python", "code": CODE}).json()
    body = {"evaluator_id": ev["id"], "rows": [{"i": 1}, {"i": 2}]}
    first = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "job-1"})
    again = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "job-1"})
    assert first.status_code == again.status_code == 202
    assert again.json()["id"] == first.json()["id"]
    jobs = [j for j in client.get("/v1/jobs").json()["data"] if j["evaluator_id"] == ev["id"]]
    assert len(jobs) == 1


def test_a_key_reused_for_another_request_is_a_422(client: TestClient) -> None:
    body = {"name": "idem-a", "language": "python", "code": CODE}
    assert client.post("/v1/evaluators", json=body, headers={"Idempotency-Key": "reuse"}).status_code == 201
    other = client.post("/v1/evaluators", json={**body, "name": "idem-b"}, headers={"Idempotency-Key": "reuse"})
    assert other.status_code == 422 and other.json()["error"]["type"] == "IdempotencyKeyError"


def test_a_failed_request_releases_its_key_and_a_malformed_key_is_a_422(client: TestClient) -> None:
    body = {"evaluator_id": "ev_nope", "rows": [{"i": 1}]}
    for _ in range(2):  # not replayed: the retry runs again (and fails again)
        answer = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "fails"})
        assert answer.status_code == 404 and "idempotent-replayed" not in answer.headers
    bad = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "has space"})
    assert bad.status_code == 422 and bad.json()["error"]["type"] == "IdempotencyKeyError"
