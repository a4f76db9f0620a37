"""The console script: `run` without a server, and `serve` as a real process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from evaluator_host.sandbox.docker_engine import Engine
from evaluator_host.settings import Settings
from tests.conftest import DOCKER_MISSING, REPO, managed_containers

CLI = [sys.executable, "-m", "evaluator_host.cli"]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "EVALUATOR_HOST_DATA_DIR": str(tmp_path), **extra}


def test_run_prints_results_and_exit_code(tmp_path: Path) -> None:
    source = tmp_path / "ev.py"
    source.write_text("def evaluate(inputs, outputs, trace):\n    print('hello')\n    return outputs == 'a'\n")
    cases = tmp_path / "cases.jsonl"
    cases.write_text('{"outputs": "a"}\n{"outputs": "b"}\n')
    done = subprocess.run(
        [*CLI, "run", str(source), "--cases", str(cases), "--json"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["score"] for r in rows] == [1.0, 0.0] and rows[0]["stdout"] == "hello\n"
    pretty = subprocess.run(
        [*CLI, "run", str(source), "--case", '{"outputs": "a"}'],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=60,
    )
    assert pretty.returncode == 0 and "ok" in pretty.stdout and "hello" in pretty.stdout
    broken = tmp_path / "broken.py"
    broken.write_text("def evaluate(inputs, outputs, trace):\n    raise ValueError('no')\n")
    failed = subprocess.run([*CLI, "run", str(broken)], capture_output=True, text=True, env=_env(tmp_path), timeout=60)
    assert failed.returncode == 1 and "ValueError" in failed.stdout


def test_serve_refuses_public_bind_without_keys(tmp_path: Path) -> None:
    done = subprocess.run(
        [*CLI, "serve", "--host", "0.0.0.0"], capture_output=True, text=True, env=_env(tmp_path), timeout=30
    )
    assert done.returncode == 2 and "--insecure" in done.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_answers_the_quickstart(tmp_path: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [*CLI, "serve", "--port", str(port)],
        env=_env(tmp_path),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                if httpx.get(f"{base}/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        backend = httpx.get(f"{base}/healthz").json()["backend"]
        # auto picks docker when an engine and the base image are there
        assert backend == ("process" if DOCKER_MISSING else "docker")
        body = {"language": "python", "code": "def evaluate(inputs, outputs, trace):\n    return 1.0\n"}
        assert httpx.post(f"{base}/v1/evaluate", json=body).json()["score"] == 1.0
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    if backend == "process":
        assert not list((tmp_path / "run").iterdir())  # no worker directory left behind
    else:
        assert not managed_containers(Engine(Settings(data_dir=tmp_path)).owner)  # no container left behind
