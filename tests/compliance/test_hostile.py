"""Hostile evaluators: every limit holds and the service stays healthy afterwards.

Runs on every backend (the ``client`` fixture is parametrized by backend).
"""

from __future__ import annotations

import os

import pytest
from fastapi.testclient import TestClient

from tests.conftest import assert_healthy, evaluate

FAST = {"settings": {"timeout_s": 2}}


def test_infinite_loop_times_out(client: TestClient) -> None:
    result = evaluate(client, "def evaluate(inputs, outputs, trace):\n    while True:\n        pass\n", **FAST)
    assert result["status"] == "timeout"
    assert_healthy(client)


def test_sleep_past_timeout(client: TestClient) -> None:
    code = "import time\n\ndef evaluate(inputs, outputs, trace):\n    time.sleep(30)\n    return 1\n"
    result = evaluate(client, code, settings={"timeout_s": 0.5})
    assert result["status"] == "timeout"
    assert_healthy(client)


def test_async_that_never_settles_times_out(client: TestClient) -> None:
    code = "import asyncio\n\nasync def evaluate(inputs, outputs, trace):\n    await asyncio.Event().wait()\n"
    assert evaluate(client, code, settings={"timeout_s": 0.5})["status"] == "timeout"
    assert_healthy(client)


def test_memory_bomb(client: TestClient) -> None:
    code = "def evaluate(inputs, outputs, trace):\n    x = bytearray(512 * 1024 * 1024)\n    return 1\n"
    result = evaluate(client, code, settings={"memory_mb": 64, "timeout_s": 10})
    assert result["status"] == "memory_limit"
    assert_healthy(client)


def test_memory_bomb_in_a_loop(client: TestClient) -> None:
    code = "def evaluate(inputs, outputs, trace):\n    s = []\n    while True:\n        s.append('x' * 10**6)\n"
    assert evaluate(client, code, settings={"memory_mb": 64, "timeout_s": 10})["status"] == "memory_limit"
    assert_healthy(client)


def test_fork_bomb_is_contained(client: TestClient) -> None:
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


def test_processes_an_evaluation_starts_do_not_outlive_it(client: TestClient) -> None:
    """Busy children left by a case that returned normally are killed before the next case runs."""
    if client.get("/healthz").json()["isolation_details"].get("mode") == "rlimits":
        pytest.skip("no pid namespace of its own: the worker cannot tell its processes from the host's")
    code = (
        "import os, time\n\ndef evaluate(inputs, outputs, trace):\n"
        "    if inputs.get('spawn'):\n"
        "        if os.fork() == 0:\n            while True: pass\n"  # a busy child
        "        for _ in range(2):\n            if os.fork() == 0:\n"  # busy orphans (double fork + setsid)
        "                os.setsid()\n                if os.fork() == 0:\n                    while True: pass\n"
        "                os._exit(0)\n        time.sleep(0.2)\n        return 1\n"
        "    others = [p for p in os.listdir('/proc') if p.isdigit() and int(p) not in (os.getpid(), 1)]\n"
        "    return {'score': 1, 'others': len(others)}\n"
    )
    assert evaluate(client, code, inputs={"spawn": True})["status"] == "ok"
    result = evaluate(client, code)  # the same revision: the same warm worker
    assert result["status"] == "ok" and result["details"]["others"] == 0, result
    assert_healthy(client)


def test_print_flood(client: TestClient) -> None:
    code = "def evaluate(inputs, outputs, trace):\n    while True:\n        print('x' * 10000)\n"
    result = evaluate(client, code, settings={"timeout_s": 10})
    assert result["status"] == "output_limit"
    assert result["truncated"] is True
    assert len(result["stdout"]) <= 1024 * 1024
    assert_healthy(client)


def test_raw_fd_flood(client: TestClient) -> None:
    code = "import os\n\ndef evaluate(inputs, outputs, trace):\n    while True:\n        os.write(1, b'y' * 65536)\n"
    result = evaluate(client, code, settings={"timeout_s": 10})
    assert result["status"] == "output_limit"
    assert_healthy(client)


def test_flood_that_catches_the_limit_still_fails(client: TestClient) -> None:
    code = (
        "def evaluate(inputs, outputs, trace):\n    for _ in range(300):\n        try:\n"
        "            print('z' * 10000)\n        except BaseException:\n            pass\n    return 1\n"
    )
    assert evaluate(client, code)["status"] == "output_limit"


def test_huge_return_value(client: TestClient) -> None:
    code = "def evaluate(inputs, outputs, trace):\n    return {'score': 1, 'blob': 'x' * (3 * 1024 * 1024)}\n"
    result = evaluate(client, code)
    assert result["status"] == "output_limit"
    assert_healthy(client)


def test_sys_exit_is_an_error(client: TestClient) -> None:
    result = evaluate(client, "import sys\n\ndef evaluate(inputs, outputs, trace):\n    sys.exit(3)\n")
    assert result["status"] == "error"
    assert result["error"]["type"] == "SystemExit"
    assert_healthy(client)


def test_os_exit_is_an_error_and_next_call_gets_a_fresh_worker(client: TestClient) -> None:
    code = (
        "import os\n\ndef evaluate(inputs, outputs, trace):\n"
        "    if inputs.get('die'):\n        os._exit(7)\n    return 1\n"
    )
    result = evaluate(client, code, inputs={"die": True})
    assert result["status"] == "error", result
    assert "exited" in result["error"]["message"]
    assert evaluate(client, code, inputs={})["status"] == "ok"
    assert_healthy(client)


def test_killing_the_parent(client: TestClient) -> None:
    code = (
        "import os, signal\n\ndef evaluate(inputs, outputs, trace):\n"
        "    os.kill(os.getppid(), signal.SIGKILL)\n    return 1\n"
    )
    evaluate(client, code)
    assert_healthy(client)


def test_kill_everything(client: TestClient) -> None:
    code = "import os, signal\n\ndef evaluate(inputs, outputs, trace):\n    os.kill(-1, signal.SIGKILL)\n    return 1\n"
    evaluate(client, code)
    assert_healthy(client)


def test_host_environment_is_not_visible(client: TestClient) -> None:
    os.environ["EVALUATOR_HOST_TEST_SECRET"] = "s3cr3t"
    try:
        code = (
            "import os\n\ndef evaluate(inputs, outputs, trace):\n    environ = ''\n"
            "    for path in ('/proc/self/environ', '/proc/1/environ'):\n"
            "        try:\n            environ += open(path).read()\n        except OSError:\n            pass\n"
            "    return {'score': 0.0 if 's3cr3t' in environ or 'EVALUATOR_HOST_TEST_SECRET' in os.environ else 1.0,"
            " 'keys': sorted(os.environ)}\n"
        )
        result = evaluate(client, code)
        assert result["score"] == 1.0, result
        assert not any(k.startswith(("EVALUATOR_HOST", "PIP_", "AWS", "OPENAI")) for k in result["details"]["keys"])
    finally:
        del os.environ["EVALUATOR_HOST_TEST_SECRET"]


@pytest.mark.parametrize("path_expr", ["DB", "'/etc/shadow'", "'/root/.bashrc'", "REPO + '/pyproject.toml'"])
def test_host_files_are_not_readable(client: TestClient, data_dir: object, path_expr: str) -> None:
    from tests.conftest import REPO

    db = str(next(iter(__import__("pathlib").Path(str(data_dir)).rglob("evaluator-host.db")), "/nonexistent"))
    code = (
        f"DB = {db!r}\nREPO = {str(REPO)!r}\n\ndef evaluate(inputs, outputs, trace):\n"
        f"    try:\n        open({path_expr}).read(1)\n        return 0.0\n    except OSError:\n        return 1.0\n"
    )
    assert evaluate(client, code)["score"] == 1.0


def test_writes_outside_tmp_fail_and_tmp_works(client: TestClient) -> None:
    code = (
        "import os\n\ndef evaluate(inputs, outputs, trace):\n    escaped = []\n"
        "    for path in ['/evil', '/usr/evil', '/etc/evil', '/sandbox/code/evil', '/sandbox/runtimes/evil']:\n"
        "        try:\n            open(path, 'w').write('x')\n            escaped.append(path)\n"
        "        except OSError:\n            pass\n"
        "    open('/tmp/ok', 'w').write('fine')\n"
        "    return {'score': 0.0 if escaped else 1.0, 'escaped': escaped}\n"
    )
    result = evaluate(client, code)
    assert result["score"] == 1.0, result


def test_no_state_leaks_between_evaluators(client: TestClient) -> None:
    writer = (
        "import builtins\n\ndef evaluate(inputs, outputs, trace):\n"
        "    open('/tmp/leak', 'w').write('secret')\n    open('/dev/shm/leak', 'w').write('secret')\n"
        "    builtins.LEAK = 'secret'\n    return 1\n"
    )
    reader = (
        "import builtins, os\n\ndef evaluate(inputs, outputs, trace):\n"
        "    seen = [os.path.exists('/tmp/leak'), os.path.exists('/dev/shm/leak'), hasattr(builtins, 'LEAK')]\n"
        "    return {'score': 0.0 if any(seen) else 1.0, 'seen': seen}\n"
    )
    assert evaluate(client, writer)["status"] == "ok"
    result = evaluate(client, reader)
    assert result["score"] == 1.0, result


def test_no_network(client: TestClient) -> None:
    code = (
        "import socket\n\ndef evaluate(inputs, outputs, trace):\n    reached = []\n"
        "    for host, port in [('127.0.0.1', 8000), ('1.1.1.1', 443), ('10.0.0.1', 80)]:\n"
        "        try:\n            socket.create_connection((host, port), timeout=1).close()\n"
        "            reached.append(host)\n        except OSError:\n            pass\n"
        "    return {'score': 0.0 if reached else 1.0, 'reached': reached}\n"
    )
    assert evaluate(client, code)["score"] == 1.0


def test_stdin_is_empty(client: TestClient) -> None:
    code = "import sys\n\ndef evaluate(inputs, outputs, trace):\n    return sys.stdin.read() == ''\n"
    assert evaluate(client, code)["score"] == 1.0


def test_import_time_failure_reports_the_line(client: TestClient) -> None:
    code = "x = 1\nraise RuntimeError('broken at import')\n\ndef evaluate(inputs, outputs, trace):\n    return 1\n"
    result = evaluate(client, code)
    assert result["status"] == "error"
    assert result["error"]["line"] == 2
    assert_healthy(client)
