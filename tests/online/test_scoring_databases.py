"""A started service scores a stored trace on SQLite and on PostgreSQL alike (routing, claims,
results and the stats query of each database)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.support.online import chat_trace, hex_id, put_trace, span
from tests.support.wait import wait_until

CODE = "def evaluate(inputs, outputs, trace):\n    return {'score': 0.5, 'passed': True, 'label': 'half'}\n"


@pytest.mark.databases
def test_a_trace_is_scored_and_counted(process_client: TestClient) -> None:
    client = process_client
    ev = client.post("/v1/evaluators", json={"name": "half", "language": "python", "code": CODE}).json()
    rule = client.post("/v1/online-rules", json={"evaluator_id": ev["id"], "sampling_rate": 1.0})
    assert rule.status_code == 201, rule.text
    rule_id = rule.json()["id"]
    trace_id = chat_trace(client.app.state.services.store.engine)  # type: ignore[attr-defined]

    def scored() -> bool:
        scores = client.get(f"/v1/traces/{trace_id}").json()["scores"]
        return any(s["rule_id"] == rule_id and s["state"] == "done" for s in scores)

    wait_until(scored, 60, 0.1, what="the score")
    stats = client.get(f"/v1/online-rules/{rule_id}/stats?bucket=3600").json()
    assert stats["bucket_s"] == 3600 and len(stats["buckets"]) == 60
    filled = [b for b in stats["buckets"] if b["count"]]
    assert len(filled) == 1 and filled[0]["mean_score"] == 0.5 and filled[0]["pass_rate"] == 1.0
    assert filled[0]["labels"] == {"half": 1}
    assert filled[0]["decisions"] == {"scored": 1} and stats["decisions"] == {"scored": 1}  # issue 51
    assert stats["pending"] == {"queued": 0, "running": 0, "retrying": 0, "delayed": 0}
    assert stats["pace"]["scores_last_minute"] in (0, 1)  # the score is stored: in the minute unless it has passed
    [decided] = client.get(f"/v1/traces/{trace_id}").json()["decisions"]
    assert (decided["rule_id"], decided["decision"]) == (rule_id, "scored")
    client.delete(f"/v1/online-rules/{rule_id}")


@pytest.mark.databases
def test_a_session_is_scored_once_quiet_and_shown(process_client: TestClient) -> None:
    client = process_client
    code = "def evaluate(inputs, outputs, trace):\n    return float(trace['num_traces'])\n"
    ev = client.post("/v1/evaluators", json={"name": "turns", "language": "python", "code": code}).json()
    target = {"level": "session", "session_key": "chat.thread", "quiet_s": 1}
    rule = client.post("/v1/online-rules", json={"evaluator_id": ev["id"], "target": target})
    assert rule.status_code == 201 and rule.json()["target"] == target, rule.text
    rule_id = rule.json()["id"]
    engine = client.app.state.services.store.engine  # type: ignore[attr-defined]
    thread = f"thread-{hex_id(4)}"
    for question in ("hi", "bye"):
        trace_id = hex_id(16)
        attributes = {"chat.thread": thread, "ag.data.inputs": {"q": question}, "ag.data.outputs": question.upper()}
        put_trace(engine, [span(trace_id, "turn", attributes=attributes)])

    def scored() -> bool:
        found = client.get(f"/v1/sessions/{thread}")
        if found.status_code == 404:  # not routed yet
            return False
        scores = found.json()["scores"]
        return any(s["rule_id"] == rule_id and s["state"] == "done" and s["generation"] == 2 for s in scores)

    wait_until(scored, 60, 0.1, what="the session's score")
    detail = client.get(f"/v1/sessions/{thread}").json()
    assert (detail["num_traces"], detail["inputs"], detail["outputs"]) == (2, {"q": "hi"}, "BYE")
    (score,) = [s for s in detail["scores"] if s["generation"] == 2]
    assert (score["score"], score["current"], score["target_id"]) == (2.0, True, f"{thread}#2")
    client.delete(f"/v1/online-rules/{rule_id}")
