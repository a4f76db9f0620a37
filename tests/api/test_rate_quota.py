"""``max_evaluations_per_s`` charges every path that runs a workspace's code (issue 47.6): the fixtures of a
save, ``POST /v1/evaluators/{id}/test`` and ``POST /v1/results/replay`` answer 429 over the rate as
``/v1/evaluate`` does; online rules are paced — every score arrives, none fails, and the scores stored
over the window stay within the rate. The structural half (no route or loop runs code but through the
charged ``Bound.run``) is tests/unit/test_use_cases.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.store.db import utcnow
from tests.support.online import chat_trace, score_rows
from tests.support.service import make_settings
from tests.support.wait import wait_until

ADMIN = "operator-key-for-rate-quota-tests"
CODE = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"
FIXTURE = {"name": "one", "inputs": {}, "outputs": 1, "expect": {"score": 1.0}}
SLOW = 0.01  # a bucket of 1 that refills in 100 s: nothing in a test refills it (no timing assumed)


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    settings = make_settings(tmp_path_factory.mktemp("rate"), backend="process", admin_key=ADMIN, online_poll_s=0.05)
    with TestClient(create_app(settings)) as client:
        yield {"client": client, "engine": client.app.state.services.store.engine}  # type: ignore[attr-defined]


def _workspace(client: TestClient, name: str, rate: float) -> tuple[str, dict[str, str]]:
    op = auth(ADMIN)
    ws = client.post("/v1/workspaces", json={"name": name}, headers=op).json()
    key = client.post(f"/v1/workspaces/{ws['id']}/keys", json={"name": "k"}, headers=op).json()["key"]
    patched = client.patch(f"/v1/workspaces/{ws['id']}", json={"quotas": {"max_evaluations_per_s": rate}}, headers=op)
    assert patched.status_code == 200, patched.text
    return ws["id"], auth(key)


def _refused(answer: Any, *, ever: bool) -> None:
    """A 429 of the rate quota; ``ever``: waiting would make it fit (it carries Retry-After)."""
    assert answer.status_code == 429, answer.text
    assert answer.json()["error"]["type"] == "QuotaExceeded"
    assert answer.json()["error"]["quota"] == "max_evaluations_per_s"
    assert ("Retry-After" in answer.headers) is ever


def test_fixtures_on_save_and_the_test_route_are_charged_to_the_rate(world: dict[str, Any]) -> None:
    client = world["client"]
    _, h = _workspace(client, "fixtures-rate", SLOW)
    # 200 fixtures on one save: more than the bucket ever holds, refused before any build, nothing stored
    body = {
        "name": "f",
        "language": "python",
        "code": CODE,
        "fixtures": [{**FIXTURE, "name": f"f{i}"} for i in range(200)],
    }
    _refused(client.post("/v1/evaluators", json=body, headers=h), ever=False)
    assert client.get("/v1/evaluators", headers=h).json()["data"] == []
    # one fixture fits: the save takes the bucket's one token
    saved = client.post("/v1/evaluators", json={**body, "fixtures": [FIXTURE]}, headers=h)
    assert saved.status_code == 201, saved.text
    ev = saved.json()["id"]
    # the bucket is empty now: /test, a new revision's fixtures and a call are refused alike, with Retry-After
    _refused(client.post(f"/v1/evaluators/{ev}/test", json={}, headers=h), ever=True)
    _refused(client.put(f"/v1/evaluators/{ev}", json={**body, "fixtures": [FIXTURE]}, headers=h), ever=True)
    _refused(client.post(f"/v1/evaluators/{ev}/evaluate", json={"outputs": 1}, headers=h), ever=True)
    assert [r["revision"] for r in client.get(f"/v1/evaluators/{ev}/revisions", headers=h).json()["data"]] == [1]
    # a save without fixtures runs no code: not charged
    assert client.post("/v1/evaluators", json={**body, "name": "g", "fixtures": []}, headers=h).status_code == 201
    # another workspace is not charged for this one
    _, other = _workspace(client, "fixtures-free", 1000)
    again = client.post("/v1/evaluators", json={**body, "fixtures": body["fixtures"][:50]}, headers=other)
    assert again.status_code == 201, again.text
    tested = client.post(f"/v1/evaluators/{again.json()['id']}/test", json={}, headers=other)
    assert tested.status_code == 200 and tested.json()["passed"] == 50, tested.text
    assert client.get("/healthz").status_code == 200


def test_replaying_a_stored_result_is_charged_to_the_rate(world: dict[str, Any]) -> None:
    client = world["client"]
    ws, h = _workspace(client, "replay-rate", 1000)
    ev = client.post("/v1/evaluators", json={"name": "r", "language": "python", "code": CODE}, headers=h).json()["id"]
    job = client.post("/v1/jobs", json={"evaluator_id": ev, "rows": [{"outputs": 1}]}, headers=h).json()["id"]
    wait_until(lambda: client.get(f"/v1/jobs/{job}", headers=h).json()["status"] == "succeeded", 120, 0.05)
    op = auth(ADMIN)
    patched = client.patch(f"/v1/workspaces/{ws}", json={"quotas": {"max_evaluations_per_s": SLOW}}, headers=op)
    assert patched.status_code == 200
    first = client.post("/v1/results/replay", json={"job_id": job, "index": 0}, headers=h)
    assert first.status_code == 200 and first.json()["identical"] is True, first.text
    _refused(client.post("/v1/results/replay", json={"job_id": job, "index": 0}, headers=h), ever=True)


def test_online_rules_are_paced_by_the_rate_never_failed(world: dict[str, Any]) -> None:
    client, engine = world["client"], world["engine"]
    rate, traces = 5.0, 40
    ws, h = _workspace(client, "online-rate", rate)
    ev = client.post("/v1/evaluators", json={"name": "o", "language": "python", "code": CODE}, headers=h).json()["id"]
    rule = client.post("/v1/online-rules", json={"evaluator_id": ev}, headers=h)
    assert rule.status_code == 201, rule.text
    started = utcnow()  # UTC (SQLite gives it back without its zone)
    for _ in range(traces):
        chat_trace(engine, workspace=ws)

    def mine() -> list[Any]:
        return [r for r in score_rows(engine) if r.rule_id == rule.json()["id"]]

    wait_until(lambda: sum(r.state == "done" for r in mine()) == traces, 300, 0.1, what="every online score")
    rows = mine()
    assert [r.status for r in rows] == ["ok"] * traces  # delayed, never failed
    assert max(r.attempts for r in rows) == 1  # a paced row's claims are not attempts
    # the bucket holds one second of the rate: at most rate × (1 + the seconds the scoring took) ran
    took = (max(r.scored_at for r in rows).replace(tzinfo=None) - started.replace(tzinfo=None)).total_seconds()
    assert traces <= rate * (1 + took), f"{traces} scores in {took:.2f} s over a rate of {rate:g}/s"
    assert client.get("/healthz").status_code == 200
