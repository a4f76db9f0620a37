"""Hostile JavaScript/TypeScript evaluators: the Python hostile cases, in Node, on every backend.

Each limit must hold, be reported as a result (never a server error), and leave the
service healthy.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.conftest import REPO, assert_healthy, evaluate


def js(client: TestClient, code: str, **body: object) -> dict:  # type: ignore[type-arg]
    return evaluate(client, code, "javascript", **body)


def test_infinite_loop_times_out(client: TestClient) -> None:
    result = js(client, "function evaluate(i, o, t) { for (;;) {} }", settings={"timeout_s": 1})
    assert result["status"] == "timeout"
    assert_healthy(client)


def test_promise_that_never_settles_times_out(client: TestClient) -> None:
    code = "async function evaluate(i, o, t) { await new Promise(() => {}); return 1 }"
    assert js(client, code, settings={"timeout_s": 1})["status"] == "timeout"
    assert_healthy(client)


def test_timer_that_fires_after_the_timeout(client: TestClient) -> None:
    code = "function evaluate(i, o, t) { return new Promise((ok) => setTimeout(() => ok(1), 5000)) }"
    assert js(client, code, settings={"timeout_s": 1})["status"] == "timeout"


def test_heap_bomb(client: TestClient) -> None:
    code = "function evaluate(i, o, t) { const a = []; for (;;) a.push('x'.repeat(1e6) + Math.random()) }"
    result = js(client, code, settings={"memory_mb": 128, "timeout_s": 20})
    assert result["status"] == "memory_limit", result
    assert_healthy(client)


def test_off_heap_bomb(client: TestClient) -> None:
    """Buffers live outside V8's heap: the sandbox's own cap must still hold them."""
    code = "function evaluate(i, o, t) { const a = []; for (;;) a.push(Buffer.alloc(64 * 1024 * 1024, 1)) }"
    result = js(client, code, settings={"memory_mb": 128, "timeout_s": 20})
    assert result["status"] in ("memory_limit", "error"), result
    assert_healthy(client)


def test_child_process_is_contained(client: TestClient) -> None:
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


def test_processes_an_evaluation_starts_do_not_outlive_it(client: TestClient) -> None:
    if client.get("/healthz").json()["isolation_details"].get("mode") == "rlimits":
        pytest.skip("no pid namespace of its own")
    code = (
        "const cp = require('child_process'), fs = require('fs')\n"
        "function evaluate(inputs, o, t) {\n"
        "  if (inputs.spawn) { for (let k = 0; k < 3; k++) cp.spawn('sh', ['-c', 'while :; do :; done'], "
        "{ detached: true, stdio: 'ignore' }).unref(); return 1 }\n"
        "  const live = (p) => { try { return !/^\\d+ \\(.*\\) Z/.test(fs.readFileSync(`/proc/${p}/stat`, 'utf8')) }"
        " catch { return false } }\n"
        "  const others = fs.readdirSync('/proc').filter((p) => /^\\d+$/.test(p) && "
        "![process.pid, 1].includes(Number(p)) && live(p))\n"
        "  return { score: 1, others: others.length }\n}\n"
    )
    assert js(client, code, inputs={"spawn": True})["status"] == "ok"
    result = js(client, code)
    assert result["status"] == "ok" and result["details"]["others"] == 0, result


def test_console_flood(client: TestClient) -> None:
    code = "function evaluate(i, o, t) { for (;;) console.log('x'.repeat(10000)) }"
    result = js(client, code, settings={"timeout_s": 10})
    assert result["status"] == "output_limit"
    assert result["truncated"] is True
    assert len(result["stdout"]) <= 1024 * 1024
    assert_healthy(client)


def test_raw_fd_flood(client: TestClient) -> None:
    code = (
        "const fs = require('fs')\n"
        "function evaluate(i, o, t) { const b = Buffer.alloc(65536, 121); for (;;) fs.writeSync(1, b) }"
    )
    assert js(client, code, settings={"timeout_s": 10})["status"] == "output_limit"
    assert_healthy(client)


def test_flood_that_catches_the_limit_still_fails(client: TestClient) -> None:
    code = (
        "function evaluate(i, o, t) {\n"
        "  for (let k = 0; k < 300; k++) { try { console.log('z'.repeat(10000)) } catch {} }\n"
        "  return 1\n}\n"
    )
    assert js(client, code)["status"] == "output_limit"


def test_huge_return_value(client: TestClient) -> None:
    result = js(client, "function evaluate(i, o, t) { return { score: 1, blob: 'x'.repeat(3 * 1024 * 1024) } }")
    assert result["status"] == "output_limit"
    assert_healthy(client)


def test_process_exit_is_an_error_and_next_call_gets_a_fresh_worker(client: TestClient) -> None:
    code = (
        "globalThis.calls = (globalThis.calls || 0) + 1\n"
        "function evaluate(inputs, o, t) {\n  if (inputs.die) process.exit(7)\n"
        "  return { score: 1, calls: globalThis.calls }\n}\n"
    )
    result = js(client, code, inputs={"die": True})
    assert result["status"] == "error", result
    assert result["error"]["type"] == "ProcessExit" and "process.exit(7)" in result["error"]["message"]
    again = js(client, code, inputs={})
    assert again["status"] == "ok" and again["details"]["calls"] == 1  # a fresh worker loaded the module again
    assert_healthy(client)


def test_process_exit_caught_by_the_user_is_still_an_error(client: TestClient) -> None:
    code = "function evaluate(i, o, t) { try { process.exit(0) } catch (e) {} return 1 }"
    result = js(client, code)
    assert result["status"] == "error" and result["error"]["type"] == "ProcessExit", result


def test_a_batch_after_process_exit_runs_on_a_fresh_worker(client: TestClient) -> None:
    code = "function evaluate(inputs, o, t) { if (inputs.die) process.exit(1); return 1 }"
    response = client.post(
        "/v1/evaluate",
        json={
            "language": "javascript",
            "code": code,
            "cases": [{"inputs": {}}, {"inputs": {"die": True}}, {"inputs": {}}, {"inputs": {}}],
        },
    )
    assert response.status_code == 200, response.text
    statuses = [r["status"] for r in response.json()["results"]]
    assert statuses == ["ok", "error", "ok", "ok"]


def test_real_exit_is_an_error(client: TestClient) -> None:
    code = "function evaluate(i, o, t) { process.reallyExit(9) }"
    result = js(client, code)
    assert result["status"] == "error", result
    assert js(client, "function evaluate(i, o, t) { return 1 }")["status"] == "ok"
    assert_healthy(client)


def test_killing_the_parent(client: TestClient) -> None:
    js(client, "function evaluate(i, o, t) { process.kill(process.ppid, 'SIGKILL'); return 1 }")
    assert_healthy(client)


def test_kill_everything(client: TestClient) -> None:
    js(client, "function evaluate(i, o, t) { try { process.kill(-1, 'SIGKILL') } catch {} return 1 }")
    assert_healthy(client)


def test_host_environment_is_not_visible(client: TestClient) -> None:
    os.environ["EVALUATOR_HOST_TEST_SECRET"] = "s3cr3t"
    try:
        code = (
            "const fs = require('fs')\nfunction evaluate(i, o, t) {\n  let environ = ''\n"
            "  for (const p of ['/proc/self/environ', '/proc/1/environ']) {\n"
            "    try { environ += fs.readFileSync(p, 'utf8') } catch {}\n  }\n"
            "  const leaked = environ.includes('s3cr3t') || 'EVALUATOR_HOST_TEST_SECRET' in process.env\n"
            "  return { score: leaked ? 0 : 1, keys: Object.keys(process.env).sort() }\n}\n"
        )
        result = js(client, code)
        assert result["score"] == 1.0, result
        keys = result["details"]["keys"]
        assert not any(k.startswith(("EVALUATOR_HOST", "PIP_", "NODE_", "NPM", "AWS")) for k in keys)
    finally:
        del os.environ["EVALUATOR_HOST_TEST_SECRET"]


def test_host_files_are_not_readable(client: TestClient, data_dir: Path) -> None:
    db = str(next(iter(Path(str(data_dir)).rglob("evaluator-host.db")), "/nonexistent"))
    paths = [db, "/etc/shadow", "/root/.bashrc", str(REPO / "pyproject.toml")]
    code = (
        f"const fs = require('fs')\nconst PATHS = {paths!r}\n"
        "function evaluate(i, o, t) {\n"
        "  const read = PATHS.filter((p) => { try { fs.readFileSync(p); return true } catch { return false } })\n"
        "  return { score: read.length ? 0 : 1, read }\n}\n"
    )
    result = js(client, code)
    assert result["score"] == 1.0, result


def test_writes_outside_tmp_fail_and_tmp_works(client: TestClient) -> None:
    code = (
        "const fs = require('fs')\nfunction evaluate(i, o, t) {\n"
        "  const escaped = ['/evil', '/usr/evil', '/etc/evil', '/sandbox/code/evil', '/sandbox/runtimes/evil']"
        ".filter((p) => { try { fs.writeFileSync(p, 'x'); return true } catch { return false } })\n"
        "  fs.writeFileSync('/tmp/ok', 'fine')\n  return { score: escaped.length ? 0 : 1, escaped }\n}\n"
    )
    assert js(client, code)["score"] == 1.0


def test_no_state_leaks_between_evaluators(client: TestClient) -> None:
    writer = (
        "const fs = require('fs')\nfunction evaluate(i, o, t) {\n  fs.writeFileSync('/tmp/leak-js', 'secret')\n"
        "  globalThis.LEAK = 'secret'\n  return 1\n}\n"
    )
    reader = (
        "const fs = require('fs')\nfunction evaluate(i, o, t) {\n"
        "  const seen = [fs.existsSync('/tmp/leak-js'), 'LEAK' in globalThis]\n"
        "  return { score: seen.some(Boolean) ? 0 : 1, seen }\n}\n"
    )
    assert js(client, writer)["status"] == "ok"
    assert js(client, reader)["score"] == 1.0


def test_no_network(client: TestClient) -> None:
    code = (
        "const net = require('net')\n"
        "function tryConnect(host, port) {\n  return new Promise((resolve) => {\n"
        "    const s = net.connect({ host, port, timeout: 1000 })\n"
        "    s.on('connect', () => { s.destroy(); resolve(true) })\n"
        "    s.on('error', () => resolve(false)); s.on('timeout', () => { s.destroy(); resolve(false) })\n  })\n}\n"
        "async function evaluate(i, o, t) {\n  const reached = []\n"
        "  for (const [h, p] of [['127.0.0.1', 8000], ['1.1.1.1', 443], ['10.0.0.1', 80]]) {\n"
        "    if (await tryConnect(h, p)) reached.push(h)\n  }\n  let fetched = false\n"
        "  try { await fetch('https://pypi.org', { signal: AbortSignal.timeout(2000) }); fetched = true } catch {}\n"
        "  return { score: reached.length || fetched ? 0 : 1, reached, fetched }\n}\n"
    )
    result = js(client, code, settings={"timeout_s": 15})
    assert result["score"] == 1.0, result


def test_stray_async_failures_do_not_kill_the_worker(client: TestClient) -> None:
    code = (
        "function evaluate(i, o, t) {\n  Promise.reject(new Error('nobody awaits me'))\n"
        "  setTimeout(() => { throw new Error('late throw') }, 0)\n  return 1\n}\n"
    )
    assert js(client, code)["status"] == "ok"
    assert js(client, code)["status"] == "ok"  # the same warm worker is still alive
    assert_healthy(client)


def test_import_time_failure_reports_the_line(client: TestClient) -> None:
    code = "const x = 1\nthrow new RangeError('broken at import')\nfunction evaluate(i, o, t) { return 1 }\n"
    result = js(client, code)
    assert result["status"] == "error"
    assert result["error"]["type"] == "RangeError" and result["error"]["line"] == 2
    assert_healthy(client)


def test_missing_package_is_a_load_error(client: TestClient) -> None:
    code = 'import * as nope from "not-a-pinned-package"\nexport function evaluate(i, o, t) { return 1 }\n'
    result = js(client, code)
    assert result["status"] == "error"
    assert "not-a-pinned-package" in result["error"]["message"]


def test_typescript_runtime_error_names_the_ts_line(client: TestClient) -> None:
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
