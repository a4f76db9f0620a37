"""Rules over the API and real scoring: a Python, a JavaScript and a TypeScript evaluator score
stored traces once per rule, visible in ``GET /v1/traces/{id}``, ``/scores`` and ``/stats``; rule
CRUD, validation and workspaces (another's ids answer 404); hostile rules (an evaluator that
raises, one that times out, one deleted, a mapping path to nothing) store results and leave the
service healthy. Spans go straight into the tables here (tests/support/online.py)."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from tests.support.online import chat_trace, hex_id, trace_states
from tests.support.service import make_settings
from tests.support.wait import wait_until

ADMIN = "operator-key-for-online-tests"
PY = (
    "def evaluate(inputs, outputs, trace):\n"
    "    root = next(iter(trace['spans'].values()))\n"
    "    ok = outputs == '4' and inputs == {'q': '2+2?'} and root['name'] == 'chat'\n"
    "    return {'score': 1.0 if ok else 0.0, 'passed': ok, 'label': 'right' if ok else 'wrong'}\n"
)
JS = (
    "function evaluate(inputs, outputs, trace) {\n"
    "  const ok = outputs === '4' && Object.keys(trace.spans).length === 1;\n"
    "  return { score: ok ? 1 : 0, label: 'js' };\n}\nmodule.exports = { evaluate };\n"
)
TS = (
    "export function evaluate(inputs: { q: string }, outputs: string, trace: any): number {\n"
    "  return inputs.q === '2+2?' ? 0.5 : 0;\n}\n"
)


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    settings = make_settings(tmp_path_factory.mktemp("online"), backend="process", admin_key=ADMIN, online_poll_s=0.05)
    with TestClient(create_app(settings)) as client:
        op = auth(ADMIN)
        heads = []
        for name in ("a", "b"):
            ws = client.post("/v1/workspaces", json={"name": name}, headers=op).json()
            key = client.post(f"/v1/workspaces/{ws['id']}/keys", json={"name": "k"}, headers=op).json()
            heads.append((ws["id"], auth(key["key"])))
        yield {"client": client, "a": heads[0], "b": heads[1], "engine": client.app.state.services.store.engine}  # type: ignore[attr-defined]


def evaluator(client: TestClient, headers: dict[str, str], language: str, code: str, **body: Any) -> str:
    made = client.post(
        "/v1/evaluators", json={"name": language, "language": language, "code": code, **body}, headers=headers
    )
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def scored(client: TestClient, headers: dict[str, str], trace_id: str, rules: Collection[str]) -> dict[str, Any]:
    """The trace once the scores of each of ``rules`` are done (the module's earlier tests' rules, still
    there, score it too: their scores are not waited for)."""
    found: dict[str, Any] = {}

    def done() -> bool:
        found.update(client.get(f"/v1/traces/{trace_id}", headers=headers).json())
        return set(rules) <= {s["rule_id"] for s in found.get("scores", []) if s["state"] == "done"}

    wait_until(done, 120, 0.05, what=f"the scores of {len(rules)} rules of {trace_id}")
    return found


def test_rules_crud_validation_and_workspaces(world: dict[str, Any]) -> None:
    client, (ws_a, ha), (_, hb) = world["client"], world["a"], world["b"]
    ev = evaluator(client, ha, "python", PY)
    made = client.post("/v1/online-rules", json={"evaluator_id": ev, "sampling_rate": 1.0}, headers=ha)
    assert made.status_code == 201, made.text
    rule = made.json()
    assert rule["id"].startswith("rule_") and rule["enabled"] is True and rule["revision"] is None
    assert rule["filter"] == {"service_name": None, "span_name": None, "attributes": []} and rule["mapping"] is None
    full = {
        "evaluator_id": ev,
        "name": "prod chats",
        "revision": 1,
        "filter": {"service_name": "chat-api", "attributes": [{"key": "env", "equals": "prod"}]},
        "sampling_rate": 0.25,
        "mapping": {"inputs": "root.attributes.ag.data.inputs"},
    }
    second = client.post("/v1/online-rules", json=full, headers=ha).json()
    assert second["filter"]["attributes"] == [{"key": "env", "equals": "prod", "exists": None}]
    page = client.get("/v1/online-rules?limit=1", headers=ha).json()
    assert page["count"] == 1 and page["data"][0]["id"] == second["id"] and page["next_cursor"]
    rest = client.get(f"/v1/online-rules?limit=1&cursor={page['next_cursor']}", headers=ha).json()
    assert [r["id"] for r in rest["data"]] == [rule["id"]] and rest["next_cursor"] is None
    patched = client.patch(f"/v1/online-rules/{second['id']}", json={"enabled": False, "revision": None}, headers=ha)
    assert patched.status_code == 200 and patched.json()["enabled"] is False and patched.json()["revision"] is None
    assert patched.json()["sampling_rate"] == 0.25  # what is not given stays

    bad = [
        {"sampling_rate": 1.0},  # no evaluator
        {"evaluator_id": ev, "sampling_rate": 1.5},
        {"evaluator_id": ev, "filter": {"attributes": [{"key": "env"}]}},  # neither equals nor exists
        {"evaluator_id": ev, "filter": {"attributes": [{"key": "env", "equals": "x", "exists": True}]}},
        {"evaluator_id": ev, "mapping": {"inputs": "nowhere.at.all"}},
        {"evaluator_id": ev, "extra": 1},
        {"evaluator_id": "ev_missing"},
        {"evaluator_id": ev, "revision": 99},
    ]
    for body in bad:
        answer = client.post("/v1/online-rules", json=body, headers=ha)
        assert answer.status_code == 422, (body, answer.text)
    assert client.post("/v1/online-rules", json={"evaluator_id": ev}, headers=hb).status_code == 422  # A's evaluator
    assert client.patch(f"/v1/online-rules/{rule['id']}", json={"enabled": None}, headers=ha).status_code == 422

    # B sees none of A's: every route answers what an unknown id answers
    for path in (
        f"/v1/online-rules/{rule['id']}",
        f"/v1/online-rules/{rule['id']}/scores",
        f"/v1/online-rules/{rule['id']}/stats",
    ):
        assert client.get(path, headers=hb).status_code == 404
        assert client.get(path.replace(rule["id"], "rule_nope"), headers=ha).status_code == 404
    assert client.patch(f"/v1/online-rules/{rule['id']}", json={"enabled": False}, headers=hb).status_code == 404
    assert client.delete(f"/v1/online-rules/{rule['id']}", headers=hb).status_code == 404
    assert client.get("/v1/online-rules", headers=hb).json()["data"] == []
    trace_id = chat_trace(world["engine"], workspace=ws_a)
    assert client.get(f"/v1/traces/{trace_id}", headers=ha).status_code == 200
    # routed (with this test's rule) before the rule goes: else the next test's rules could route it
    wait_until(lambda: trace_states(world["engine"])[trace_id] == "routed", 60, 0.05, what=f"{trace_id} routed")
    assert client.get(f"/v1/traces/{trace_id}", headers=hb).status_code == 404
    assert client.get(f"/v1/traces/{hex_id(16)}", headers=ha).status_code == 404
    assert client.get("/v1/traces/not-hex", headers=ha).status_code == 400
    assert client.get("/v1/traces", headers=hb).json()["data"] == []
    assert (
        client.get(f"/v1/online-rules/{rule['id']}/stats?bucket=1&since=2020-01-01T00:00:00Z", headers=ha).status_code
        == 422
    )
    assert client.get("/v1/online-rules", headers=auth(ADMIN)).status_code == 403

    for r in (rule, second):
        assert client.delete(f"/v1/online-rules/{r['id']}", headers=ha).status_code == 204
    assert client.get(f"/v1/online-rules/{rule['id']}", headers=ha).status_code == 404
    assert client.delete(f"/v1/online-rules/{rule['id']}", headers=ha).status_code == 404


def test_python_javascript_and_typescript_rules_score_each_trace_once(world: dict[str, Any]) -> None:
    client, (ws_a, ha) = world["client"], world["a"]
    rules = {}
    for language, code in (("python", PY), ("javascript", JS), ("typescript", TS)):
        ev = evaluator(client, ha, language, code)
        made = client.post("/v1/online-rules", json={"evaluator_id": ev, "name": language}, headers=ha)
        rules[language] = made.json()["id"]
    traces = [chat_trace(world["engine"], workspace=ws_a) for _ in range(3)]
    for trace_id in traces:
        found = scored(client, ha, trace_id, rules.values())
        by_rule = {s["rule_id"]: s for s in found["scores"] if s["rule_id"] in rules.values()}
        assert len(by_rule) == 3
        py, js, ts = (by_rule[rules[k]] for k in ("python", "javascript", "typescript"))
        assert py["status"] == "ok" and py["score"] == 1.0 and py["passed"] is True and py["label"] == "right", py
        assert js["status"] == "ok" and js["score"] == 1.0 and js["label"] == "js", (
            js
        )  # one root (the llm span is its child)
        assert ts["status"] == "ok" and ts["score"] == 0.5, ts
        assert py["revision"] == 1 and py["runtime_id"] and py["result"]["interface"] == "evaluate"
        assert found["inputs"] == {"q": "2+2?"} and found["outputs"] == "4"
        assert found["state"] == "routed" and len(found["trace"]["spans"]) == 1

    listed = client.get(f"/v1/online-rules/{rules['python']}/scores?limit=2", headers=ha).json()
    assert listed["count"] == 2 and listed["next_cursor"]
    more = client.get(f"/v1/online-rules/{rules['python']}/scores?cursor={listed['next_cursor']}", headers=ha).json()
    assert {s["trace_id"] for s in listed["data"] + more["data"]} == set(traces)
    assert (
        client.get(f"/v1/online-rules/{rules['python']}/scores?since=2099-01-01T00:00:00Z", headers=ha).json()["data"]
        == []
    )
    stats = client.get(f"/v1/online-rules/{rules['python']}/stats?bucket=60", headers=ha).json()
    assert len(stats["buckets"]) == 60
    filled = [b for b in stats["buckets"] if b["count"]]
    assert sum(b["count"] for b in filled) == 3 and {b["mean_score"] for b in filled} == {1.0}
    assert {b["pass_rate"] for b in filled} == {1.0} and sum(b["labels"].get("right", 0) for b in filled) == 3
    feed = client.get("/v1/traces?limit=2", headers=ha).json()
    assert feed["count"] == 2 and feed["next_cursor"] and feed["data"][0]["scores"]
    # the scorer counts its stored rows once their transaction is back, after the rows read done: wait for it
    counted = f'evaluator_host_online_scores_total{{rule="{rules["typescript"]}",status="ok"}} 3.0'

    def counted_in() -> str | None:
        text = client.get("/metrics").text
        return text if counted in text else None

    metrics = wait_until(counted_in, 30, what=counted)
    assert "evaluator_host_online_scoring_lag_seconds_count" in metrics and "evaluator_host_online_backlog" in metrics
    # the backlog is the router's last count: its pass after the last score (nudged by it) recounts it
    wait_until(lambda: client.get("/healthz").json()["online"] == {"backlog": 0, "dropped": 0}, 30, what="no backlog")
    for rule_id in rules.values():  # leave the next test its own rules
        client.delete(f"/v1/online-rules/{rule_id}", headers=ha)


def test_hostile_rules_store_results_and_the_service_stays_healthy(world: dict[str, Any]) -> None:
    client, (ws_a, ha) = world["client"], world["a"]
    raises = evaluator(client, ha, "python", "def evaluate(inputs, outputs, trace):\n    raise ValueError('boom')\n")
    sleeps = evaluator(
        client,
        ha,
        "python",
        "import time\ndef evaluate(inputs, outputs, trace):\n    time.sleep(30)\n",
        settings={"timeout_s": 0.5},
    )
    doomed = evaluator(client, ha, "python", PY)
    fine = evaluator(client, ha, "python", PY)
    rules = {
        "raises": {"evaluator_id": raises},
        "sleeps": {"evaluator_id": sleeps},
        "deleted": {"evaluator_id": doomed},
        "nothing": {"evaluator_id": fine, "mapping": {"outputs": "span.attributes.no.such.key"}},
    }
    ids = {k: client.post("/v1/online-rules", json=v, headers=ha).json()["id"] for k, v in rules.items()}
    assert client.delete(f"/v1/evaluators/{doomed}", headers=ha).status_code == 204
    trace_id = chat_trace(world["engine"], workspace=ws_a)
    found = scored(client, ha, trace_id, ids.values())
    by = {k: next(s for s in found["scores"] if s["rule_id"] == v) for k, v in ids.items()}
    assert by["raises"]["status"] == "error" and by["raises"]["result"]["error"]["type"] == "ValueError"
    assert by["sleeps"]["status"] == "timeout"
    assert by["deleted"]["status"] == "error" and by["deleted"]["result"]["error"]["type"] == "NotFound"
    assert by["nothing"]["status"] == "error" and "found nothing" in by["nothing"]["result"]["error"]["message"]
    assert all(s["state"] == "done" and s["attempts"] == 1 for s in by.values())
    assert client.get("/healthz").json()["status"] == "ok"
    after = client.post(
        "/v1/evaluate",
        json={"language": "python", "code": "def evaluate(inputs, outputs, trace):\n    return 1.0\n"},
        headers=ha,
    )
    assert after.status_code == 200 and after.json()["status"] == "ok"
    # the rule first: a trace is routed once, with the rules that exist when it is (a rule made after
    # its trace was routed never scores it — docs/online.md, How it works)
    again = client.post("/v1/online-rules", json={"evaluator_id": fine}, headers=ha).json()["id"]
    healthy_trace = chat_trace(world["engine"], workspace=ws_a)
    healthy = scored(client, ha, healthy_trace, [again])["scores"]
    assert next(s for s in healthy if s["rule_id"] == again)["score"] == 1.0
    ids["again"] = again
    for rule_id in ids.values():
        client.delete(f"/v1/online-rules/{rule_id}", headers=ha)


@pytest.mark.slow
def test_a_pinned_package_python_evaluator_scores(world: dict[str, Any]) -> None:
    client, (ws_a, ha) = world["client"], world["a"]
    code = "import six\ndef evaluate(inputs, outputs, trace):\n    return {'score': 1.0, 'label': six.__version__}\n"
    ev = evaluator(client, ha, "python", code, packages={"six": "1.16.0"}, settings={"timeout_s": 60})
    rule_id = client.post("/v1/online-rules", json={"evaluator_id": ev}, headers=ha).json()["id"]
    trace_id = chat_trace(world["engine"], workspace=ws_a)
    score = next(s for s in scored(client, ha, trace_id, [rule_id])["scores"] if s["rule_id"] == rule_id)
    assert score["status"] == "ok" and score["label"] == "1.16.0", score
    assert score["result"]["runtime"]["packages"] == {"six": "1.16.0"}
    client.delete(f"/v1/online-rules/{rule_id}", headers=ha)
