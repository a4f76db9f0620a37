"""What a Python worker's start loads, on each backend: only what every evaluation needs.

asyncio (with the ssl, socket and logging it brings) was ~35 of a harness's ~50 ms of imports on this
machine, and a sync evaluator never uses it: the harness imports it when an async evaluator's rows first run
(``evaluator_harness/inflight.py``), and the egress forwarder's sockets and thread only for a worker with
egress. A cold worker's first result (process backend, no spare) went from ~100 to ~56 ms here.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from tests.support import REPO
from tests.support.backends import BACKENDS
from tests.support.service import make_settings

HEAVY = ("asyncio", "ssl", "socket", "selectors", "threading")
SYNC = f"""import sys

def evaluate(inputs, outputs, trace):
    return {{"score": 1.0, "loaded": sorted(m for m in {HEAVY!r} if m in sys.modules)}}
"""
ASYNC = """import sys

async def evaluate(inputs, outputs, trace):
    return {"score": 1.0, "asyncio": "asyncio" in sys.modules, "i": inputs["i"]}
"""


@pytest.fixture(scope="module", params=BACKENDS)
def client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_settings(tmp_path_factory.mktemp(f"start-{request.param}") / "data", backend=request.param)
    with TestClient(create_app(settings)) as client:
        yield client


def test_a_sync_evaluators_worker_never_imports_asyncio_nor_the_egress_forwarders_sockets(client: TestClient) -> None:
    for code in (SYNC, SYNC + "\n# a second revision: a spare's bind, or a fresh start\n"):
        answer = client.post("/v1/evaluate", json={"language": "python", "code": code})
        assert answer.status_code == 200 and answer.json()["status"] == "ok", answer.text
        assert answer.json()["details"]["loaded"] == [], answer.json()


def test_an_async_evaluators_rows_import_asyncio_when_they_first_run(client: TestClient) -> None:
    cases = [{"inputs": {"i": i}} for i in range(5)]
    answer = client.post("/v1/evaluate", json={"language": "python", "code": ASYNC, "cases": cases})
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert [r["status"] for r in results] == ["ok"] * 5, results
    assert [(r["details"]["asyncio"], r["details"]["i"]) for r in results] == [(True, i) for i in range(5)]


CHECK = """import sys
sys.path.insert(0, sys.argv[1])
from evaluator_harness.serve import _coroutine

async def judge(inputs, outputs, trace):
    return 1.0

def plain(inputs, outputs, trace):
    return 1.0

class Metric:
    async def evaluate(self, inputs, outputs, trace):
        return 1.0

print([_coroutine(f) for f in (judge, Metric().evaluate, plain, None, len)], "asyncio" in sys.modules)
"""


def test_an_async_def_evaluator_is_known_before_ready_so_its_first_row_does_not_import_asyncio() -> None:
    """The harness imports asyncio before its ``ready`` for an ``async def`` evaluator (a run of one row at a
    time, ``max_in_flight: 1``, would await it in the row's own timed window): told by the code's
    ``CO_COROUTINE`` flag, which needs no import (checked in an interpreter of its own, as the harness runs)."""
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", CHECK, str(REPO / "runtimes" / "python")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[True, True, False, False, False] False"
