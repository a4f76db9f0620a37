"""A broken evaluator fails fast and keeps its worker (issue 33 §2), on every backend.

Each evaluator below remembers a token drawn when its worker loaded it: the same token after a failure
means the same worker (process or container) answered, not a fresh one.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.support.service import assert_healthy

JS_LOOP = (
    "const token = Math.random().toString(36).slice(2);\n"
    "function evaluate(inputs, outputs, trace) {\n"
    "  if (inputs.loop) { for (;;) { try { while (true) {} } catch (e) { /* cannot hold it */ } } }\n"
    "  return { score: 1, token };\n"
    "}\n"
)
TS_LOOP = (
    "const token: string = Math.random().toString(36).slice(2);\n"
    "export function evaluate(inputs: { loop?: boolean }, outputs: unknown, trace: unknown) {\n"
    "  if (inputs.loop) { while (true) {} }\n"
    "  return { score: 1, token };\n"
    "}\n"
)
JS_ASYNC_LOOP = (
    "const token = Math.random().toString(36).slice(2);\n"
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
    return f"/v1/evaluators/{made.json()['id']}/evaluate"


def _token(client: TestClient, path: str) -> str:
    answer = client.post(path, json={"inputs": {}})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["status"] == "ok", body
    token = body["details"]["token"]
    assert isinstance(token, str)
    return token


@pytest.mark.parametrize(
    ("language", "code"), [("javascript", JS_LOOP), ("typescript", TS_LOOP), ("javascript", JS_ASYNC_LOOP)]
)
def test_a_runaway_js_loop_answers_timeout_and_keeps_the_worker(client: TestClient, language: str, code: str) -> None:
    path = _evaluator(client, language, code, {"timeout_s": 0.3})
    before = _token(client, path)
    for _ in range(2):
        answer = client.post(path, json={"inputs": {"loop": True}})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["status"] == "timeout" and body["error"]["type"] == "Timeout", body
    assert _token(client, path) == before  # the same worker answered: no restart
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
