"""Paging of the list endpoints: ``limit`` + an opaque ``cursor``; without them, everything."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

pytestmark = pytest.mark.databases  # on SQLite and on PostgreSQL

CODE = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"


@pytest.fixture(scope="module")
def client(process_client: TestClient) -> TestClient:
    """This module's own service (process backend), not the session's per-backend one."""
    return process_client


def _walk(client: TestClient, path: str, limit: int, between: Any = None) -> list[str]:
    ids, cursor = [], None
    while True:
        params: dict[str, Any] = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        answer = client.get(path, params=params).json()
        assert answer["count"] == len(answer["data"]) <= limit
        ids += [str(item["revision"]) if "revisions" in path else item["id"] for item in answer["data"]]
        cursor = answer["next_cursor"]
        if cursor is None:
            return ids
        if between is not None:
            between()


def test_pages_follow_each_other_without_repeats_or_gaps_even_while_items_are_created(client: TestClient) -> None:
    made = [
        client.post("/v1/evaluators", json={"name": f"p{i}", "language": "python", "code": CODE}).json()["id"]
        for i in range(7)
    ]
    everything = client.get("/v1/evaluators").json()
    assert everything["next_cursor"] is None and set(made) <= {e["id"] for e in everything["data"]}
    added: list[str] = []

    def create_one() -> None:
        body = {"name": "late", "language": "python", "code": CODE}
        added.append(client.post("/v1/evaluators", json=body).json()["id"])

    walked = _walk(client, "/v1/evaluators", 3, between=create_one)
    assert len(walked) == len(set(walked))  # no repeats
    assert set(made) <= set(walked) and not set(added) & set(walked)  # no gaps; newer ones come first, not later
    assert walked == [e["id"] for e in everything["data"]]  # the same order as the whole list


def test_revisions_page_oldest_first_and_a_bad_cursor_is_a_422(client: TestClient) -> None:
    ev = client.post("/v1/evaluators", json={"name": "r", "language": "python", "code": CODE}).json()
    for n in range(4):
        client.put(f"/v1/evaluators/{ev['id']}", json={"name": "r", "language": "python", "code": CODE + f"# {n}\n"})
    assert _walk(client, f"/v1/evaluators/{ev['id']}/revisions", 2) == ["1", "2", "3", "4", "5"]
    bad = client.get("/v1/jobs", params={"limit": 2, "cursor": "not-a-cursor!"})
    assert bad.status_code == 422 and "cursor" in bad.json()["error"]["message"]
    assert client.get("/v1/jobs", params={"limit": 0}).status_code == 422


def test_jobs_and_datasets_page_too(client: TestClient) -> None:
    ev = client.post("/v1/evaluators", json={"name": "j", "language": "python", "code": CODE}).json()
    jobs = [client.post("/v1/jobs", json={"evaluator_id": ev["id"], "rows": [{"i": i}]}).json()["id"] for i in range(5)]
    assert set(jobs) <= set(_walk(client, "/v1/jobs", 2))
    for i in range(3):
        client.post("/v1/datasets", content=b'{"i": %d}\n' % i, headers={"content-type": "application/jsonl"})
    assert len(_walk(client, "/v1/datasets", 2)) == 3
