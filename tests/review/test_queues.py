"""Review queues through the API (issue 53), on every backend and on PostgreSQL: a queue filled from a job's
results (select + sample, stable on refill, capped by its limit) and one from an online rule's scores (those
stored before it, then new ones as they arrive); items with the job row or the trace and the evaluator's
answer; verdicts with history; CSV and JSON-lines exports; hostile bodies refused and the service healthy."""

from __future__ import annotations

import csv
import io
import json
import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete

from evaluator_host.store.online.rows import OnlineSpanRow, OnlineTraceRow
from tests.support.jobs import create_evaluator, jsonl, start, upload, wait
from tests.support.online import chat_trace
from tests.support.service import assert_healthy
from tests.support.wait import wait_until

pytestmark = pytest.mark.databases

# score = the row's s; passed: s >= 0.5; label: its band
CODE = (
    "def evaluate(inputs, outputs, trace):\n"
    "    s = inputs['s']\n"
    "    return {'score': s, 'passed': s >= 0.5, 'label': 'high' if s >= 0.5 else 'low', 'reason': f'got {s}'}\n"
)
ROWS = [{"q": f"q{i}", "s": (i * 37 % 40) / 40, "outputs": f"a{i}"} for i in range(40)]


def _job(client: TestClient) -> tuple[str, str]:
    ev = create_evaluator(client, CODE, name=f"review-{uuid.uuid4().hex[:6]}")["id"]
    dataset = upload(client, jsonl(ROWS))
    job = wait(client, start(client, ev, dataset_id=dataset["id"])["id"])
    assert job["status"] == "succeeded", job
    return ev, job["id"]


def _queue(client: TestClient, **body: Any) -> dict[str, Any]:
    made = client.post("/v1/review-queues", json={"name": f"q-{uuid.uuid4().hex[:6]}", **body})
    assert made.status_code == 201, made.text
    return dict(made.json())


def _items(client: TestClient, queue_id: str, **params: Any) -> list[dict[str, Any]]:
    got = client.get(f"/v1/review-queues/{queue_id}/items", params={"limit": 1000, **params})
    assert got.status_code == 200, got.text
    return list(got.json()["data"])


def test_a_job_queue_takes_the_selected_rows_sampled_stably_up_to_its_limit(client: TestClient) -> None:
    ev, job_id = _job(client)
    low = sorted(i for i, r in enumerate(ROWS) if r["s"] < 0.5)
    everything = _queue(client, source={"job_id": job_id}, select={"score_below": 0.5})
    assert (everything["items"], everything["reviewed"], everything["evaluator_id"]) == (len(low), 0, ev)
    assert everything["select"] == {"score_below": 0.5} and everything["source"] == {"rule_id": None, "job_id": job_id}
    items = _items(client, everything["id"])
    assert [i["source"]["index"] for i in items] == low  # in the job's row order
    first = items[0]
    row = ROWS[first["source"]["index"]]
    assert first["inputs"] == row and first["outputs"] == row["outputs"] and first["state"] == "pending"
    assert (first["score"], first["passed"], first["label"], first["revision"]) == (row["s"], False, "low", 1)
    assert first["reason"] == f"got {row['s']}" and first["source"]["job_id"] == job_id

    sampled = _queue(client, source={"job_id": job_id}, select={"score_below": 0.5}, sample=0.5)
    taken = [i["source"]["index"] for i in _items(client, sampled["id"])]
    assert set(taken) < set(low) and 0 < len(taken) < len(low)
    refilled = client.post(f"/v1/review-queues/{sampled['id']}/refill")
    assert refilled.status_code == 200 and refilled.json()["items"] == len(taken)  # the same items, no more
    assert [i["source"]["index"] for i in _items(client, sampled["id"])] == taken

    capped = _queue(client, source={"job_id": job_id}, sample=1.0, limit=5)
    assert capped["items"] == 5 and [i["source"]["index"] for i in _items(client, capped["id"])] == [0, 1, 2, 3, 4]
    only_high = _queue(client, source={"job_id": job_id}, select={"label_in": ["high"]})
    assert {i["label"] for i in _items(client, only_high["id"])} == {"high"}
    errors = _queue(client, source={"job_id": job_id}, select={"status_in": ["error"]})
    assert errors["items"] == 0  # none errored: an empty queue says so, with 0 items

    listed = client.get("/v1/review-queues").json()["data"]
    assert {q["id"] for q in listed} >= {everything["id"], sampled["id"], capped["id"]}
    renamed = client.patch(f"/v1/review-queues/{capped['id']}", json={"name": "renamed"})
    assert renamed.status_code == 200 and renamed.json()["name"] == "renamed"
    assert client.delete(f"/v1/review-queues/{capped['id']}").status_code == 204
    assert client.get(f"/v1/review-queues/{capped['id']}").status_code == 404


def test_verdicts_replace_each_other_keep_their_history_and_export_beside_the_answer(client: TestClient) -> None:
    _, job_id = _job(client)
    queue = _queue(client, source={"job_id": job_id}, limit=3)
    first, second, _third = _items(client, queue["id"])
    url = f"/v1/review-queues/{queue['id']}/items/{first['id']}/verdict"
    one = client.post(url, json={"passed": True, "note": "looks right"})
    assert one.status_code == 201 and one.json()["current"] is True, one.text
    two = client.post(url, json={"passed": False, "score": 0.2, "label": "low", "note": "on second look"})
    assert two.status_code == 201
    history = client.get(url).json()
    assert history["count"] == 2 and [v["id"] for v in history["data"]] == [two.json()["id"], one.json()["id"]]
    assert [v["current"] for v in history["data"]] == [True, False]
    client.post(f"/v1/review-queues/{queue['id']}/items/{second['id']}/verdict", json={"passed": True})

    reviewed = _items(client, queue["id"], state="reviewed")
    assert [i["id"] for i in reviewed] == [first["id"], second["id"]]
    assert reviewed[0]["verdict"]["note"] == "on second look" and reviewed[0]["state"] == "reviewed"
    assert [i["id"] for i in _items(client, queue["id"], state="pending")] == [_third["id"]]
    assert client.get(f"/v1/review-queues/{queue['id']}").json()["reviewed"] == 2

    lines = client.get(f"/v1/review-queues/{queue['id']}/export", params={"format": "jsonl"})
    assert lines.status_code == 200 and lines.headers["content-type"].startswith("application/x-ndjson")
    rows = [json.loads(line) for line in lines.text.splitlines()]
    assert [r["item_id"] for r in rows] == [first["id"], second["id"]]
    r0 = rows[0]
    assert (r0["score"], r0["passed"], r0["human_passed"], r0["human_score"], r0["agree"]) == (
        first["score"], first["passed"], False, 0.2, first["passed"] is False,
    )  # fmt: skip
    table = client.get(f"/v1/review-queues/{queue['id']}/export", params={"format": "csv", "state": "all"})
    assert table.status_code == 200 and table.headers["content-type"].startswith("text/csv")
    parsed = list(csv.DictReader(io.StringIO(table.text)))
    assert len(parsed) == 3 and parsed[0]["human_label"] == "low" and parsed[2]["human_passed"] == ""
    assert json.loads(parsed[0]["inputs"]) == ROWS[first["source"]["index"]]

    assert client.post(url, json={"passed": "maybe"}).status_code == 422
    assert client.post(url, json={"passed": True, "extra": 1}).status_code == 422
    wrong = f"/v1/review-queues/{queue['id']}/items/ri_nope/verdict"
    assert client.post(wrong, json={"passed": True}).status_code == 404
    assert client.get("/v1/review-queues/rq_nope/items").status_code == 404


CHAT = (
    "def evaluate(inputs, outputs, trace):\n"
    "    bad = 'bad' in inputs['q']\n"
    "    return {'score': 0.0 if bad else 1.0, 'passed': not bad}\n"
)


def test_a_rule_queue_takes_the_stored_scores_and_then_new_ones_as_they_arrive(client: TestClient) -> None:
    engine = client.app.state.services.store.engine  # type: ignore[attr-defined]
    ev = create_evaluator(client, CHAT, name=f"chat-{uuid.uuid4().hex[:6]}")["id"]
    rule_id = client.post("/v1/online-rules", json={"evaluator_id": ev}).json()["id"]
    before = [chat_trace(engine, question=q) for q in ("bad one", "good one", "bad two")]

    def scored(traces: list[str]) -> bool:
        scores = client.get(f"/v1/online-rules/{rule_id}/scores", params={"limit": 1000}).json()["data"]
        return {s["trace_id"] for s in scores if s["state"] == "done"} >= set(traces)

    wait_until(lambda: scored(before), 120, 0.05, what="the first traces scored")
    sampled = _queue(client, source={"rule_id": rule_id}, sample=0.5)  # a share of every answer
    every = _queue(client, source={"rule_id": rule_id})  # all of them: says when every hook has run
    queue = _queue(client, source={"rule_id": rule_id}, select={"passed": False})
    assert queue["items"] == 2 and queue["evaluator_id"] == ev
    items = _items(client, queue["id"])
    assert {i["source"]["trace_id"] for i in items} == {before[0], before[2]}
    item = next(i for i in items if i["source"]["trace_id"] == before[0])
    assert item["inputs"] == {"q": "bad one"} and item["outputs"] == "4" and item["passed"] is False
    assert item["trace"]["trace_id"] == before[0] and item["source"]["rule_id"] == rule_id

    later = [chat_trace(engine, question=q) for q in ("bad three", "fine")]
    wait_until(lambda: scored(later), 120, 0.05, what="the later traces scored")
    got = wait_until(lambda: len(_items(client, queue["id"])) == 3 and _items(client, queue["id"]), 30, 0.05)
    assert {i["source"]["trace_id"] for i in got} == {before[0], before[2], later[0]}  # the hook added it
    # each hook fills every queue of the rule in one transaction: once `every` holds all five, the sampled queue
    # holds what the same per-item draw takes, and a refill takes nothing more
    wait_until(lambda: len(_items(client, every["id"])) == 5, 30, 0.05, what="every score in the queue")
    taken = {i["source"]["trace_id"] for i in _items(client, sampled["id"])}
    assert taken <= set(before + later)
    assert client.post(f"/v1/review-queues/{sampled['id']}/refill").json()["items"] == len(taken)
    assert {i["source"]["trace_id"] for i in _items(client, sampled["id"])} == taken

    # a verdict keeps the case it judged: once the spans are gone (retention), the reviewed item still shows
    # it and can become a fixture; a pending one says why it has none
    reviewed, pending = (next(i for i in got if i["source"]["trace_id"] == t) for t in (before[0], before[2]))
    url = f"/v1/review-queues/{queue['id']}/items/{reviewed['id']}/verdict"
    assert client.post(url, json={"passed": True}).status_code == 201
    with engine.begin() as conn:
        for table in (OnlineSpanRow, OnlineTraceRow):
            conn.execute(delete(table).where(table.trace_id.in_([before[0], before[2]])))
    kept = {i["id"]: i for i in _items(client, queue["id"])}
    assert kept[reviewed["id"]]["inputs"] == {"q": "bad one"} and kept[reviewed["id"]]["trace"]["trace_id"] == before[0]
    assert kept[pending["id"]]["inputs"] is None and "no longer stored" in kept[pending["id"]]["case_error"]
    fixtures = client.post(f"/v1/review-queues/{queue['id']}/fixtures", json={"items": [reviewed["id"]]})
    assert fixtures.status_code == 200 and fixtures.json()["disagreeing"] == [f"review:{reviewed['id']}"]
    client.delete(f"/v1/online-rules/{rule_id}")


def test_a_span_level_rule_queue_shows_the_scored_span_of_its_trace(client: TestClient) -> None:
    engine = client.app.state.services.store.engine  # type: ignore[attr-defined]
    code = "def evaluate(inputs, outputs, trace):\n    return {'score': 0.0, 'passed': False, 'label': 'span'}\n"
    ev = create_evaluator(client, code, name=f"span-{uuid.uuid4().hex[:6]}")["id"]
    body = {"evaluator_id": ev, "target": {"level": "span"}, "filter": {"span_name": "llm"}}
    rule_id = client.post("/v1/online-rules", json=body).json()["id"]
    trace_id = chat_trace(engine, question="spans")

    def scored() -> bool:
        scores = client.get(f"/v1/online-rules/{rule_id}/scores").json()["data"]
        return any(s["trace_id"] == trace_id and s["state"] == "done" for s in scores)

    wait_until(scored, 120, 0.05, what="the span scored")
    queue = _queue(client, source={"rule_id": rule_id}, select={"label_in": ["span"]})
    (item,) = _items(client, queue["id"])
    (root,) = item["trace"]["spans"].values()
    (llm,) = root["children"].values()  # the trace whole, the scored span named by the item's source
    assert item["source"]["trace_id"] == trace_id
    assert (llm["name"], llm["span_id"]) == ("llm", item["source"]["span_id"])
    assert item["source"]["target_id"] == f"{trace_id}/{llm['span_id']}" and item["label"] == "span"
    client.delete(f"/v1/online-rules/{rule_id}")


def test_hostile_queue_bodies_are_refused_and_the_service_stays_healthy(client: TestClient) -> None:
    _, job_id = _job(client)
    bad = [
        {"name": "x", "source": {"job_id": job_id}, "limit": 10_001},
        {"name": "x", "source": {"job_id": job_id}, "sample": 1.5},
        {"name": "x", "source": {"job_id": job_id}, "select": {"score_below": 0.5, "passed": False}},
        {"name": "x", "source": {"job_id": job_id}, "select": {}},
        {"name": "x", "source": {"job_id": job_id, "rule_id": "rule_x"}},
        {"name": "x", "source": {}},
        {"name": "x", "source": {"job_id": "job_nope"}},
        {"name": "x", "source": {"rule_id": "rule_nope"}},
        {"name": "x\u0000", "source": {"job_id": job_id}},
        {"name": "x", "source": {"job_id": job_id}, "select": {"label_in": ["a"] * 101}},
    ]
    for body in bad:
        refused = client.post("/v1/review-queues", json=body)
        assert refused.status_code == 422, (body, refused.text)
    assert client.get("/v1/evaluators/ev_nope/agreement").status_code == 404
    assert_healthy(client)
