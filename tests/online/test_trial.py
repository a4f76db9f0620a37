"""Try before live (``POST /v1/online-rules/test``, issue 50) through the API: charged to the workspace's
``max_evaluations_per_s`` like any call (429 past it, nothing run); ``limit`` bounded (1..100, 422); an
unknown evaluator 422; a mapping path that finds nothing is an error result, as online; another
workspace's traces are never tried (``matched: 0`` with a message); the traces and spans a trial reads
are bounded; nothing is ever stored."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.online.candidates import trial
from tests.support.online import chat_trace, score_rows
from tests.support.service import make_settings

ADMIN = "operator-key-for-trial-tests"
CODE = "def evaluate(inputs, outputs, trace):\n    return {'score': 1.0 if outputs == '4' else 0.0, 'reason': 'r'}\n"
SLOW = 0.01  # a bucket of 1 that refills in 100 s: nothing in a test refills it


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    settings = make_settings(tmp_path_factory.mktemp("trial"), backend="process", admin_key=ADMIN, online_poll_s=0.05)
    with TestClient(create_app(settings)) as client:
        yield {"client": client, "engine": client.app.state.services.store.engine}  # type: ignore[attr-defined]


def _workspace(client: TestClient, name: str, rate: float) -> tuple[str, dict[str, str]]:
    op = auth(ADMIN)
    ws = client.post("/v1/workspaces", json={"name": name}, headers=op).json()
    key = client.post(f"/v1/workspaces/{ws['id']}/keys", json={"name": "k"}, headers=op).json()["key"]
    patched = client.patch(f"/v1/workspaces/{ws['id']}", json={"quotas": {"max_evaluations_per_s": rate}}, headers=op)
    assert patched.status_code == 200, patched.text
    return ws["id"], auth(key)


def _evaluator(client: TestClient, h: dict[str, str]) -> str:
    made = client.post("/v1/evaluators", json={"name": "t", "language": "python", "code": CODE}, headers=h)
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def test_a_trial_is_charged_to_the_workspace_rate_and_stores_nothing(world: dict[str, Any]) -> None:
    client, engine = world["client"], world["engine"]
    ws, h = _workspace(client, "trial-rate", SLOW)
    ev = _evaluator(client, h)
    for _ in range(3):
        chat_trace(engine, workspace=ws)
    over = client.post("/v1/online-rules/test", json={"evaluator_id": ev, "limit": 3}, headers=h)
    assert over.status_code == 429 and over.json()["error"]["quota"] == "max_evaluations_per_s", over.text
    assert "Retry-After" not in over.headers  # 3 cases never fit a bucket of 1
    one = client.post("/v1/online-rules/test", json={"evaluator_id": ev, "limit": 1}, headers=h)
    assert one.status_code == 200, one.text
    assert one.json()["matched"] == 1 and one.json()["results"][0]["score"] == 1.0
    again = client.post("/v1/online-rules/test", json={"evaluator_id": ev, "limit": 1}, headers=h)
    assert again.status_code == 429 and "Retry-After" in again.headers  # the bucket's one token was spent
    assert [r for r in score_rows(engine) if r.workspace_id == ws] == []
    assert client.get("/healthz").status_code == 200


def test_a_trials_limit_evaluator_and_mapping_are_checked(world: dict[str, Any]) -> None:
    client, engine = world["client"], world["engine"]
    ws, h = _workspace(client, "trial-checks", 1000)
    ev = _evaluator(client, h)
    trace_id = chat_trace(engine, workspace=ws)
    for limit in (0, 101, 2**70):
        bad = client.post("/v1/online-rules/test", json={"evaluator_id": ev, "limit": limit}, headers=h)
        assert bad.status_code == 422, bad.text
    missing = client.post("/v1/online-rules/test", json={"evaluator_id": "ev_missing"}, headers=h)
    assert missing.status_code == 422 and "does not exist" in missing.text
    for target in ({"level": "session", "quiet_s": 0}, {"level": "trace", "session_key": "k"}, {"level": "x"}):
        bad = client.post("/v1/online-rules/test", json={"evaluator_id": ev, "target": target}, headers=h)
        assert bad.status_code == 422, (target, bad.text)
    session = client.post("/v1/online-rules/test", json={"evaluator_id": ev, "target": {"level": "session"}}, headers=h)
    assert session.status_code == 200, session.text  # a trace with no session id: no session, never a success
    assert session.json()["matched"] == 0 and "nothing matched: no session" in session.json()["message"]
    body = {"evaluator_id": ev, "mapping": {"outputs": "root.attributes.nothing.here"}}
    mapped = client.post("/v1/online-rules/test", json=body, headers=h).json()
    (result,) = mapped["results"]
    assert result["trace_id"] == trace_id and result["status"] == "error"
    assert "found nothing" in result["reason"]
    fine = client.post("/v1/online-rules/test", json={"evaluator_id": ev}, headers=h).json()
    (result,) = fine["results"]
    assert (result["inputs"], result["outputs"], result["score"], result["reason"]) == ({"q": "2+2?"}, "4", 1.0, "r")


def test_another_workspaces_traces_are_never_tried(world: dict[str, Any]) -> None:
    client, engine = world["client"], world["engine"]
    ws_a, h_a = _workspace(client, "trial-a", 1000)
    _, h_b = _workspace(client, "trial-b", 1000)
    chat_trace(engine, workspace=ws_a)
    ev_a = _evaluator(client, h_a)
    theirs = client.post("/v1/online-rules/test", json={"evaluator_id": ev_a}, headers=h_b)
    assert theirs.status_code == 422 and "does not exist in this workspace" in theirs.text  # as an unknown one
    ev = _evaluator(client, h_b)
    answer = client.post("/v1/online-rules/test", json={"evaluator_id": ev}, headers=h_b)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["matched"] == 0 and body["results"] == [] and body["scanned_traces"] == 0
    assert "no stored traces" in body["message"]


def test_a_trial_reads_at_most_its_scan_bounds(world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    client, engine = world["client"], world["engine"]
    ws, h = _workspace(client, "trial-bounds", 1000)
    ev = _evaluator(client, h)
    for _ in range(5):
        chat_trace(engine, workspace=ws)  # 2 spans each, none named "absent"
    body = {"evaluator_id": ev, "filter": {"span_name": "absent"}}
    monkeypatch.setattr(trial, "SCAN_SPANS", 5)  # 2 + 2 spans read; the third trace would pass 5
    bounded = client.post("/v1/online-rules/test", json=body, headers=h).json()
    assert (bounded["matched"], bounded["scanned_traces"]) == (0, 2) and "of the 2 newest" in bounded["message"]
    monkeypatch.setattr(trial, "SCAN_SPANS", 1)  # the newest trace is read whatever its size
    assert client.post("/v1/online-rules/test", json=body, headers=h).json()["scanned_traces"] == 1
    monkeypatch.setattr(trial, "SCAN_SPANS", 100_000)
    monkeypatch.setattr(trial, "SCAN_TRACES", 3)
    assert client.post("/v1/online-rules/test", json=body, headers=h).json()["scanned_traces"] == 3
    assert client.get("/healthz").status_code == 200


def test_a_rules_target_defaults_to_trace_and_is_set_at_creation(world: dict[str, Any]) -> None:
    client = world["client"]
    _, h = _workspace(client, "targets", 1000)
    ev = _evaluator(client, h)
    plain = client.post("/v1/online-rules", json={"evaluator_id": ev}, headers=h).json()
    assert plain["target"] == {"level": "trace"}
    per_span = client.post("/v1/online-rules", json={"evaluator_id": ev, "target": {"level": "span"}}, headers=h)
    assert per_span.status_code == 201 and per_span.json()["target"] == {"level": "span"}
    rule_id = per_span.json()["id"]
    assert client.get(f"/v1/online-rules/{rule_id}", headers=h).json()["target"] == {"level": "span"}
    patched = client.patch(f"/v1/online-rules/{rule_id}", json={"target": {"level": "trace"}}, headers=h)
    assert patched.status_code == 422 and "target" in patched.text
    bad_targets = (
        {"level": "spans"},
        {"level": "span", "extra": 1},
        {"level": "span", "quiet_s": 5},  # session fields belong to the session level only
        {"level": "trace", "session_key": "user.id"},
        {"level": "session", "quiet_s": 0},  # at least 1
        {"level": "session", "quiet_s": 2**70},
        {"level": "session", "session_key": ""},
    )
    for bad in bad_targets:
        made = client.post("/v1/online-rules", json={"evaluator_id": ev, "target": bad}, headers=h)
        assert made.status_code == 422, made.text
    session = {"level": "session", "session_key": "chat.thread", "quiet_s": 2}
    made = client.post("/v1/online-rules", json={"evaluator_id": ev, "target": session}, headers=h)
    assert made.status_code == 201 and made.json()["target"] == session, made.text
    listed = client.get("/v1/online-rules", headers=h).json()["data"]
    assert sorted(r["target"]["level"] for r in listed) == ["session", "span", "trace"]
