"""Async evaluators, end to end on each backend: an LLM-judge-shaped evaluator (``async def`` / ``async
function`` / a promise) has many rows awaiting at once in ONE worker, through the egress proxy to a
judge the test starts on loopback (named ``judge.test`` for the proxy only, as the egress tests do).

The judge counts the requests it holds at once and holds each until it has seen ``WANT`` together (or
a few seconds passed): the peak it saw is what the test asserts, never a duration. Each row returns a
token drawn once per worker, so one token for every row proves one worker answered them.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.sandbox.process.isolation import probe
from tests.support.backends import BACKENDS
from tests.support.service import make_settings

ADMIN = "async-operator"
WANT = 16  # requests the judge must see in flight at once
ROWS = 24
BOUND = 48  # the operator's max_in_flight here
HOLD_S = 4.0  # the most the judge holds a request waiting for the others (a serial evaluator: 1 at a time)
ROW_TIMEOUT_S = 4.0  # the row timeout where one row hangs (60 s) and the judge holds nothing (others: <= 1.5 s loaded)


class Judge(http.server.ThreadingHTTPServer):
    """Answers ``GET /judge/N`` with ``{"n": N, "peak": ...}`` once ``WANT`` requests were in flight together."""

    request_queue_size = 256  # the proxy opens one connection per row at once
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _JudgeHandler)
        self.lock = threading.Condition()
        self.now = 0
        self.peak = 0
        self.want = WANT  # a request is held until this many were in flight together
        self.hold_s = HOLD_S  # ... or this long


class _JudgeHandler(http.server.BaseHTTPRequestHandler):
    server: Judge

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        judge = self.server
        with judge.lock:
            judge.now += 1
            judge.peak = max(judge.peak, judge.now)
            judge.lock.notify_all()
            judge.lock.wait_for(lambda: judge.peak >= judge.want, timeout=judge.hold_s)
            judge.now -= 1
            peak = judge.peak
        body = json.dumps({"n": int(self.path.rsplit("/", 1)[-1]), "peak": peak}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        pass


# a minimal async HTTP client on asyncio streams (the bare runtime has no aiohttp), through HTTP_PROXY
PYTHON = """import asyncio, json, os, secrets
from urllib.parse import urlsplit

TOKEN = secrets.token_hex(8)  # one per worker


async def judge(url):
    proxy = urlsplit(os.environ["HTTP_PROXY"])
    reader, writer = await asyncio.open_connection(proxy.hostname, proxy.port)
    writer.write(f"GET {url} HTTP/1.1\\r\\nHost: {urlsplit(url).netloc}\\r\\nConnection: close\\r\\n\\r\\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    return json.loads(data.partition(b"\\r\\n\\r\\n")[2])


async def evaluate(inputs, outputs, trace):
    if inputs.get("hang"):
        await asyncio.sleep(60)
    if inputs.get("flood"):
        print("x" * 300_000)
    if inputs.get("hog"):
        hog = bytearray(1 << 30)
    answer = await judge(inputs["url"])
    if inputs.get("raise"):
        raise ValueError("the judge said no")
    return {"score": 1.0, "n": answer["n"], "peak": answer["peak"], "token": TOKEN}
"""

JAVASCRIPT = """const TOKEN = Math.random().toString(16).slice(2); // one per worker

async function evaluate(inputs, outputs, trace) {
  if (inputs.hang) await new Promise((resolve) => setTimeout(resolve, 60000));
  if (inputs.flood) console.log('x'.repeat(300000));
  if (inputs.hog) { const hog = []; for (;;) hog.push(Buffer.alloc(64 * 1024 * 1024, 1)); }
  const answer = await (await fetch(inputs.url)).json();
  if (inputs.raise) throw new Error('the judge said no');
  return { score: 1, n: answer.n, peak: answer.peak, token: TOKEN };
}
"""

# a plain function that returns a promise counts as async too
PROMISE = """const TOKEN = Math.random().toString(16).slice(2);

function evaluate(inputs, outputs, trace) {
  if (inputs.hang) return new Promise((resolve) => setTimeout(resolve, 60000));
  if (inputs.flood) console.log('x'.repeat(300000));
  if (inputs.hog) { const hog = []; for (;;) hog.push(Buffer.alloc(64 * 1024 * 1024, 1)); }
  return fetch(inputs.url).then((r) => r.json()).then((answer) => {
    if (inputs.raise) throw new Error('the judge said no');
    return { score: 1, n: answer.n, peak: answer.peak, token: TOKEN };
  });
}
"""

TYPESCRIPT = """const TOKEN: string = Math.random().toString(16).slice(2);

interface Verdict { n: number; peak: number }

export const evaluate = async (inputs: any, outputs: unknown, trace: unknown): Promise<object> => {
  if (inputs.hang) await new Promise((resolve) => setTimeout(resolve, 60000));
  if (inputs.flood) console.log('x'.repeat(300000));
  if (inputs.hog) { const hog: Buffer[] = []; for (;;) hog.push(Buffer.alloc(64 * 1024 * 1024, 1)); }
  const answer = (await (await fetch(inputs.url)).json()) as Verdict;
  if (inputs.raise) throw new Error('the judge said no');
  return { score: 1, n: answer.n, peak: answer.peak, token: TOKEN };
};
"""

EVALUATORS = {
    "python": ("python", PYTHON, 26),
    "javascript": ("javascript", JAVASCRIPT, 8),
    "promise": ("javascript", PROMISE, 8),
    "typescript": ("typescript", TYPESCRIPT, 10),
}


@pytest.fixture(scope="module", params=BACKENDS)
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if request.param == "process" and probe().mode == "rlimits":
        pytest.skip("the process backend has no namespaces here (not root, no user namespaces): no egress to test")
    tmp = tmp_path_factory.mktemp(f"async-{request.param}")
    judge = Judge()
    threading.Thread(target=judge.serve_forever, daemon=True).start()
    port = int(judge.server_address[1])
    settings = make_settings(
        tmp / "data",
        backend=request.param,
        admin_key=ADMIN,
        egress_hosts={"judge.test": "127.0.0.1"},
        output_limit_bytes=256 * 1024,  # a row printing 300 kB passes it
        max_in_flight=BOUND,
    )
    with TestClient(create_app(settings)) as client:
        op = {"Authorization": f"Bearer {ADMIN}"}
        ws = client.post("/v1/workspaces", json={"name": "judges"}, headers=op).json()
        key = client.post(f"/v1/workspaces/{ws['id']}/keys", json={"name": "k"}, headers=op).json()["key"]
        allow = [f"judge.test:{port}"]
        assert client.patch(f"/v1/workspaces/{ws['id']}", json={"network_allow": allow}, headers=op).status_code == 200
        yield {"client": client, "headers": {"Authorization": f"Bearer {key}"}, "judge": judge, "port": port}
    judge.shutdown()


def _judge(world: dict[str, Any], want: int = WANT, hold_s: float = HOLD_S) -> Judge:
    judge: Judge = world["judge"]
    judge.peak, judge.want, judge.hold_s = 0, want, hold_s
    return judge


def _run(world: dict[str, Any], which: str, cases: list[dict[str, Any]], **settings: Any) -> list[dict[str, Any]]:
    language, code, _line = EVALUATORS[which]
    body = {
        "language": language,
        "code": code,
        "network": [f"judge.test:{world['port']}"],
        "cases": [{"inputs": case} for case in cases],
        "settings": {"timeout_s": 10, **settings},
    }
    response = world["client"].post("/v1/evaluate", json=body, headers=world["headers"])
    assert response.status_code == 200, response.text
    return response.json()["results"]  # type: ignore[no-any-return]


def _url(world: dict[str, Any], n: int) -> str:
    return f"http://judge.test:{world['port']}/judge/{n}"


@pytest.mark.parametrize("which", list(EVALUATORS))
def test_rows_of_an_async_evaluator_await_together_in_one_worker(world: dict[str, Any], which: str) -> None:
    inspected = world["client"].post(
        "/v1/inspect", json={"language": EVALUATORS[which][0], "code": EVALUATORS[which][1]}, headers=world["headers"]
    )
    assert inspected.json()["async"] is True
    _judge(world)
    results = _run(world, which, [{"url": _url(world, n)} for n in range(ROWS)])
    assert [r["status"] for r in results] == ["ok"] * ROWS, results[0]
    assert [r["details"]["n"] for r in results] == list(range(ROWS))  # in row order
    assert len({r["details"]["token"] for r in results}) == 1  # one worker answered every row
    assert world["judge"].peak >= WANT  # the judge held that many of its requests at once


@pytest.mark.parametrize("which", list(EVALUATORS))
def test_a_row_that_times_out_or_raises_is_its_own_result_and_the_worker_goes_on(
    world: dict[str, Any], which: str
) -> None:
    cases: list[dict[str, Any]] = [{"url": _url(world, n)} for n in range(ROWS)]
    cases[3] = {**cases[3], "hang": True}
    cases[5] = {**cases[5], "raise": True}
    cases[7] = {**cases[7], "flood": True}
    # no holding (this is about one row's fate, not the concurrency): every other row is answered at once,
    # so a timeout of ROW_TIMEOUT_S is far past them and far short of the hanging row's 60 s
    _judge(world, want=0)
    results = _run(world, which, cases, timeout_s=ROW_TIMEOUT_S)
    statuses = [r["status"] for r in results]
    assert statuses[3] == "timeout" and statuses[5] == "error" and statuses[7] == "output_limit", statuses
    others = [r for i, r in enumerate(results) if i not in (3, 5, 7)]
    assert all(r["status"] == "ok" for r in others), others
    assert [r["details"]["n"] for r in others] == [n for n in range(ROWS) if n not in (3, 5, 7)]
    error = results[5]["error"]
    assert "the judge said no" in error["message"] and error["line"] == EVALUATORS[which][2], error
    assert results[7]["truncated"] is True
    # the next batch works (on this worker, or a fresh one if a timed-out row could not be stopped)
    again = _run(world, which, [{"url": _url(world, n)} for n in range(ROWS)])
    assert [r["status"] for r in again] == ["ok"] * ROWS


@pytest.mark.parametrize("which", list(EVALUATORS))
def test_the_memory_cap_still_holds_for_rows_in_flight(world: dict[str, Any], which: str) -> None:
    cases: list[dict[str, Any]] = [{"url": _url(world, n)} for n in range(8)]
    cases[2] = {**cases[2], "hog": True}
    _judge(world, want=0)  # no holding: this is about the cap, not the concurrency
    results = _run(world, which, cases, memory_mb=128)
    assert results[2]["status"] in ("memory_limit", "error"), results[2]
    assert results[2]["status"] != "ok"
    assert [r["status"] for i, r in enumerate(results) if i != 2] == ["ok"] * 7, results
    again = _run(world, which, [{"url": _url(world, n)} for n in range(8)], memory_mb=128)
    assert [r["status"] for r in again] == ["ok"] * 8


def test_max_in_flight_bounds_the_rows_awaiting_at_once(world: dict[str, Any]) -> None:
    judge = _judge(world, want=BOUND + 1, hold_s=0.5)  # never reached: each request held 0.5 s
    results = _run(world, "python", [{"url": _url(world, n)} for n in range(8)], max_in_flight=3)
    assert [r["status"] for r in results] == ["ok"] * 8
    assert 1 <= judge.peak <= 3  # the evaluator's own setting
    # held 2 s each: WANT requests must arrive within one hold (0.5 s needed 32 a second through the proxy, which a
    # loaded machine may not give); two waves of holds stay well within the rows' 10 s timeout
    judge = _judge(world, want=BOUND + 1, hold_s=2.0)
    results = _run(world, "python", [{"url": _url(world, n)} for n in range(BOUND + 8)], max_in_flight=1000)
    assert [r["status"] for r in results] == ["ok"] * (BOUND + 8)
    assert WANT <= judge.peak <= BOUND  # never past the operator's bound, whatever the evaluator asks
    body = {"language": "python", "code": PYTHON, "inputs": {}, "settings": {"max_in_flight": 0}}
    refused = world["client"].post("/v1/evaluate", json=body, headers=world["headers"])
    assert refused.status_code == 422


@pytest.mark.parametrize("which", ["python", "javascript"])
def test_a_jobs_chunks_keep_a_workers_in_flight_rows_busy(world: dict[str, Any], which: str) -> None:
    client, headers = world["client"], world["headers"]
    language, code, _line = EVALUATORS[which]
    body = {"name": f"judge-{which}", "language": language, "code": code, "network": [f"judge.test:{world['port']}"]}
    created = client.post("/v1/evaluators", json=body, headers=headers)
    assert created.status_code in (200, 201), created.text
    judge = _judge(world, want=BOUND)  # more than a job's first chunk of a sync evaluator (32 rows)
    rows = [{"url": _url(world, n)} for n in range(2 * BOUND)]
    job = {"evaluator_id": created.json()["id"], "rows": rows, "parallelism": 1}
    started = client.post("/v1/jobs", json=job, headers=headers)
    assert started.status_code in (200, 201, 202), started.text
    job_id = started.json()["id"]
    while (state := client.get(f"/v1/jobs/{job_id}", params={"wait_s": 30}, headers=headers).json())["status"] in (
        "queued",
        "running",
    ):
        pass
    assert state["status"] == "succeeded" and state["progress"]["failed"] == 0, state
    page = client.get(f"/v1/jobs/{job_id}/results", params={"limit": 1000}, headers=headers).json()["data"]
    assert [r["result"]["details"]["n"] for r in page] == list(range(2 * BOUND))
    assert len({r["result"]["details"]["token"] for r in page}) == 1  # one worker
    assert judge.peak >= BOUND  # its whole in-flight share awaiting at once


EXITING = """async function evaluate(inputs, outputs, trace) {
  await new Promise((resolve) => setTimeout(resolve, inputs.wait));
  if (inputs.exit) process.exit(3);
  return { score: 1 };
}
"""


def test_a_row_that_calls_process_exit_is_the_only_row_it_fails(world: dict[str, Any]) -> None:
    # rows 1-5 finish after row 0 exits (their replies come after its own): they run again elsewhere
    cases = [{"wait": 10, "exit": True}, *({"wait": 300} for _ in range(5))]
    body = {"language": "javascript", "code": EXITING, "cases": [{"inputs": case} for case in cases]}
    response = world["client"].post("/v1/evaluate", json=body, headers=world["headers"])
    results = response.json()["results"]
    assert results[0]["status"] == "error" and results[0]["error"]["type"] == "ProcessExit", results[0]
    assert [r["status"] for r in results[1:]] == ["ok"] * 5, results


DYING = """import asyncio, os

async def evaluate(inputs, outputs, trace):
    await asyncio.sleep(inputs["wait"])
    if inputs.get("die"):
        os._exit(3)  # the whole worker ends, with every row in flight
    return {"score": 1.0}
"""


def test_a_row_that_ends_the_worker_is_the_only_row_that_fails(world: dict[str, Any]) -> None:
    # the worker dies with 8 rows in flight: which one ended it is found by running them again one at a time
    cases = [{"wait": 0.3} for _ in range(8)]
    cases[5] = {"wait": 0.05, "die": True}
    body = {"language": "python", "code": DYING, "cases": [{"inputs": case} for case in cases]}
    response = world["client"].post("/v1/evaluate", json=body, headers=world["headers"])
    results = response.json()["results"]
    assert results[5]["status"] == "error" and results[5]["error"]["type"] == "WorkerExited", results[5]
    assert [r["status"] for i, r in enumerate(results) if i != 5] == ["ok"] * 7, results
