"""Jobs through the API in tests: an evaluator, a dataset, a job started and waited for, its results."""

from __future__ import annotations

import json
from typing import Any

from fastapi.testclient import TestClient

from tests.support.wait import wait_until

__all__ = ["Json", "create_evaluator", "jsonl", "ndjson", "start", "upload", "wait"]

Json = dict[str, Any]


def create_evaluator(client: TestClient, code: str, language: str = "python", **extra: Any) -> Json:
    body = {"name": "job-test", "language": language, "code": code, **extra}
    response = client.post("/v1/evaluators", json=body)
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def upload(client: TestClient, data: bytes, content_type: str = "application/jsonl", **params: str) -> Json:
    response = client.post("/v1/datasets", content=data, headers={"content-type": content_type}, params=params)
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def start(client: TestClient, evaluator_id: str, **body: Any) -> Json:
    response = client.post("/v1/jobs", json={"evaluator_id": evaluator_id, **body})
    assert response.status_code == 202, response.text
    return response.json()  # type: ignore[no-any-return]


def wait(client: TestClient, job_id: str, timeout_s: float = 180.0, until: Any = None) -> Json:
    """Poll until the job is finished (or ``until(job)`` holds)."""
    holds = until or (lambda job: job["status"] not in ("queued", "running"))
    job: Json = wait_until(
        lambda: holds(j := client.get(f"/v1/jobs/{job_id}").json()) and j, timeout_s, 0.02, what="the job"
    )
    return job


def ndjson(client: TestClient, job_id: str) -> list[Json]:
    response = client.get(f"/v1/jobs/{job_id}/results", params={"format": "ndjson"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in response.text.splitlines()]


def jsonl(rows: list[Json]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()
