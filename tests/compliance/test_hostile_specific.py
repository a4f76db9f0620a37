"""Hostile evaluators that exist in one language only: each limit holds and the service stays healthy.

The behaviours every language shares are the table in ``test_hostile.py``; these are the
ones tied to one runtime (a blocking sleep, ``os.fork``, ``SystemExit``; ``process.exit``
intercepted, timers, off-heap buffers, stray promise rejections, npm imports, TypeScript
source lines). Every test runs on every backend.
"""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.support.service import assert_healthy, evaluate

# Python


def test_python_sleep_past_the_timeout(client: TestClient) -> None:
    """A blocking sleep longer than the timeout is a timeout."""
    code = "import time\n\ndef evaluate(inputs, outputs, trace):\n    time.sleep(30)\n    return 1\n"
    result = evaluate(client, code, settings={"timeout_s": 0.5})
    assert result["status"] == "timeout"
    assert_healthy(client)


def test_python_one_huge_allocation_is_a_memory_limit(client: TestClient) -> None:
    """A single allocation far over the memory cap is a memory_limit, not a crash."""
    code = "def evaluate(inputs, outputs, trace):\n    x = bytearray(512 * 1024 * 1024)\n    return 1\n"
    result = evaluate(client, code, settings={"memory_mb": 64, "timeout_s": 10})
    assert result["status"] == "memory_limit"
    assert_healthy(client)


def test_python_fork_bomb_is_contained(client: TestClient) -> None:
    """``os.fork`` until it fails is held by the pids limit (or the timeout) and reported as a result."""
    code = (
        "import os\n\ndef evaluate(inputs, outputs, trace):\n"
        "    n = 0\n    while True:\n        try:\n            if os.fork() == 0:\n"
        "                while True: pass\n            n += 1\n"
        "        except OSError:\n            return n\n"
    )
    result = evaluate(client, code, settings={"timeout_s": 5})
    assert result["status"] in ("ok", "timeout", "error"), result
    if result["status"] == "ok":
        assert result["score"] < 200  # held by the pids limit
    assert_healthy(client)


def test_python_sys_exit_is_an_error(client: TestClient) -> None:
    """``sys.exit`` is an evaluation error of type SystemExit, not the worker's exit."""
    result = evaluate(client, "import sys\n\ndef evaluate(inputs, outputs, trace):\n    sys.exit(3)\n")
    assert result["status"] == "error"
    assert result["error"]["type"] == "SystemExit"
    assert_healthy(client)


# JavaScript and TypeScript


def js(client: TestClient, code: str, **body: object) -> dict:  # type: ignore[type-arg]
    return evaluate(client, code, "javascript", **body)


def test_javascript_timer_that_fires_after_the_timeout(client: TestClient) -> None:
    """A promise a timer would resolve only after the timeout is a timeout."""
    code = "function evaluate(i, o, t) { return new Promise((ok) => setTimeout(() => ok(1), 5000)) }"
    assert js(client, code, settings={"timeout_s": 1})["status"] == "timeout"
    assert_healthy(client)


def test_javascript_off_heap_bomb(client: TestClient) -> None:
    """Buffers live outside V8's heap: the sandbox's own cap must still hold them."""
    code = "function evaluate(i, o, t) { const a = []; for (;;) a.push(Buffer.alloc(64 * 1024 * 1024, 1)) }"
    result = js(client, code, settings={"memory_mb": 128, "timeout_s": 20})
    assert result["status"] in ("memory_limit", "error"), result
    assert_healthy(client)


def test_javascript_child_process_spawn_flood_is_contained(client: TestClient) -> None:
    """Spawning hundreds of child processes is held (or refused) and reported as a result."""
    code = (
        "const cp = require('child_process')\n"
        "function evaluate(i, o, t) {\n  let n = 0\n  try {\n"
        "    for (;;) { cp.spawn('sleep', ['1000']); n++ ; if (n > 500) break }\n"
        "  } catch (e) { return { score: 1, n, error: String(e.code || e.message) } }\n"
        "  return { score: 1, n }\n}\n"
    )
    result = js(client, code, settings={"timeout_s": 10})
    assert result["status"] in ("ok", "error", "timeout"), result
    assert_healthy(client)


def test_javascript_process_exit_caught_by_the_user_is_still_an_error(client: TestClient) -> None:
    """``process.exit`` inside a try/catch still ends the evaluation as a ProcessExit error."""
    code = "function evaluate(i, o, t) { try { process.exit(0) } catch (e) {} return 1 }"
    result = js(client, code)
    assert result["status"] == "error" and result["error"]["type"] == "ProcessExit", result
    assert_healthy(client)


def test_javascript_real_exit_is_an_error(client: TestClient) -> None:
    """``process.reallyExit`` (no exit hooks) is an error, and the next evaluation is answered."""
    code = "function evaluate(i, o, t) { process.reallyExit(9) }"
    result = js(client, code)
    assert result["status"] == "error", result
    assert js(client, "function evaluate(i, o, t) { return 1 }")["status"] == "ok"
    assert_healthy(client)


def test_javascript_stray_async_failures_do_not_kill_the_worker(client: TestClient) -> None:
    """An unhandled rejection and a throw from a timer leave the evaluation ok and the warm worker alive."""
    code = (
        "function evaluate(i, o, t) {\n  Promise.reject(new Error('nobody awaits me'))\n"
        "  setTimeout(() => { throw new Error('late throw') }, 0)\n  return 1\n}\n"
    )
    assert js(client, code)["status"] == "ok"
    assert js(client, code)["status"] == "ok"  # the same warm worker is still alive
    assert_healthy(client)


def test_javascript_missing_package_is_a_load_error(client: TestClient) -> None:
    """Importing a package that is not pinned is a load error naming the package."""
    code = 'import * as nope from "not-a-pinned-package"\nexport function evaluate(i, o, t) { return 1 }\n'
    result = js(client, code)
    assert result["status"] == "error"
    assert "not-a-pinned-package" in result["error"]["message"]
    assert_healthy(client)


def test_typescript_runtime_error_names_the_ts_line(client: TestClient) -> None:
    """A throw in TypeScript (enum, namespace: compiled, not stripped) names the TypeScript source line."""
    code = (
        "enum Level { Low, High }\nnamespace Util { export const k = 2 }\n\n"
        "function evaluate(inputs: Record<string, any>, outputs: string, trace: unknown): number {\n"
        "  const level: Level = Level.High\n"
        "  if (level === Level.High) throw new TypeError('line six')\n  return Util.k\n}\n"
    )
    result = evaluate(client, code, "typescript")
    assert result["status"] == "error"
    assert result["error"]["line"] == 6, result["error"]
    assert "evaluator.ts:6" in result["error"]["traceback"]
    assert_healthy(client)
