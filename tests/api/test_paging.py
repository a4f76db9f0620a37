"""Paging of the list endpoints: ``limit`` + an opaque ``cursor``; without them, everything."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from evaluator_host.store.db import DatasetRow, EvaluatorRow, JobRow

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
    made = [
        client.post("/v1/datasets", content=b'{"i": %d}\n' % i, headers={"content-type": "application/jsonl"})
        for i in range(3)
    ]
    walked = _walk(client, "/v1/datasets", 2)  # the module's other tests' datasets too, in whatever order they ran
    assert len(walked) == len(set(walked)) and {m.json()["id"] for m in made} <= set(walked)  # each once


@contextmanager
def rows_loaded(table: type[Any]) -> Iterator[list[object]]:
    """Every row of ``table`` the ORM loads meanwhile (any engine of this process)."""
    loaded: list[object] = []

    def count(target: object, _context: object) -> None:
        loaded.append(target)

    event.listen(table, "load", count)
    try:
        yield loaded
    finally:
        event.remove(table, "load", count)


def test_a_page_of_jobs_or_datasets_reads_a_page_from_the_database_not_the_whole_list(client: TestClient) -> None:
    ev = client.post("/v1/evaluators", json={"name": "many", "language": "python", "code": CODE}).json()
    for i in range(12):
        client.post("/v1/datasets", content=b'{"i": %d}\n' % i, headers={"content-type": "application/jsonl"})
        client.post("/v1/jobs", json={"evaluator_id": ev["id"], "rows": [{"i": i}]})
    for job in client.get("/v1/jobs").json()["data"]:  # every job of the module finished: a running one
        # reads its dataset's row, which would count below
        assert client.get(f"/v1/jobs/{job['id']}", params={"wait_s": 30}).json()["status"] == "succeeded"
    for path, table in (("/v1/datasets", DatasetRow), ("/v1/jobs", JobRow)):
        whole = client.get(path).json()["data"]
        assert len(whole) >= 12
        with rows_loaded(table) as loaded:
            first = client.get(path, params={"limit": 3}).json()
        assert len(first["data"]) == 3 and first["next_cursor"] is not None
        assert len(loaded) <= 4  # the page and one more (is there a next page?), never all of them
        with rows_loaded(table) as loaded:
            second = client.get(path, params={"limit": 3, "cursor": first["next_cursor"]}).json()
        assert len(loaded) <= 4
        assert first["data"] + second["data"] == whole[:6]  # the same items, in the same order, as unpaged
        assert _walk(client, path, 5) == [item["id"] for item in whole]


def test_a_page_of_evaluators_reads_a_page_from_the_database_not_the_whole_list(client: TestClient) -> None:
    for i in range(12):
        client.post("/v1/evaluators", json={"name": f"paged-{i}", "language": "python", "code": CODE})
    whole = client.get("/v1/evaluators").json()["data"]
    assert len(whole) >= 12
    with rows_loaded(EvaluatorRow) as loaded:
        first = client.get("/v1/evaluators", params={"limit": 3}).json()
    assert len(first["data"]) == 3 and first["next_cursor"] is not None
    assert len(loaded) <= 4  # the page and one more (is there a next page?), never all of them
    with rows_loaded(EvaluatorRow) as loaded:
        second = client.get("/v1/evaluators", params={"limit": 3, "cursor": first["next_cursor"]}).json()
    assert len(loaded) <= 4
    assert first["data"] + second["data"] == whole[:6]  # the same items, in the same order, as unpaged
    assert _walk(client, "/v1/evaluators", 5) == [item["id"] for item in whole]


def test_a_cursor_of_another_shape_is_a_422_on_the_lists_paged_in_the_database(client: TestClient) -> None:
    def cursor(key: Any) -> str:
        return base64.urlsafe_b64encode(json.dumps(key).encode()).decode().rstrip("=")

    # one item of each list at least, whichever of the module's tests ran before
    ev = client.post("/v1/evaluators", json={"name": "c", "language": "python", "code": CODE}).json()
    assert client.post("/v1/jobs", json={"evaluator_id": ev["id"], "rows": [{"i": 0}]}).status_code in (200, 201, 202)
    dataset = client.post("/v1/datasets", content=b'{"i": 0}\n', headers={"content-type": "application/jsonl"})
    assert dataset.status_code in (200, 201), dataset.text
    for path in ("/v1/jobs", "/v1/datasets", "/v1/evaluators"):
        for key in ([1, 2], ["not a time", "job_x"], ["2026-01-01T00:00:00+00:00"], []):
            answer = client.get(path, params={"limit": 2, "cursor": cursor(key)})
            assert answer.status_code == 422 and "cursor" in answer.json()["error"]["message"], (path, key)
        assert client.get(path, params={"limit": 2, "cursor": cursor(["2999-01-01T00:00:00+00:00", "x"])}).json()[
            "data"
        ]  # a well-formed cursor past every item: the newest ones
