"""Issue 54: two services on one PostgreSQL database, each answering calls by id from what it remembers of
an evaluator — a revision saved or an evaluator deleted through the other is in force on the very next
call (it reads the evaluator's latest revision number on each call by id); an ``Idempotency-Key`` used
through one is replayed by the other; a result cached by one service's job answers the same rows on the other."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from tests.support.backends import postgres_only
from tests.support.jobs import start, wait
from tests.support.pg import Cluster
from tests.support.service import make_settings

CODE = "def evaluate(inputs, outputs, trace):\n    return {n}.0\n"


@pytest.fixture
def two(tmp_path: Path, postgres: Cluster) -> Iterator[tuple[TestClient, TestClient]]:
    shared = {"backend": "process", "database_url": postgres.database(), "spare_workers": 0}
    with (
        TestClient(create_app(make_settings(tmp_path / "a", **shared))) as a,
        TestClient(create_app(make_settings(tmp_path / "b", **shared))) as b,
    ):
        yield a, b


@postgres_only
def test_a_revision_saved_through_another_service_is_the_latest_on_the_next_call_by_id(
    two: tuple[TestClient, TestClient],
) -> None:
    a, b = two
    made = a.post("/v1/evaluators", json={"name": "e", "language": "python", "code": CODE.format(n=1)})
    path = f"/v1/evaluators/{made.json()['id']}"
    assert a.post(f"{path}/evaluate", json={"outputs": 1}).json()["score"] == 1.0  # A remembers revision 1
    assert b.patch(path, json={"code": CODE.format(n=2)}).json()["revision"] == 2
    ran = a.post(f"{path}/evaluate", json={"outputs": 1}).json()
    assert (ran["revision"], ran["score"]) == (2, 2.0)  # main: revision 1, A's remembered latest
    assert a.post(f"{path}/evaluate", json={"outputs": 1, "revision": 1}).json()["score"] == 1.0  # kept


@postgres_only
def test_an_evaluator_deleted_through_another_service_is_gone_on_the_next_call_by_id(
    two: tuple[TestClient, TestClient],
) -> None:
    a, b = two
    made = a.post("/v1/evaluators", json={"name": "e", "language": "python", "code": CODE.format(n=1)})
    path = f"/v1/evaluators/{made.json()['id']}"
    assert a.post(f"{path}/evaluate", json={"outputs": 1}).status_code == 200  # A remembers it
    assert a.post(f"{path}/evaluate", json={"outputs": 1, "revision": 1}).status_code == 200
    assert b.delete(path).status_code == 204
    assert a.post(f"{path}/evaluate", json={"outputs": 1}).status_code == 404  # main: 200, from A's memory
    assert a.post(f"{path}/evaluate", json={"outputs": 1, "revision": 1}).status_code == 404
    assert a.get("/healthz").status_code == 200


@postgres_only
def test_an_idempotency_key_used_through_one_service_is_replayed_by_another(
    two: tuple[TestClient, TestClient],
) -> None:
    a, b = two
    body = {"name": "once", "language": "python", "code": CODE.format(n=1)}
    key = {"Idempotency-Key": "create-once-1"}
    first = a.post("/v1/evaluators", json=body, headers=key)
    again = b.post("/v1/evaluators", json=body, headers=key)
    assert first.status_code == again.status_code == 201
    assert again.headers.get("idempotent-replayed") == "true" and again.json()["id"] == first.json()["id"]
    other = b.post("/v1/evaluators", json={**body, "name": "another"}, headers=key)
    assert other.status_code == 422, other.text  # one key names one request, whichever service sees it
    assert len([e for e in a.get("/v1/evaluators").json()["data"] if e["name"] == "once"]) == 1


DETERMINISTIC = (  # ~0.2 ms of work a row: cached by default (result_cache_min_row_ms)
    "def evaluate(inputs, outputs, trace):\n"
    "    work = sum(i * i for i in range(8000))\n"
    "    return float(outputs == inputs['expected'])\n"
)


@postgres_only
def test_a_result_cached_by_one_services_job_answers_the_same_rows_on_another(
    two: tuple[TestClient, TestClient],
) -> None:
    a, b = two
    evaluator = a.post("/v1/evaluators", json={"name": "c", "language": "python", "code": DETERMINISTIC}).json()["id"]
    rows = [{"outputs": str(i % 3), "expected": "1", "i": i} for i in range(40)]
    first = wait(a, start(a, evaluator, rows=rows)["id"])
    assert first["status"] == "succeeded" and first["progress"].get("cached", 0) == 0, first
    second = wait(b, start(b, evaluator, rows=rows)["id"])  # B runs it: the cache is the database's
    assert second["progress"] == {"total": 40, "done": 40, "failed": 0, "cached": 40}, second
    assert second["aggregate"]["pass_rate"] == first["aggregate"]["pass_rate"]
