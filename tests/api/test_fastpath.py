"""The fast path answers the evaluate routes exactly as the app does, and leaves everything else to it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.api.middleware.fastpath import FastPath
from tests.support.service import make_settings
from tests.support.wait import wait_until

KEY = "k-fastpath-test"
AUTH = {"Authorization": f"Bearer {KEY}"}
GOOD = "def evaluate(inputs, outputs, trace):\n    return outputs == inputs['correct_answer']\n"
LEGACY = "def evaluate(app_params, inputs, output, correct_answer):\n    return float(output == correct_answer)\n"
RAISES = "def evaluate(inputs, outputs, trace):\n    print('hi')\n    raise ValueError('no')\n"
JS = "function evaluate(inputs, outputs, trace) {\n  return {score: 0.5, details: {why: 'half'}}\n}\n"
CASE = {"inputs": {"correct_answer": "4"}, "outputs": "4"}


def _fast_path(app: Any) -> FastPath | None:
    layer = app.middleware_stack
    while layer is not None:
        if isinstance(layer, FastPath):
            return layer
        layer = getattr(layer, "app", None)
    return None


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, TestClient]]:
    """The same service twice (API keys on): with the fast path, and without it."""
    clients = []
    for fast in (True, False):
        settings = make_settings(tmp_path_factory.mktemp(f"fast-{fast}"), backend="process", fast_path=fast)
        settings.api_keys = [KEY]
        clients.append(TestClient(create_app(settings)))
    with clients[0] as fast_client, clients[1] as slow_client:
        yield fast_client, slow_client


def _comparable(answer: Any) -> Any:
    """An answer without what differs between two services by design (ids, timings)."""
    if isinstance(answer, dict):
        return {k: _comparable(v) for k, v in answer.items() if k not in ("duration_ms", "evaluator_id")}
    if isinstance(answer, list):
        return [_comparable(v) for v in answer]
    if isinstance(answer, str):
        return re.sub(r"ev_[0-9a-f]{20}", "<id>", answer)
    return answer


def _both(pair: tuple[TestClient, TestClient], path: str, **kwargs: Any) -> tuple[Any, Any]:
    answers = []
    name = kwargs.pop("_name", "good")
    for client in pair:
        evaluator_path = path
        if "{id}" in path:
            evaluator_path = path.format(id=client.app.state.test_ids[name])  # type: ignore[attr-defined]
        response = client.post(evaluator_path, **kwargs)
        answers.append((response.status_code, response.headers.get("content-type"), response.content))
    (fast_status, fast_type, fast_body), (slow_status, slow_type, slow_body) = answers
    assert (fast_status, fast_type) == (slow_status, slow_type), (fast_body, slow_body)
    return json.loads(fast_body), json.loads(slow_body)


@pytest.fixture(scope="module")
def stored(pair: tuple[TestClient, TestClient]) -> None:
    for client in pair:
        ids = {}
        for name, language, code in (("good", "python", GOOD), ("legacy", "python", LEGACY), ("js", "javascript", JS)):
            body = {"name": name, "language": language, "code": code}
            ids[name] = client.post("/v1/evaluators", json=body, headers=AUTH).json()["id"]
        client.app.state.test_ids = ids  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "body",
    [
        {"language": "python", "code": GOOD, **CASE},
        {"language": "python", "code": RAISES, **CASE},
        {"language": "python", "code": LEGACY, **CASE, "app_params": {"x": 1}},
        {"language": "javascript", "code": JS, **CASE},
        {"language": "python", "code": GOOD, "cases": [CASE, {**CASE, "outputs": "5"}]},
        {"language": "python", "code": "def evaluate(:\n", **CASE},
        {"language": "cobol", "code": GOOD},
        {"language": "python", "code": GOOD, "packages": {"not a name!": "1"}},
    ],
    ids=["ok", "raises", "legacy", "js", "batch", "syntax-error", "bad-language", "bad-pin"],
)
def test_inline_answers_are_the_apps(pair: tuple[TestClient, TestClient], body: dict[str, Any]) -> None:
    fast, slow = _both(pair, "/v1/evaluate", json=body, headers=AUTH)
    assert _comparable(fast) == _comparable(slow)


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("good", CASE),
        ("good", {**CASE, "revision": 1}),
        ("good", {**CASE, "revision": 7}),
        ("good", {**CASE, "revision": 0}),
        ("good", {**CASE, "revision": "1"}),
        ("good", {**CASE, "unknown_field": 1}),
        ("legacy", {**CASE, "app_params": {"a": 1}}),
        ("js", CASE),
        ("good", {"cases": [CASE, {**CASE, "extra": 1}]}),
        ("good", {"cases": [CASE] * 3}),
    ],
    ids=[
        "ok",
        "revision",
        "no-such-revision",
        "revision-0",
        "revision-str",
        "extra",
        "legacy",
        "js",
        "bad-case",
        "batch",
    ],
)
def test_by_id_answers_are_the_apps(
    pair: tuple[TestClient, TestClient], stored: None, name: str, body: dict[str, Any]
) -> None:
    fast, slow = _both(pair, "/v1/evaluators/{id}/evaluate", json=body, headers=AUTH, _name=name)
    assert _comparable(fast) == _comparable(slow)


def test_an_unknown_evaluator_is_the_apps_404(pair: tuple[TestClient, TestClient]) -> None:
    fast, slow = _both(pair, "/v1/evaluators/ev_nope/evaluate", json=CASE, headers=AUTH)
    assert fast == slow and fast["error"]["type"] == "NotFound"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"json": {"language": "python", "code": GOOD}},  # no key
        {"json": {"language": "python", "code": GOOD}, "headers": {"Authorization": "Bearer wrong"}},
        {"content": b"{not json", "headers": {**AUTH, "Content-Type": "application/json"}},
        {
            "content": json.dumps({"language": "python", "code": GOOD}),
            "headers": {**AUTH, "Content-Type": "text/plain"},
        },
        {"content": b"x" * (17 * 1024 * 1024), "headers": {**AUTH, "Content-Type": "application/json"}},
    ],
    ids=["no-key", "wrong-key", "malformed", "not-json-type", "too-large"],
)
def test_what_it_does_not_take_gets_the_apps_answer(
    pair: tuple[TestClient, TestClient], kwargs: dict[str, Any]
) -> None:
    fast, slow = _both(pair, "/v1/evaluate", **kwargs)
    assert _comparable(fast) == _comparable(slow)
    assert "error" in fast


_PER_SERVICE = ("id", "evaluator_id", "dataset_id", "created_at", "started_at", "finished_at", "rows_per_s")


def _job_answers(pair: tuple[TestClient, TestClient], path: str, headers: dict[str, str]) -> tuple[Any, Any]:
    answers = []
    for client in pair:
        job_path = path.format(id=client.app.state.test_job) if "{id}" in path else path  # type: ignore[attr-defined]
        response = client.get(job_path, headers=headers)
        answers.append((response.status_code, response.headers.get("content-type"), response.json()))
    (fast_status, fast_type, fast), (slow_status, slow_type, slow) = answers
    assert (fast_status, fast_type) == (slow_status, slow_type), (fast, slow)
    if fast_status == 200:
        assert fast.keys() == slow.keys()
        for name in _PER_SERVICE:
            assert (fast[name] is None) == (slow[name] is None), name
            fast.pop(name), slow.pop(name)
    return fast, slow


@pytest.fixture(scope="module")
def finished_job(pair: tuple[TestClient, TestClient], stored: None) -> None:
    for client in pair:
        ids = client.app.state.test_ids  # type: ignore[attr-defined]
        rows = [{"correct_answer": "4", "outputs": str(i % 3)} for i in range(30)]
        job = client.post("/v1/jobs", json={"evaluator_id": ids["good"], "rows": rows}, headers=AUTH).json()
        url = f"/v1/jobs/{job['id']}"
        wait_until(lambda c=client, u=url: c.get(u, headers=AUTH).json()["status"] not in ("queued", "running"), 30)
        client.app.state.test_job = job["id"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/v1/jobs/{id}", AUTH),
        ("/v1/jobs/{id}?unused=1", AUTH),
        ("/v1/jobs/{id}?wait_s=5", AUTH),
        ("/v1/jobs/{id}?wait_s=61", AUTH),
        ("/v1/jobs/job_nope", AUTH),
        ("/v1/jobs/{id}", {}),
        ("/v1/jobs/{id}", {"Authorization": "Bearer wrong"}),
        ("/v1/jobs/{id}/", AUTH),
    ],
    ids=["finished", "query", "wait", "wait-too-long", "unknown", "no-key", "wrong-key", "trailing-slash"],
)
def test_job_reads_are_the_apps(
    pair: tuple[TestClient, TestClient], finished_job: None, path: str, headers: dict[str, str]
) -> None:
    fast, slow = _job_answers(pair, path, headers)
    assert fast == slow


def test_the_hot_routes_go_the_fast_way_and_the_rest_do_not(pair: tuple[TestClient, TestClient]) -> None:
    fast_client, slow_client = pair
    layer = _fast_path(fast_client.app)
    assert layer is not None and _fast_path(slow_client.app) is None
    before = layer.answered
    assert (
        fast_client.post("/v1/evaluate", json={"language": "python", "code": GOOD, **CASE}, headers=AUTH).json()[
            "score"
        ]
        == 1.0
    )
    assert fast_client.post("/v1/evaluate", json={"language": "python"}, headers=AUTH).status_code == 422
    assert fast_client.get("/v1/evaluators", headers=AUTH).status_code == 200
    assert layer.answered == before + 1
    job = fast_client.post("/v1/jobs", json={"evaluator_id": "ev_nope", "rows": [{}]}, headers=AUTH)
    assert job.status_code == 404 and layer.answered == before + 1  # POST /v1/jobs: the app's
    assert fast_client.get("/v1/jobs/job_nope", headers=AUTH).status_code == 404
    assert layer.answered == before + 1  # an error is rendered by the app's own handler, not counted
    assert fast_client.get("/v1/jobs/job_nope/results", headers=AUTH).status_code == 404
    assert layer.answered == before + 1


def test_a_job_read_goes_the_fast_way(pair: tuple[TestClient, TestClient], finished_job: None) -> None:
    fast_client = pair[0]
    layer = _fast_path(fast_client.app)
    assert layer is not None
    before = layer.answered
    job_id = fast_client.app.state.test_job  # type: ignore[attr-defined]
    answer = fast_client.get(f"/v1/jobs/{job_id}", headers=AUTH)
    assert answer.status_code == 200 and answer.json()["progress"]["done"] == 30
    assert layer.answered == before + 1
    waited = fast_client.get(f"/v1/jobs/{job_id}", params={"wait_s": 5}, headers=AUTH)  # a long poll: the app's
    assert waited.json() == answer.json() and layer.answered == before + 1
