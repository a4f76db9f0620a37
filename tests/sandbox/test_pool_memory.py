"""Warm workers × memory_mb never exceed the machine's memory budget (issue 28, item 12c).

A real service (process backend) with a small ``max_worker_memory_mb``: starting a worker that would
pass it evicts idle workers first; with every worker busy, a call needing a new one answers 503
``Overloaded`` with ``Retry-After``; a ``memory_mb`` above the whole budget is a 422; the service is
healthy afterwards. The budget is shared by workspaces (issue 47.7): one workspace that fills it with long
calls does not make another's call 503 — that call waits for the memory lent and is answered, and the first
workspace's own excess call is the one refused (the pool's rules: tests/sandbox/test_pool_memory_shares.py).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.sandbox.pool.memory import budget_mb, machine_memory_mb
from tests.support.service import assert_healthy, make_settings
from tests.support.wait import wait_until

BUDGET = 600  # MiB: two workers of 256 fit, a third does not


def _code(tag: str) -> str:
    sleep = "    time.sleep(inputs.get('s', 0))\n"
    return f"import time\n\ndef evaluate(inputs, outputs, trace):\n{sleep}    return 1.0  # {tag}\n"


def _call(  # type: ignore[type-arg]
    client: TestClient, tag: str, sleep: float = 0, memory_mb: int = 256, headers: dict[str, str] | None = None
) -> tuple[int, dict, dict]:
    body = {
        "language": "python",
        "code": _code(tag),
        "cases": [{"inputs": {"s": sleep}}],
        "settings": {"memory_mb": memory_mb, "timeout_s": 30},
    }
    response = client.post("/v1/evaluate", json=body, headers=headers)
    return response.status_code, dict(response.headers), response.json()


def _memory(client: TestClient) -> tuple[int, int]:
    workers = client.get("/healthz").json()["workers"]
    return workers["memory_mb"], workers["memory_budget_mb"]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_settings(
        tmp_path_factory.mktemp("memory"), backend="process", max_worker_memory_mb=BUDGET, spare_workers=0
    )
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def test_a_worker_that_would_pass_the_budget_evicts_an_idle_one_first(client: TestClient) -> None:
    for tag in ("a", "b", "c", "a"):
        status, _headers, body = _call(client, tag)
        assert status == 200 and body["results"][0]["status"] == "ok", body
        live, budget = _memory(client)
        assert budget == BUDGET and live <= BUDGET
    assert client.get("/healthz").json()["workers"]["total"] == 2
    assert_healthy(client)


def test_with_every_worker_busy_a_call_needing_another_answers_overloaded(client: TestClient) -> None:
    answers: list[int] = []
    busy = [threading.Thread(target=lambda t=tag: answers.append(_call(client, t, sleep=4)[0])) for tag in ("x", "y")]
    for thread in busy:
        thread.start()
    try:
        wait_until(lambda: not client.get("/healthz").json()["workers"]["idle"] and _memory(client)[0] >= 512, 30)
        status, headers, body = _call(client, "z")
        assert status == 503, body
        assert body["error"]["type"] == "Overloaded" and "max_worker_memory_mb" in body["error"]["message"]
        assert int(headers["retry-after"]) > 0
        assert _memory(client)[0] <= BUDGET
    finally:
        for thread in busy:
            thread.join(60)
    assert answers == [200, 200]
    status, _headers, body = _call(client, "z")  # room again once they are idle
    assert status == 200 and body["results"][0]["status"] == "ok", body
    assert_healthy(client)


def test_a_memory_mb_above_the_whole_budget_is_refused_not_started(client: TestClient) -> None:
    status, _headers, body = _call(client, "huge", memory_mb=1024)
    assert status == 422 and body["error"]["type"] == "LimitError", body
    assert "max_worker_memory_mb" in body["error"]["message"]
    assert _memory(client)[0] <= BUDGET
    assert_healthy(client)


def test_the_default_budget_is_a_fraction_of_the_machines_memory(tmp_path: Path) -> None:
    machine = machine_memory_mb()
    assert machine is not None and machine > 0
    assert budget_mb(make_settings(tmp_path)) == int(machine * 0.75)
    assert budget_mb(make_settings(tmp_path, max_worker_memory_mb=300)) == 300


def test_another_workspaces_call_waits_for_the_memory_one_workspace_borrowed_and_is_answered(tmp_path: Path) -> None:
    admin = "operator-key-for-memory-shares"
    settings = make_settings(tmp_path, backend="process", max_worker_memory_mb=BUDGET, spare_workers=0, admin_key=admin)
    with TestClient(create_app(settings)) as client:
        op = {"Authorization": f"Bearer {admin}"}
        heads = []
        for name in ("lender", "borrower"):
            ws = client.post("/v1/workspaces", json={"name": name}, headers=op).json()
            key = client.post(f"/v1/workspaces/{ws['id']}/keys", json={"name": "k"}, headers=op).json()["key"]
            heads.append({"Authorization": f"Bearer {key}"})
        ha, hb = heads
        holdings = client.app.state.services.pool.leasing.holdings  # type: ignore[attr-defined]
        answers: dict[str, tuple[int, dict, dict]] = {}  # type: ignore[type-arg]

        def call(name: str, tag: str, sleep: float, headers: dict[str, str]) -> None:
            answers[name] = _call(client, tag, sleep=sleep, headers=headers)

        # workspace A alone fills the budget with two long calls (work-conserving: 512 of 600 MiB)
        busy = [threading.Thread(target=call, args=(t, t, 4, ha)) for t in ("x", "y")]
        for thread in busy:
            thread.start()
        waiting_b = threading.Thread(target=call, args=("b", "b", 0, hb))
        try:
            wait_until(lambda: not client.get("/healthz").json()["workers"]["idle"] and _memory(client)[0] >= 512, 30)
            # B's call: no 503, it waits for the memory A holds beyond its share
            waiting_b.start()
            wait_until(lambda: any(n for n in holdings.waiting.values()), 30)
            status, _headers, body = _call(client, "a-more", headers=ha)  # A's excess is the one refused
            assert status == 503 and body["error"]["type"] == "Overloaded", body
        finally:
            for thread in [*busy, waiting_b]:
                if thread.ident is not None:
                    thread.join(90)
        status, _headers, body = answers["b"]
        assert status == 200 and body["results"][0]["status"] == "ok", body
        assert [answers[t][0] for t in ("x", "y")] == [200, 200]
        assert _memory(client)[0] <= BUDGET
        status, _headers, body = _call(client, "a-after", headers=ha)  # A again, once B is served
        assert status == 200 and body["results"][0]["status"] == "ok", body


def test_a_call_arriving_during_another_evaluators_pre_warm_waits_for_it_instead_of_answering_overloaded(
    tmp_path: Path,
) -> None:
    """Room for one worker; an evaluator just saved is pre-warming (its code's import takes a second). A call of
    another evaluator found the budget held by that start and answered 503 ``Overloaded`` although the worker was a
    moment from idle; it now waits for that start to end, evicts the idle worker and is answered."""
    settings = make_settings(tmp_path, backend="process", max_worker_memory_mb=300, spare_workers=0)
    slow = "import time\ntime.sleep(1.5)\n\ndef evaluate(inputs, outputs, trace):\n    return 0.5\n"
    with TestClient(create_app(settings)) as client:
        holdings = client.app.state.services.pool.leasing.holdings  # type: ignore[attr-defined]
        saved = client.post(
            "/v1/evaluators",
            json={"name": "slow-import", "language": "python", "code": slow, "settings": {"memory_mb": 256}},
        )
        assert saved.status_code in (200, 201), saved.text
        wait_until(lambda: any(holdings.starting.values()) and any(holdings.warming.values()), 30, 0.01)
        status, _headers, body = _call(client, "during-the-pre-warm")
        assert status == 200 and body["results"][0]["status"] == "ok", body
        assert _memory(client)[0] <= 300
        assert_healthy(client)
