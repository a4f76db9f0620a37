"""Workspaces and keys: every /v1 route scoped to the key's workspace, another's ids answer 404.

One service (process backend) with an operator key and a legacy ``EVALUATOR_HOST_API_KEYS`` key;
workspace A owns an evaluator, a dataset, a finished job and a secret; B's key is then tried on
every route with A's ids, and must get exactly what an id that never existed gets.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from tests.support.service import make_settings
from tests.support.wait import wait_until

ADMIN = "operator-key-for-tests"
LEGACY = "legacy-key-for-tests"
CODE = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"
TRACE = "a" * 32  # workspace A's trace (sent over OTLP/JSON)
UNKNOWN_TRACE = "0123456789abcdef" * 2
SESSION = "c" * 32  # workspace A's session (an id the 404 comparison neutralizes, as a trace id)
LEGACY_CODE = "def evaluate(app_params, inputs, output, correct_answer):\n    return 1.0\n"  # migrate reads rows


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    settings = make_settings(
        tmp_path_factory.mktemp("workspaces"), backend="process", admin_key=ADMIN, api_keys=[LEGACY]
    )
    with TestClient(create_app(settings)) as client:
        op = auth(ADMIN)
        a = client.post("/v1/workspaces", json={"name": "team-a"}, headers=op).json()
        b = client.post("/v1/workspaces", json={"name": "team-b"}, headers=op).json()
        key_a = client.post(f"/v1/workspaces/{a['id']}/keys", json={"name": "ci"}, headers=op).json()
        key_b = client.post(f"/v1/workspaces/{b['id']}/keys", json={"name": "ci"}, headers=op).json()
        ha, hb = auth(key_a["key"]), auth(key_b["key"])
        ev = client.post("/v1/evaluators", json={"name": "a", "language": "python", "code": CODE}, headers=ha)
        assert ev.status_code == 201, ev.text
        ds = client.post("/v1/datasets", content=b'{"outputs": 1}\n', headers={**ha, "content-type": "text/jsonl"})
        assert ds.status_code == 201, ds.text
        job = client.post("/v1/jobs", json={"evaluator_id": ev.json()["id"], "dataset_id": ds.json()["id"]}, headers=ha)
        assert job.status_code == 202, job.text
        wait_until(lambda: client.get(f"/v1/jobs/{job.json()['id']}", headers=ha).json()["status"] == "succeeded")
        assert client.put("/v1/secrets/TOKEN", json={"value": "a-secret-value-1234"}, headers=ha).status_code == 204
        rule = client.post("/v1/online-rules", json={"evaluator_id": ev.json()["id"]}, headers=ha)
        assert rule.status_code == 201, rule.text
        span = {"traceId": TRACE, "spanId": "b" * 16, "name": "chat", "startTimeUnixNano": "1", "endTimeUnixNano": "2"}
        otlp = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
        assert client.post("/v1/traces", json=otlp, headers=ha).status_code == 200
        turn = {**span, "traceId": "d" * 32, "attributes": [{"key": "session.id", "value": {"stringValue": SESSION}}]}
        in_session = {"resourceSpans": [{"scopeSpans": [{"spans": [turn]}]}]}
        assert client.post("/v1/traces", json=in_session, headers=ha).status_code == 200
        backfill = client.post(f"/v1/online-rules/{rule.json()['id']}/backfill", json={}, headers=ha)
        assert backfill.status_code == 202, backfill.text
        wait_until(lambda: client.get(f"/v1/sessions/{SESSION}", headers=ha).status_code == 200, 60, 0.1)
        queue = client.post("/v1/review-queues", json={"name": "q", "source": {"job_id": job.json()["id"]}}, headers=ha)
        assert queue.status_code == 201 and queue.json()["items"] == 1, queue.text
        item = client.get(f"/v1/review-queues/{queue.json()['id']}/items", headers=ha).json()["data"][0]
        verdict = f"/v1/review-queues/{queue.json()['id']}/items/{item['id']}/verdict"
        assert client.post(verdict, json={"passed": True}, headers=ha).status_code == 201
        body_b = {"name": "b", "language": "python", "code": LEGACY_CODE}
        ev_b = client.post("/v1/evaluators", json=body_b, headers=hb).json()
        yield {
            "client": client,
            "a": a,
            "b": b,
            "key_a": key_a,
            "ha": ha,
            "hb": hb,
            "ev": ev.json()["id"],
            "ds": ds.json()["id"],
            "job": job.json()["id"],
            "ev_b": ev_b["id"],
            "rule": rule.json()["id"],
            "trace": TRACE,
            "backfill": backfill.json()["id"],
            "session": SESSION,
            "queue": queue.json()["id"],
            "item": item["id"],
        }


# Every /v1 route a workspace key may call with an id in it: (method, path, body). {ev}, {ds}, {job}
# are workspace A's ids; {ev_b} is B's own evaluator (for bodies naming A's dataset).
BY_ID = [
    ("GET", "/v1/evaluators/{ev}", None),
    ("PUT", "/v1/evaluators/{ev}", {"name": "x", "language": "python", "code": CODE}),
    ("PATCH", "/v1/evaluators/{ev}", {"name": "x"}),
    ("DELETE", "/v1/evaluators/{ev}", None),
    ("GET", "/v1/evaluators/{ev}/revisions", None),
    ("POST", "/v1/evaluators/{ev}/evaluate", {"outputs": 1}),
    ("POST", "/v1/evaluators/{ev}/migrate", {"cases": [{"outputs": 1}]}),
    ("POST", "/v1/evaluators/{ev_b}/migrate", {"dataset_id": "{ds}"}),
    ("POST", "/v1/evaluators/{ev}/test", {}),
    ("POST", "/v1/evaluators/{ev}/compare", {"base_revision": 1, "head_revision": 1, "cases": [{"outputs": 1}]}),
    ("POST", "/v1/evaluators/{ev_b}/compare", {"base_revision": 1, "head_revision": 1, "dataset_id": "{ds}"}),
    ("POST", "/v1/results/replay", {"job_id": "{job}", "index": 0}),
    ("GET", "/v1/datasets/{ds}", None),
    ("GET", "/v1/datasets/{ds}/rows", None),
    ("DELETE", "/v1/datasets/{ds}", None),
    ("GET", "/v1/jobs/{job}", None),
    ("DELETE", "/v1/jobs/{job}", None),
    ("POST", "/v1/jobs/{job}/cancel", None),
    ("POST", "/v1/jobs/{job}/sinks/redeliver", None),
    ("GET", "/v1/jobs/{job}/results", None),
    ("GET", "/v1/jobs/{job}/results?format=ndjson", None),
    ("GET", "/v1/jobs/{job}/results?format=csv", None),
    ("POST", "/v1/jobs", {"evaluator_id": "{ev}", "rows": [{"outputs": 1}]}),
    ("POST", "/v1/jobs", {"evaluator_id": "{ev_b}", "dataset_id": "{ds}"}),
    ("DELETE", "/v1/secrets/TOKEN", None),
    ("GET", "/v1/online-rules/{rule}", None),
    ("PATCH", "/v1/online-rules/{rule}", {"enabled": False}),
    ("DELETE", "/v1/online-rules/{rule}", None),
    ("GET", "/v1/online-rules/{rule}/scores", None),
    ("GET", "/v1/online-rules/{rule}/stats", None),
    ("GET", "/v1/online-rules/{rule}/shadow", None),  # issue 53: shadow revisions
    ("POST", "/v1/online-rules/{rule}/promote", None),
    ("POST", "/v1/online-rules/{rule}/sinks/redeliver", None),
    ("GET", "/v1/traces/{trace}", None),
    ("POST", "/v1/online-rules/{rule}/backfill", {"dry_run": True}),
    ("POST", "/v1/online-rules/{rule}/backfill", {}),
    ("GET", "/v1/online-rules/{rule}/backfills/{backfill}", None),
    ("DELETE", "/v1/online-rules/{rule}/backfills/{backfill}", None),
    ("GET", "/v1/sessions/{session}", None),
    ("GET", "/v1/review-queues/{queue}", None),
    ("PATCH", "/v1/review-queues/{queue}", {"name": "x"}),
    ("DELETE", "/v1/review-queues/{queue}", None),
    ("POST", "/v1/review-queues/{queue}/refill", None),
    ("GET", "/v1/review-queues/{queue}/items", None),
    ("POST", "/v1/review-queues/{queue}/items/{item}/verdict", {"passed": False}),
    ("GET", "/v1/review-queues/{queue}/items/{item}/verdict", None),
    ("GET", "/v1/review-queues/{queue}/export", None),
    ("POST", "/v1/review-queues/{queue}/fixtures", {"all_reviewed": True}),
    ("GET", "/v1/evaluators/{ev}/agreement", None),
]
# Routes without an id of another workspace to try; what they show is checked below.
WITHOUT_ID = {
    ("POST", "/v1/evaluate"),
    ("POST", "/v1/inspect"),
    ("POST", "/v1/migrate"),
    ("POST", "/v1/traces"),
    # a rule naming another workspace's evaluator: 422, as an unknown evaluator (tests/online/test_scoring.py)
    ("POST", "/v1/online-rules"),
    # a trial naming another workspace's evaluator: 422; it reads its own workspace's traces only
    # (tests/online/test_trial.py)
    ("POST", "/v1/online-rules/test"),
    ("GET", "/v1/online-rules"),
    ("GET", "/v1/traces"),
    ("GET", "/v1/sessions"),
    # a queue on another workspace's job or rule: 422, as an unknown one (test_a_queue_on_another_workspaces_source)
    ("POST", "/v1/review-queues"),
    ("GET", "/v1/review-queues"),
    ("GET", "/v1/evaluators"),
    ("POST", "/v1/evaluators"),
    ("GET", "/v1/datasets"),
    ("POST", "/v1/datasets"),
    ("GET", "/v1/jobs"),
    ("GET", "/v1/secrets"),
    ("PUT", "/v1/secrets/{name}"),
}
# The runtimes: a build cache shared by every workspace (any key builds or reads one by id; a
# workspace's key lists only its own: tests/runtimes/test_api.py).
SHARED = {
    ("POST", "/v1/runtimes"),
    ("GET", "/v1/runtimes"),
    ("GET", "/v1/runtimes/{runtime_id}"),
    ("GET", "/v1/runtimes/{runtime_id}/lock"),
}
OPERATOR = {
    ("POST", "/v1/workspaces"),
    ("GET", "/v1/workspaces"),
    ("GET", "/v1/workspaces/{workspace_id}"),
    ("PATCH", "/v1/workspaces/{workspace_id}"),
    ("POST", "/v1/workspaces/{workspace_id}/keys"),
    ("GET", "/v1/keys"),
    ("DELETE", "/v1/keys/{key_id}"),
}


def _fill(value: Any, ids: dict[str, Any]) -> Any:
    if isinstance(value, str):
        return value.format(**{k: v for k, v in ids.items() if isinstance(v, str)})
    if isinstance(value, dict):
        return {k: _fill(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, ids) for v in value]
    return value


def _neutral(body: Any) -> Any:
    """An error body with ids and names replaced, to compare two 404s."""
    return re.sub(r"(ev|ds|job|rule|rq|ri)_[0-9a-zA-Z]+|[0-9a-f]{32}|TOKEN|NOSUCH", "<id>", str(body))


def test_the_table_covers_every_v1_route(world: dict[str, Any]) -> None:
    paths = world["client"].app.openapi()["paths"]
    routes = {(method.upper(), path) for path, item in paths.items() if path.startswith("/v1") for method in item}
    templated = {(m, re.sub(r"\{(ev|ev_b)\}", "{evaluator_id}", p.split("?")[0])) for m, p, _ in BY_ID}
    templated = {(m, p.replace("{ds}", "{dataset_id}").replace("{job}", "{job_id}")) for m, p in templated}
    templated = {(m, p.replace("/TOKEN", "/{name}")) for m, p in templated}
    templated = {(m, p.replace("{rule}", "{rule_id}").replace("{trace}", "{trace_id}")) for m, p in templated}
    templated = {(m, p.replace("{backfill}", "{backfill_id}")) for m, p in templated}
    templated = {(m, p.replace("{session}", "{session_id}")) for m, p in templated}
    templated = {(m, p.replace("{queue}", "{queue_id}").replace("{item}", "{item_id}")) for m, p in templated}
    assert routes == templated | WITHOUT_ID | SHARED | OPERATOR


@pytest.mark.parametrize(("method", "path", "body"), BY_ID, ids=[f"{m} {p}" for m, p, _ in BY_ID])
def test_another_workspaces_id_answers_exactly_like_an_unknown_id(
    world: dict[str, Any], method: str, path: str, body: Any
) -> None:
    client = world["client"]
    theirs = client.request(method, _fill(path, world), json=_fill(body, world), headers=world["hb"])
    missing = {
        "ev": "ev_NOSUCH", "ds": "ds_NOSUCH", "job": "job_NOSUCH", "ev_b": world["ev_b"],
        "rule": "rule_NOSUCH", "trace": UNKNOWN_TRACE, "backfill": "bf_NOSUCH", "session": UNKNOWN_TRACE,
        "queue": "rq_NOSUCH", "item": "ri_NOSUCH",
    }  # fmt: skip
    if "TOKEN" in path:
        path = path.replace("TOKEN", "NOSUCH")
    unknown = client.request(method, _fill(path, missing), json=_fill(body, missing), headers=world["hb"])
    assert theirs.status_code == 404, theirs.text
    assert unknown.status_code == 404, unknown.text
    assert _neutral(theirs.json()) == _neutral(unknown.json())


def test_a_queue_on_another_workspaces_source_is_refused_like_an_unknown_one(world: dict[str, Any]) -> None:
    client, hb = world["client"], world["hb"]
    for source, unknown in (({"job_id": world["job"]}, {"job_id": "job_NOSUCH"}),
                            ({"rule_id": world["rule"]}, {"rule_id": "rule_NOSUCH"})):  # fmt: skip
        theirs = client.post("/v1/review-queues", json={"name": "x", "source": source}, headers=hb)
        missing = client.post("/v1/review-queues", json={"name": "x", "source": unknown}, headers=hb)
        assert theirs.status_code == missing.status_code == 422, theirs.text
        assert _neutral(theirs.json()) == _neutral(missing.json())
    assert client.get("/v1/review-queues", headers=hb).json()["data"] == []
    assert [q["id"] for q in client.get("/v1/review-queues", headers=world["ha"]).json()["data"]] == [world["queue"]]


def test_a_still_owns_everything_after_bs_attempts(world: dict[str, Any]) -> None:
    client, ha = world["client"], world["ha"]
    assert client.get(f"/v1/evaluators/{world['ev']}", headers=ha).json()["revision"] == 1
    assert client.get(f"/v1/datasets/{world['ds']}", headers=ha).status_code == 200
    assert client.get(f"/v1/jobs/{world['job']}", headers=ha).json()["status"] == "succeeded"
    assert [s["name"] for s in client.get("/v1/secrets", headers=ha).json()["data"]] == ["TOKEN"]


def test_lists_show_only_the_workspaces_own(world: dict[str, Any]) -> None:
    client, ha, hb = world["client"], world["ha"], world["hb"]
    for path in ("/v1/evaluators", "/v1/datasets", "/v1/jobs", "/v1/secrets", "/v1/online-rules"):
        mine = {str(item.get("id", item.get("name"))) for item in client.get(path, headers=ha).json()["data"]}
        theirs = {str(item.get("id", item.get("name"))) for item in client.get(path, headers=hb).json()["data"]}
        assert not mine & theirs, path
    b_sees = {e["id"] for e in client.get("/v1/evaluators", headers=hb).json()["data"]}
    a_sees = {e["id"] for e in client.get("/v1/evaluators", headers=ha).json()["data"]}
    # B's own (the module's other tests may have made more of B's, in whatever order they ran), none of A's
    assert world["ev_b"] in b_sees and not b_sees & a_sees and world["ev_b"] not in a_sees
    assert client.get("/v1/traces", headers=hb).json()["data"] == []
    assert [t["trace_id"] for t in client.get("/v1/traces", headers=ha).json()["data"]] == ["d" * 32, TRACE]
    assert client.get("/v1/sessions", headers=hb).json()["data"] == []
    assert [x["session_id"] for x in client.get("/v1/sessions", headers=ha).json()["data"]] == [SESSION]
    assert client.get("/v1/evaluators", headers=auth(LEGACY)).json()["data"] == []  # the default workspace's


def test_a_secret_of_another_workspace_cannot_be_listed_by_an_evaluator(world: dict[str, Any]) -> None:
    body = {"language": "python", "code": CODE, "secrets": ["TOKEN"], "outputs": 1}
    response = world["client"].post("/v1/evaluate", json=body, headers=world["hb"])
    assert response.status_code == 422
    assert response.json()["error"]["type"] == "SecretError"
    assert "a-secret-value" not in response.text


def test_idempotency_keys_are_per_workspace(world: dict[str, Any]) -> None:
    client = world["client"]
    body = {"name": "same", "language": "python", "code": CODE}
    first = client.post("/v1/evaluators", json=body, headers={**world["ha"], "Idempotency-Key": "k-1"})
    second = client.post("/v1/evaluators", json=body, headers={**world["hb"], "Idempotency-Key": "k-1"})
    assert first.status_code == second.status_code == 201
    assert "idempotent-replayed" not in second.headers
    assert first.json()["id"] != second.json()["id"]


def test_operator_routes_refuse_workspace_keys_and_resource_routes_refuse_the_operator(
    world: dict[str, Any],
) -> None:
    client = world["client"]
    for key in (world["ha"], auth(LEGACY)):
        assert client.get("/v1/workspaces", headers=key).status_code == 403
        assert client.post("/v1/workspaces", json={"name": "x"}, headers=key).status_code == 403
        assert client.delete(f"/v1/keys/{world['key_a']['id']}", headers=key).status_code == 403
    refused = client.get("/v1/evaluators", headers=auth(ADMIN))
    assert refused.status_code == 403 and refused.json()["error"]["type"] == "Forbidden"
    assert client.get("/v1/workspaces").status_code == 401


def test_keys_are_shown_once_stored_hashed_and_listed_without_the_key(world: dict[str, Any]) -> None:
    client = world["client"]
    listed = client.get("/v1/keys", params={"workspace_id": world["a"]["id"]}, headers=auth(ADMIN)).json()["data"]
    assert [k["id"] for k in listed] == [world["key_a"]["id"]]
    assert "key" not in listed[0] and world["key_a"]["key"].startswith(listed[0]["prefix"])
    assert listed[0]["last_used_at"] is not None
    db = Path(client.app.state.settings.data_dir / "evaluator-host.db").read_bytes()
    assert world["key_a"]["key"].encode() not in db


def test_a_revoked_key_is_refused_at_once_on_every_path(tmp_path: Path) -> None:
    for fast_path in (True, False):
        settings = make_settings(tmp_path / str(fast_path), backend="process", admin_key=ADMIN, fast_path=fast_path)
        with TestClient(create_app(settings)) as client:
            ws = client.post("/v1/workspaces", json={"name": "w"}, headers=auth(ADMIN)).json()
            key = client.post(f"/v1/workspaces/{ws['id']}/keys", json={"name": "k"}, headers=auth(ADMIN)).json()
            hk = auth(key["key"])
            ev = client.post("/v1/evaluators", json={"name": "e", "language": "python", "code": CODE}, headers=hk)
            path = f"/v1/evaluators/{ev.json()['id']}/evaluate"
            for _ in range(3):  # warm: the key is in the ring's cache, the fast path answers
                assert client.post(path, json={"outputs": 1}, headers=hk).status_code == 200
            assert client.delete(f"/v1/keys/{key['id']}", headers=auth(ADMIN)).status_code == 204
            assert client.post(path, json={"outputs": 1}, headers=hk).status_code == 401
            assert client.post("/v1/evaluate", json={"language": "python", "code": CODE}, headers=hk).status_code == 401
            assert client.get("/v1/evaluators", headers=hk).status_code == 401
            listed = client.get("/v1/keys", headers=auth(ADMIN)).json()["data"]
            assert listed[0]["revoked_at"] is not None


def test_an_open_service_acts_in_the_default_workspace_until_a_key_exists(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path, backend="process"))) as client:
        assert client.get("/v1/evaluators").status_code == 200
        assert client.get("/v1/evaluators", headers=auth("anything")).status_code == 200  # ignored, as before
        assert client.get("/v1/workspaces").status_code == 403  # no operator key configured: no operator


def _job_until(client: TestClient, headers: dict[str, str], job_id: str, *states: str) -> None:
    wait_until(lambda: client.get(f"/v1/jobs/{job_id}", headers=headers).json()["status"] in states, 60, 0.02)


def test_quotas_answer_429_with_retry_after_and_only_for_their_workspace(world: dict[str, Any]) -> None:
    client, op, ha, hb = world["client"], auth(ADMIN), world["ha"], world["hb"]
    quotas = {"max_evaluations_per_s": 3, "max_concurrent_jobs": 1, "max_dataset_bytes": 400, "max_warm_workers": 2}
    patched = client.patch(f"/v1/workspaces/{world['b']['id']}", json={"quotas": quotas}, headers=op)
    assert patched.status_code == 200 and patched.json()["quotas"] == {**quotas, "max_evaluations_per_s": 3.0}
    assert client.app.state.services.pool.workspace_caps[world["b"]["id"]] == 2  # type: ignore[attr-defined]
    try:
        # evaluations per second: a bucket of 3 (full: nothing ran in b yet), refilled at 3 a second. The three
        # first calls pass whatever their pace; then calls pass only as fast as the refill lets them, so the
        # first refusal comes after at most 3 + 3 x (the calls' own seconds) answers (a loaded machine's calls
        # may take long enough to earn a token: the count follows from the policy, not from the machine's speed)
        path = f"/v1/evaluators/{world['ev_b']}/evaluate"
        started = time.monotonic()
        answers = [client.post(path, json={"outputs": 1}, headers=hb)]
        while answers[-1].status_code == 200 and len(answers) < 40:
            answers.append(client.post(path, json={"outputs": 1}, headers=hb))
        took = time.monotonic() - started
        codes = [a.status_code for a in answers]
        assert codes[-1] == 429 and set(codes[:-1]) == {200}, codes
        assert 3 <= codes.count(200) <= 3 + math.ceil(3 * took), (codes, took)
        refused = answers[-1]
        assert refused.json()["error"]["type"] == "QuotaExceeded"
        assert refused.json()["error"]["quota"] == "max_evaluations_per_s"
        assert int(refused.headers["Retry-After"]) >= 1
        too_many = client.post(path, json={"cases": [{"outputs": 1}] * 4}, headers=hb)
        assert too_many.status_code == 429 and "run them as a job" in too_many.json()["error"]["message"]
        assert "Retry-After" not in too_many.headers  # waiting would never make it fit
        assert all(client.post("/v1/evaluators/" + world["ev"] + "/evaluate", json={}, headers=ha).status_code == 200
                   for _ in range(5))  # fmt: skip
        # datasets: 400 bytes in all
        small = client.post("/v1/datasets", content=b'{"a": 1}\n' * 10, headers={**hb, "content-type": "text/jsonl"})
        assert small.status_code == 201, small.text
        big = client.post("/v1/datasets", content=b'{"a": 1}\n' * 60, headers={**hb, "content-type": "text/jsonl"})
        assert big.status_code == 429 and big.json()["error"]["quota"] == "max_dataset_bytes"
        assert "Retry-After" in big.headers
        assert [d["id"] for d in client.get("/v1/datasets", headers=hb).json()["data"]] == [small.json()["id"]]
        # jobs: one at a time
        slow = {
            "name": "slow",
            "language": "python",
            "code": "import time\ndef evaluate(i, o, t):\n    time.sleep(0.5)\n    return 1\n",
        }
        ev_slow = client.post("/v1/evaluators", json=slow, headers=hb).json()["id"]
        first = client.post("/v1/jobs", json={"evaluator_id": ev_slow, "rows": [{"outputs": 1}] * 4}, headers=hb)
        assert first.status_code == 202
        second = client.post("/v1/jobs", json={"evaluator_id": ev_slow, "rows": [{"outputs": 1}]}, headers=hb)
        assert second.status_code == 429 and second.headers["Retry-After"] == "5"
        assert second.json()["error"]["quota"] == "max_concurrent_jobs"
        other = client.post("/v1/jobs", json={"evaluator_id": world["ev"], "rows": [{"outputs": 1}]}, headers=ha)
        assert other.status_code == 202  # another workspace's jobs are not counted
        client.post(f"/v1/jobs/{first.json()['id']}/cancel", headers=hb)
        third = client.post("/v1/jobs", json={"evaluator_id": ev_slow, "rows": [{"outputs": 1}]}, headers=hb)
        assert third.status_code == 202
        _job_until(client, hb, third.json()["id"], "succeeded")
    finally:
        lifted = {k: None for k in quotas}
        client.patch(f"/v1/workspaces/{world['b']['id']}", json={"quotas": lifted}, headers=op)
    assert client.get(f"/v1/workspaces/{world['b']['id']}", headers=op).json()["quotas"] == lifted


def test_a_migrations_differential_run_is_charged_two_evaluations_a_row(world: dict[str, Any]) -> None:
    client, op = world["client"], auth(ADMIN)
    c = client.post("/v1/workspaces", json={"name": "team-migrate"}, headers=op).json()
    hc = auth(client.post(f"/v1/workspaces/{c['id']}/keys", json={"name": "ci"}, headers=op).json()["key"])
    ev = client.post("/v1/evaluators", json={"name": "m", "language": "python", "code": LEGACY_CODE}, headers=hc)
    assert ev.status_code == 201, ev.text
    path = f"/v1/evaluators/{ev.json()['id']}/migrate"
    # both revisions' workers started before the quota: the timed pair below answers in milliseconds, so the
    # bucket cannot refill between its two calls however slow a cold start is on a loaded machine
    warm = client.post(path, json={"cases": [{"outputs": 1}], "dry_run": True}, headers=hc)
    assert warm.status_code == 200 and warm.json()["compared"] == 1, warm.text
    patched = client.patch(f"/v1/workspaces/{c['id']}", json={"quotas": {"max_evaluations_per_s": 5}}, headers=op)
    assert patched.status_code == 200, patched.text
    # 3 rows run on both revisions: 6 evaluations, more than a bucket of 5 ever holds
    never = client.post(path, json={"cases": [{"outputs": 1}] * 3, "dry_run": True}, headers=hc)
    assert never.status_code == 429 and never.json()["error"]["quota"] == "max_evaluations_per_s"
    assert "Retry-After" not in never.headers
    # 2 rows: 4 evaluations fit once; the same call at once again overdraws the bucket
    answers = [client.post(path, json={"cases": [{"outputs": 1}] * 2, "dry_run": True}, headers=hc) for _ in range(2)]
    assert answers[0].status_code == 200 and answers[0].json()["compared"] == 2, answers[0].text
    assert answers[1].status_code == 429 and int(answers[1].headers["Retry-After"]) >= 1
    assert client.get("/healthz").status_code == 200
