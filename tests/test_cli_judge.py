"""The CLI runs an LLM judge (issue 48, 7): ``--secret``, ``--network``, ``--env`` on ``run`` (a case, and
``--data``), ``test`` and ``migrate --check-with``, in this process, against a loopback model API named
``llm.local`` for the egress proxy only (``EVALUATOR_HOST_EGRESS_HOSTS``). No admin key, no certificate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from evaluator_host.sandbox.process.isolation import probe
from tests.support import zygote
from tests.support.llm_server import LLMServer, llm_server

CLI = [sys.executable, "-m", "evaluator_host.cli"]
KEY = "sk-cli-judge-0123456789"
JUDGE = """import json, os, urllib.request
def evaluate(inputs, outputs, trace):
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": outputs}]}).encode()
    request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=body,
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    said = json.loads(urllib.request.urlopen(request, timeout=20).read())["choices"][0]["message"]["content"]
    return {"score": 1.0 if said == "A: " + outputs else 0.0, "reason": said}
"""
LEGACY = """import json, os, urllib.request
def evaluate(app_params, inputs, output, correct_answer):
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": output}]}).encode()
    request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=body,
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    said = json.loads(urllib.request.urlopen(request, timeout=20).read())["choices"][0]["message"]["content"]
    return 1.0 if said == "A: " + output else 0.0
"""

pytestmark = pytest.mark.skipif(probe().mode == "rlimits", reason="no namespaces here: no egress to test")


@pytest.fixture(scope="module")
def model_api() -> Iterator[LLMServer]:
    with llm_server() as server:
        yield server


def _cli(tmp_path: Path, *args: str, key: bool = True) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "EVALUATOR_HOST_DATA_DIR": str(tmp_path / "data"),
        "EVALUATOR_HOST_EGRESS_HOSTS": json.dumps({"llm.local": "127.0.0.1"}),
        "EVALUATOR_HOST_BACKEND": "process",
    }
    env.pop("OPENAI_API_KEY", None)
    if key:
        env["OPENAI_API_KEY"] = KEY
    return zygote.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=300)


def _judge_flags(server: LLMServer) -> list[str]:
    host = f"llm.local:{server.port}"
    return ["--secret", "OPENAI_API_KEY", "--network", host, "--env", f"OPENAI_BASE_URL=http://{host}/v1"]


def test_run_a_judge_with_a_secret_a_host_and_a_plain_variable(tmp_path: Path, model_api: LLMServer) -> None:
    source = tmp_path / "judge.py"
    source.write_text(JUDGE)
    done = _cli(tmp_path, "run", str(source), "--case", '{"outputs": "cli case"}', "--json", *_judge_flags(model_api))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "ok" and result["score"] == 1.0, result
    sent = [h for h, b in zip(model_api.headers, model_api.bodies, strict=True) if "cli case" in json.dumps(b)]
    assert sent and sent[-1]["Authorization"] == f"Bearer {KEY}"  # this environment's value, in the sandbox
    assert KEY not in done.stdout + done.stderr


def test_run_data_gives_the_job_the_judges_options(tmp_path: Path, model_api: LLMServer) -> None:
    source = tmp_path / "judge.py"
    source.write_text(JUDGE)
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"answer": f"row {i}"}) + "\n" for i in range(3)))
    flags = _judge_flags(model_api)
    done = _cli(tmp_path, "run", str(source), "--data", str(data), "--map", "outputs=answer", "--json", *flags)
    assert done.returncode == 0, done.stderr
    job = json.loads(done.stdout.splitlines()[-1])
    assert job["status"] == "succeeded" and job["progress"]["failed"] == 0, job


def test_test_and_migrate_check_with_take_the_same_options(tmp_path: Path, model_api: LLMServer) -> None:
    source = tmp_path / "judge.py"
    source.write_text(JUDGE)
    fixtures = [{"name": "echo", "outputs": "fixture", "expect": {"score": 1.0}}]
    (tmp_path / "judge.fixtures.json").write_text(json.dumps(fixtures))
    tested = _cli(tmp_path, "test", str(source), *_judge_flags(model_api))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    legacy = tmp_path / "legacy.py"
    legacy.write_text(LEGACY)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"outputs": "migrated"}) + "\n")
    checked = _cli(tmp_path, "migrate", str(legacy), "--check-with", str(rows), *_judge_flags(model_api))
    assert checked.returncode == 1, checked.stdout + checked.stderr  # would change; same answers
    assert "same answers on every row" in checked.stdout + checked.stderr


def test_judge_options_are_checked_before_anything_starts(tmp_path: Path) -> None:
    source = tmp_path / "judge.py"
    source.write_text(JUDGE)
    missing = _cli(tmp_path, "run", str(source), "--secret", "OPENAI_API_KEY", key=False)
    assert missing.returncode == 2 and "--secret OPENAI_API_KEY: not set in this environment" in missing.stderr
    bad_host = _cli(tmp_path, "run", str(source), "--network", "llm.local")
    assert bad_host.returncode == 2 and "--network 'llm.local' is not host:port" in bad_host.stderr
    reserved = _cli(tmp_path, "run", str(source), "--env", "PATH=/tmp")
    assert reserved.returncode == 2 and "sandbox's own" in reserved.stderr
    no_value = _cli(tmp_path, "run", str(source), "--env", "OPENAI_BASE_URL")
    assert no_value.returncode == 2 and "is not NAME=VALUE" in no_value.stderr
    both = _cli(tmp_path, "run", str(source), "--secret", "OPENAI_API_KEY", "--env", "OPENAI_API_KEY=x")
    assert both.returncode == 2 and "given as --secret and as --env" in both.stderr


def test_judge_options_a_command_would_not_use_are_refused_not_ignored(tmp_path: Path) -> None:
    """``migrate`` without ``--check-with`` runs nothing, and ``test ID`` on a service runs the stored
    evaluator with its own secrets and network: the options are a usage error there, never dropped."""
    legacy = tmp_path / "legacy.py"
    legacy.write_text("def evaluate(app_params, inputs, output, correct_answer):\n    return 1.0\n")
    migrate = _cli(tmp_path, "migrate", str(legacy), "--network", "llm.local:8080")
    assert migrate.returncode == 2 and "apply to --check-with's run" in migrate.stderr, migrate.stderr
    remote = _cli(tmp_path, "test", "ev_123", "--server", "http://127.0.0.1:9", "--env", "OPENAI_BASE_URL=x")
    assert remote.returncode == 2 and "a stored evaluator runs with its own" in remote.stderr, remote.stderr
