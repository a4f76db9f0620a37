"""Verdicts become fixtures, end to end (issue 53), on every backend and on PostgreSQL: reviewed items of a
job's queue are added to the evaluator as fixtures (a new revision with the same code, its disagreements
named); a next revision that disagrees with the verdicts is refused at save (409 ``FixturesFailed``, stored as
a draft, the latest unchanged) unless forced, and one that agrees is saved; a newer verdict replaces its
item's fixture; pending or unknown items are refused; fixtures past what one save may hold (200, or their JSON
past ``max_body_bytes``) are refused and store nothing."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.evaluation.models import MAX_FIXTURES
from tests.support.jobs import create_evaluator, jsonl, start, upload, wait
from tests.support.service import assert_healthy, make_settings

ROWS = [{"q": f"q{i}", "s": i / 10, "outputs": "x"} for i in range(8)]
V1 = "def evaluate(inputs, outputs, trace):\n    s = inputs['s']\n    return {'score': s, 'passed': s >= 0.5}\n"


def _agreeing(verdicts: dict[str, dict[str, Any]]) -> str:
    """Code that answers as people did where they gave a verdict (by the row's q), as v1 elsewhere."""
    table = {q: (v["passed"], v.get("score")) for q, v in verdicts.items()}
    return (
        f"PEOPLE = {table!r}\n"
        "def evaluate(inputs, outputs, trace):\n"
        "    s = inputs['s']\n"
        "    passed, score = PEOPLE.get(inputs['q'], (s >= 0.5, None))\n"
        "    return {'score': s if score is None else score, 'passed': passed}\n"
    )


@pytest.mark.databases
def test_verdicts_become_fixtures_that_refuse_a_disagreeing_revision_unless_forced(client: TestClient) -> None:
    name = f"fx-{uuid.uuid4().hex[:6]}"
    ev = create_evaluator(client, V1, name=name)["id"]
    job = wait(client, start(client, ev, dataset_id=upload(client, jsonl(ROWS))["id"])["id"])
    queue = client.post("/v1/review-queues", json={"name": "fx", "source": {"job_id": job["id"]}}).json()
    items = client.get(f"/v1/review-queues/{queue['id']}/items").json()["data"]
    by_q = {ROWS[i["source"]["index"]]["q"]: i for i in items}
    verdicts = {  # q2 and q7: people disagree with v1 (which fails q2 and passes q7); q0, q6: they agree
        "q2": {"passed": True, "score": 0.9},
        "q7": {"passed": False},
        "q0": {"passed": False, "score": 0.0},
        "q6": {"passed": True},
    }
    for q, verdict in verdicts.items():
        url = f"/v1/review-queues/{queue['id']}/items/{by_q[q]['id']}/verdict"
        assert client.post(url, json=verdict).status_code == 201

    url = f"/v1/review-queues/{queue['id']}/fixtures"
    pending = by_q["q1"]["id"]
    refused = client.post(url, json={"items": [pending]})
    assert refused.status_code == 422 and "no verdict" in refused.text
    assert client.post(url, json={"items": ["ri_nope"]}).status_code == 404
    assert client.post(url, json={"items": [pending], "all_reviewed": True}).status_code == 422

    added = client.post(url, json={"all_reviewed": True})
    assert added.status_code == 200, added.text
    body = added.json()
    assert (body["evaluator_id"], body["revision"], body["added"], body["replaced"], body["fixtures"]) == (
        ev, 2, 4, 0, 4,
    )  # fmt: skip
    assert sorted(body["disagreeing"]) == sorted(f"review:{by_q[q]['id']}" for q in ("q2", "q7"))
    latest = client.get(f"/v1/evaluators/{ev}").json()
    assert latest["revision"] == 2 and latest["code"] == V1 and not latest["draft"]
    fixture = next(f for f in latest["fixtures"] if f["name"] == f"review:{by_q['q2']['id']}")
    assert fixture["inputs"] == ROWS[2] and fixture["outputs"] == "x"
    assert fixture["expect"] == {"score": 0.9, "passed": True, "label": None, "status": None, "tolerance": 0.1}

    same_mind = V1 + "# reworded, still disagreeing with people\n"
    saved = client.patch(f"/v1/evaluators/{ev}", json={"code": same_mind})
    assert saved.status_code == 409 and saved.json()["error"]["type"] == "FixturesFailed", saved.text
    assert client.get(f"/v1/evaluators/{ev}").json()["revision"] == 2  # the draft is not the latest

    agreeing = client.patch(f"/v1/evaluators/{ev}", json={"code": _agreeing(verdicts)})
    assert agreeing.status_code == 200, agreeing.text
    assert agreeing.json()["fixture_report"]["failed"] == 0 and agreeing.json()["revision"] == 4
    forced = client.patch(f"/v1/evaluators/{ev}", json={"code": same_mind, "force": True})
    assert forced.status_code == 200 and forced.json()["fixture_report"]["failed"] == 2

    again = client.post(f"/v1/review-queues/{queue['id']}/items/{by_q['q6']['id']}/verdict", json={"passed": False})
    assert again.status_code == 201
    replaced = client.post(url, json={"items": [by_q["q6"]["id"]]}).json()
    assert (replaced["added"], replaced["replaced"], replaced["fixtures"]) == (0, 1, 4)
    fixtures = client.get(f"/v1/evaluators/{ev}").json()["fixtures"]
    assert next(f for f in fixtures if f["name"] == f"review:{by_q['q6']['id']}")["expect"]["passed"] is False


def test_verdicts_past_what_one_save_may_hold_are_refused_and_the_service_stays_healthy(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, backend="process", max_body_bytes=64 * 1024)
    with TestClient(create_app(settings)) as client:
        ev = create_evaluator(client, V1, name="bounds")["id"]
        rows = [{"q": f"q{i}", "s": 0.9, "outputs": "x" * 30_000} for i in range(3)] + [
            {"q": f"r{i}", "s": 0.1, "outputs": "x"} for i in range(MAX_FIXTURES)
        ]
        job = wait(client, start(client, ev, dataset_id=upload(client, jsonl(rows))["id"])["id"])
        big = client.post("/v1/review-queues", json={"name": "big", "source": {"job_id": job["id"]}, "limit": 3})
        many = client.post(
            "/v1/review-queues",
            json={"name": "many", "source": {"job_id": job["id"]}, "select": {"passed": False}, "limit": 1000},
        )
        assert big.json()["items"] == 3 and many.json()["items"] == MAX_FIXTURES
        for queue in (big.json(), many.json()):
            for item in client.get(f"/v1/review-queues/{queue['id']}/items", params={"limit": 1000}).json()["data"]:
                url = f"/v1/review-queues/{queue['id']}/items/{item['id']}/verdict"
                assert client.post(url, json={"passed": True}).status_code == 201
        too_big = client.post(f"/v1/review-queues/{big.json()['id']}/fixtures", json={"all_reviewed": True})
        assert too_big.status_code == 422 and "max_body_bytes" in too_big.text, too_big.text
        one = client.post(f"/v1/review-queues/{many.json()['id']}/fixtures", json={"items": [item["id"]]})
        assert one.status_code == 200 and one.json()["fixtures"] == 1, one.text
        too_many = client.post(f"/v1/review-queues/{many.json()['id']}/fixtures", json={"all_reviewed": True})
        assert too_many.status_code == 200 and too_many.json()["fixtures"] == MAX_FIXTURES  # the same item replaced
        extra = client.post(f"/v1/review-queues/{big.json()['id']}/fixtures", json={"items": [big_item(client, big)]})
        assert extra.status_code == 422 and f"more than {MAX_FIXTURES}" in extra.text, extra.text
        assert client.get(f"/v1/evaluators/{ev}").json()["revision"] == 3  # the refusals stored nothing
        assert_healthy(client)


def big_item(client: TestClient, queue: Any) -> str:
    return str(client.get(f"/v1/review-queues/{queue.json()['id']}/items").json()["data"][0]["id"])
