"""The warm pool: reuse, never across revisions, replacement, eviction, idle TTL, max uses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from tests.support.service import evaluate, make_settings
from tests.support.wait import wait_until

TOKEN = (
    "import os\nTOKEN = os.urandom(8).hex()\n{extra}\n"
    "def evaluate(inputs, outputs, trace):\n    return {{'score': 1, 'worker': TOKEN}}\n"
)


def _worker(client: TestClient, extra: str = "", **body: object) -> str:
    result = evaluate(client, TOKEN.format(extra=extra), **body)
    assert result["status"] == "ok", result
    return str(result["details"]["worker"])


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """Two workers at most, idle for 0.6 s at most, 3 uses each; one service for the module's tests (each
    evaluates code of its own: no worker of another test is ever one of its)."""
    settings = make_settings(tmp_path_factory.mktemp("small"), max_workers=2, idle_ttl_s=0.6, max_uses=3)
    with TestClient(create_app(settings)) as client:
        yield client


def _lasting(tmp_path: Path, max_uses: int) -> Iterator[TestClient]:
    # an idle TTL no pause between two calls of a test reaches, even on a loaded machine (the 0.6 s of
    # ``small`` made a test that asserts reuse fail when its next call came late: CI, load 12)
    settings = make_settings(tmp_path, max_workers=2, idle_ttl_s=300, max_uses=max_uses)
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture
def three_uses(tmp_path: Path) -> Iterator[TestClient]:
    """Workers retired after 3 uses, never for idling."""
    yield from _lasting(tmp_path, 3)


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """Workers retired neither for idling nor for uses within a test: only for what the test does to them (one
    service for the module's tests: each evaluates code of its own, so its workers are its own)."""
    yield from _lasting(tmp_path_factory.mktemp("warm"), 100)


def test_warm_worker_is_reused_until_max_uses(three_uses: TestClient) -> None:
    first = [_worker(three_uses) for _ in range(3)]
    assert len(set(first)) == 1
    assert _worker(three_uses) != first[0]  # max_uses=3 reached: a fresh worker


def test_workers_are_never_shared_across_evaluators_or_limits(small: TestClient) -> None:
    a = _worker(small, "# evaluator A")
    b = _worker(small, "# evaluator B")
    assert a != b
    assert _worker(small, "# evaluator A", settings={"memory_mb": 128}) != a


def test_revisions_of_one_evaluator_get_their_own_workers(small: TestClient) -> None:
    code = TOKEN.format(extra="")
    ev = small.post("/v1/evaluators", json={"name": "t", "language": "python", "code": code}).json()
    small.put(f"/v1/evaluators/{ev['id']}", json={"name": "t", "language": "python", "code": code})
    one = small.post(f"/v1/evaluators/{ev['id']}/evaluate", json={"revision": 1}).json()["details"]["worker"]
    two = small.post(f"/v1/evaluators/{ev['id']}/evaluate", json={"revision": 2}).json()["details"]["worker"]
    assert one != two  # same code, different revision: different workers


def test_lru_eviction_keeps_the_pool_bounded(small: TestClient) -> None:
    for name in "ABCD":
        _worker(small, f"# {name}")
    workers = small.get("/healthz").json()["workers"]
    assert workers["total"] <= 2


def test_idle_workers_expire(small: TestClient) -> None:
    first = _worker(small, "# idle")
    wait_until(lambda: small.get("/healthz").json()["workers"]["total"] == 0, 10, 0.2, what="the idle workers to go")
    assert _worker(small, "# idle") != first


def test_a_python_timeout_interrupts_the_case_at_its_line_and_keeps_the_worker_warm(warm: TestClient) -> None:
    code = TOKEN.format(extra="import time").replace("    return", "    time.sleep(inputs.get('sleep', 0))\n    return")
    before = evaluate(warm, code)["details"]["worker"]
    timed = evaluate(warm, code, inputs={"sleep": 5}, settings={"timeout_s": 0.3})
    assert timed["status"] == "timeout" and timed["error"]["type"] == "Timeout"
    assert timed["error"]["message"] == "the evaluation exceeded timeout_s=0.3"
    assert timed["error"]["line"] == 5 and "time.sleep" in timed["error"]["traceback"]
    assert evaluate(warm, code)["details"]["worker"] == before  # no container or process start


def test_a_timeout_the_code_swallows_still_ends_the_case_and_replaces_the_worker(warm: TestClient) -> None:
    stubborn = "    while inputs.get('stubborn'):\n        try:\n            time.sleep(5)\n"
    stubborn += "        except BaseException:\n            pass\n"
    code = TOKEN.format(extra="import time").replace("    return", stubborn + "    return")
    before = evaluate(warm, code)["details"]["worker"]
    timed = evaluate(warm, code, inputs={"stubborn": True}, settings={"timeout_s": 0.3})
    assert timed["status"] == "timeout" and timed["error"]["type"] == "Timeout"
    assert evaluate(warm, code)["details"]["worker"] != before


def test_an_async_evaluator_that_times_out_keeps_its_worker_unless_the_row_will_not_stop(warm: TestClient) -> None:
    # (until issue 31, any async timeout replaced the worker: the harness interrupted its event loop with
    # SIGALRM. Rows of an async evaluator now run in flight, each timed out by cancelling its own task:
    # the loop is never interrupted, so a row that stops when cancelled leaves the worker warm.)
    code = (
        "import asyncio, os\nTOKEN = os.urandom(8).hex()\n\nasync def evaluate(inputs, outputs, trace):\n"
        "    while inputs.get('stubborn'):\n        try:\n            await asyncio.sleep(5)\n"
        "        except BaseException:\n            pass\n"
        "    await asyncio.sleep(inputs.get('sleep', 0))\n    return {'score': 1, 'worker': TOKEN}\n"
    )
    before = evaluate(warm, code)["details"]["worker"]
    timed = evaluate(warm, code, inputs={"sleep": 5}, settings={"timeout_s": 0.3})
    assert timed["status"] == "timeout" and timed["error"]["line"] == 10  # the line it was awaiting at
    assert evaluate(warm, code)["details"]["worker"] == before  # cancelled cleanly: the loop is sound
    stubborn = evaluate(warm, code, inputs={"stubborn": True}, settings={"timeout_s": 0.3})
    assert stubborn["status"] == "timeout"
    assert evaluate(warm, code)["details"]["worker"] != before  # it swallowed its cancel: not reused
