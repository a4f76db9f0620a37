"""A broken evaluator fails fast and keeps its worker (issue 33 §2), on every backend.

Each evaluator below answers a token of its worker's process (Python: drawn when the process loaded it;
Node: the process's pid and start time, since the Node harness reloads the evaluator in a fresh thread
after ending a case): the same token after a failure means the same worker process answered.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.support.service import assert_healthy, busy_workers
from tests.support.wait import wait_until

JS_LOOP = (
    "const fs = require('node:fs');\n"
    "const token = `${process.pid}:${fs.readFileSync('/proc/self/stat', 'utf8').split(' ')[21]}`;\n"
    "function evaluate(inputs, outputs, trace) {\n"
    "  if (inputs.loop) { for (;;) { try { while (true) {} } catch (e) { /* cannot hold it */ } } }\n"
    "  return { score: 1, token };\n"
    "}\n"
)
TS_LOOP = (
    "import fs from 'node:fs';\n"
    "const token: string = `${process.pid}:${fs.readFileSync('/proc/self/stat', 'utf8').split(' ')[21]}`;\n"
    "export function evaluate(inputs: { loop?: boolean }, outputs: unknown, trace: unknown) {\n"
    "  if (inputs.loop) { while (true) {} }\n"
    "  return { score: 1, token };\n"
    "}\n"
)
JS_ASYNC_LOOP = (
    "const fs = require('node:fs');\n"
    "const token = `${process.pid}:${fs.readFileSync('/proc/self/stat', 'utf8').split(' ')[21]}`;\n"
    "async function evaluate(inputs, outputs, trace) {\n"
    "  if (inputs.loop) { while (true) {} }\n"
    "  await new Promise((resolve) => setTimeout(resolve, 1));\n"
    "  return { score: 1, token };\n"
    "}\n"
)
PY_MEMORY = (
    "import secrets\n"
    "TOKEN = secrets.token_hex(8)\n\n"
    "def evaluate(inputs, outputs, trace):\n"
    "    if inputs.get('big'):\n"
    "        b = bytearray(400 << 20)\n"
    "    return {'score': 1.0, 'token': TOKEN}\n"
)


def _evaluator(client: TestClient, language: str, code: str, settings: dict[str, object]) -> str:
    made = client.post(
        "/v1/evaluators", json={"name": f"keep-{language}", "language": language, "code": code, "settings": settings}
    )
    assert made.status_code == 201, made.text
    # its pre-warm has finished: a worker it was still starting would become the most recently used one
    # after the first call's, and answer the next call (a second worker, not the first one replaced)
    wait_until(lambda: busy_workers(client) == 0, 60, what="the evaluator's pre-warm")
    return f"/v1/evaluators/{made.json()['id']}/evaluate"


def _token(client: TestClient, path: str) -> str:
    answer = client.post(path, json={"inputs": {}})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["status"] == "ok", body
    token = body["details"]["token"]
    assert isinstance(token, str)
    return token


JS_NEVER_SETTLES = (
    "const fs = require('node:fs');\n"
    "const token = `${process.pid}:${fs.readFileSync('/proc/self/stat', 'utf8').split(' ')[21]}`;\n"
    "function evaluate(inputs, outputs, trace) {\n"
    "  if (inputs.loop) return new Promise(() => {});\n"
    "  return { score: 1, token };\n"
    "}\n"
)
JS_HEAP = (
    "const fs = require('node:fs');\n"
    "const token = `${process.pid}:${fs.readFileSync('/proc/self/stat', 'utf8').split(' ')[21]}`;\n"
    "function evaluate(inputs, outputs, trace) {\n"
    "  const kept = [];\n"
    "  while (inputs.big) kept.push(new Array(1 << 16).fill(kept.length));\n"
    "  return { score: 1, token };\n"
    "}\n"
)


# serial: "the same worker answered" holds when the worker's own watchdog stops the loop within the host's grace
# (timeout + min(2, 1 + 0.1 x timeout) s, sandbox/pool/replies.py); with both cores saturated by other test
# processes it fired late and the host's backstop restarted the worker, as designed (seen under 2 xdist workers
# beside other work). The tier that runs it alone is where a margin of about a second is a fair test.
@pytest.mark.serial
@pytest.mark.parametrize(
    ("language", "code", "settings"),
    [
        ("javascript", JS_LOOP, {}),
        ("typescript", TS_LOOP, {}),
        ("javascript", JS_NEVER_SETTLES, {}),
        # an async evaluator run one row at a time (rows in flight: a blocking loop is the host's backstop)
        ("javascript", JS_ASYNC_LOOP, {"max_in_flight": 1}),
    ],
)
def test_a_runaway_js_loop_answers_timeout_and_keeps_the_worker(
    client: TestClient, language: str, code: str, settings: dict[str, object]
) -> None:
    path = _evaluator(client, language, code, {"timeout_s": 0.3, **settings})
    before = _token(client, path)
    for _ in range(2):
        answer = client.post(path, json={"inputs": {"loop": True}})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["status"] == "timeout" and body["error"]["type"] == "Timeout", body
    assert _token(client, path) == before  # the same worker answered: no restart
    assert_healthy(client)


def test_a_js_heap_overflow_answers_memory_limit_and_keeps_the_process(client: TestClient) -> None:
    path = _evaluator(client, "javascript", JS_HEAP, {"memory_mb": 128, "timeout_s": 30})
    before = _token(client, path)
    answer = client.post(path, json={"inputs": {"big": True}})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["status"] == "memory_limit" and "heap" in body["error"]["message"], body
    assert _token(client, path) == before  # the evaluator's thread was replaced, not the process
    assert_healthy(client)


def test_a_python_memory_error_keeps_the_worker(client: TestClient) -> None:
    path = _evaluator(client, "python", PY_MEMORY, {"memory_mb": 64})
    before = _token(client, path)
    for _ in range(2):
        answer = client.post(path, json={"inputs": {"big": True}})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["status"] == "memory_limit", body
    assert _token(client, path) == before
    assert_healthy(client)


NUMPY_MEMORY = (
    "import secrets\n"
    "import numpy as np\n"
    "TOKEN = secrets.token_hex(8)\n\n"
    "def evaluate(inputs, outputs, trace):\n"
    "    if inputs.get('big'):\n"
    "        a = np.ones(400 << 17)  # 400 MiB of float64\n"
    "    return {'score': float(np.mean([1.0, 1.0])), 'token': TOKEN}\n"
)


# "keeps the worker" is read as the same import token before and after. It once saw a new token in 1 run of ~6
# (CI of stop 70, and here): the saved evaluator's pre-warm was still importing numpy when the first call came,
# and that call started a second worker, so the key had two. Since then a call waits for a pre-warm under way
# (Holdings.awaits_prewarm; tests/sandbox/test_pool_fake.py), and 32 runs of 32 kept one token. Serial still: its
# 400 MiB allocation attempt under a 128 MiB limit is the memory behaviour under test, not a neighbour's load.
@pytest.mark.serial
@pytest.mark.slow
def test_a_numpy_memory_error_keeps_the_worker(client: TestClient) -> None:
    # real code: numpy imports under the address-space limit, and its failed allocation is a MemoryError
    made = client.post(
        "/v1/evaluators",
        json={
            "name": "keep-numpy",
            "language": "python",
            "code": NUMPY_MEMORY,
            "packages": {"numpy": "2.1.3"},
            "settings": {"memory_mb": 128, "timeout_s": 60},
        },
    )
    assert made.status_code == 201, made.text
    path = f"/v1/evaluators/{made.json()['id']}/evaluate"
    before = _token(client, path)
    answer = client.post(path, json={"inputs": {"big": True}}).json()
    assert answer["status"] == "memory_limit", answer
    assert _token(client, path) == before
    assert_healthy(client)
