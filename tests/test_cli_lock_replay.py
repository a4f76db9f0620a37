"""``evaluator-host runtimes lock ID`` and ``evaluator-host results replay JOB INDEX`` on a real service, both
backends: the lock names the packages the runtime really has (as the evaluator itself lists them), through the
service (``--server``) and from this machine's runtimes alike, in every format; a replay of a deterministic
evaluator's row exits 0 ("identical"), a random one's exits 1 with the field that changed, an unknown row or
runtime exits 2 with the reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO, zygote
from tests.support.backends import BACKENDS
from tests.support.jobs import create_evaluator, start, wait
from tests.support.service import serving

PINS = {"six": "1.16.0"}
LISTS = (
    "import importlib.metadata\n\n"
    "def evaluate(inputs, outputs, trace):\n"
    "    return {'score': 1.0, 'six': importlib.metadata.version('six')}\n"
)
STEADY = "def evaluate(inputs, outputs, trace):\n    # {tag}\n    return float(outputs == inputs['expected'])\n"
RANDOM = "import random\n\ndef evaluate(inputs, outputs, trace):\n    # {tag}\n    return random.random()\n"


def cli(*argv: str, data_dir: Path, backend: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EVALUATOR_HOST_BACKEND": backend, "EVALUATOR_HOST_DATA_DIR": str(data_dir)}
    command = [sys.executable, "-m", "evaluator_host.cli", *argv]
    return zygote.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_lock_of_a_runtime_from_the_service_and_from_this_machine(tmp_path: Path, backend: str) -> None:
    data = tmp_path / "data"
    with serving(data, backend=backend) as (http, _proc):
        answer = http.post("/v1/evaluate", json={"language": "python", "code": LISTS, "packages": PINS, "outputs": "x"})
        assert answer.status_code == 200 and answer.json()["status"] == "ok", answer.text
        runtime_id = answer.json()["runtime"]["id"]
        assert answer.json()["details"]["six"] == "1.16.0"
        server = ["--server", str(http.base_url)]

        remote = cli("runtimes", "lock", runtime_id, *server, data_dir=data, backend=backend)
        assert remote.returncode == 0, remote.stderr
        body = json.loads(remote.stdout)
        assert body == http.get(f"/v1/runtimes/{runtime_id}/lock").json()
        assert {(p["name"].lower(), p["version"]) for p in body["packages"]} >= {("six", "1.16.0")}

        # a beginning of an id the service lists will do there too: its evaluators' runtimes and, since issue 48,
        # the package sets its one-off calls ran on (GET /v1/runtimes lists them); one it does not list is a 404
        listed = cli("runtimes", "lock", runtime_id[:16], *server, data_dir=data, backend=backend)
        assert listed.returncode == 0 and json.loads(listed.stdout) == body, listed.stderr
        unlisted = cli("runtimes", "lock", "python-00000000", *server, data_dir=data, backend=backend)
        assert unlisted.returncode == 2 and "404" in unlisted.stderr, unlisted.stderr
        assert "whole id" in unlisted.stderr, unlisted.stderr
        evaluator = {"name": "lists", "language": "python", "code": LISTS, "packages": PINS}
        saved = http.post("/v1/evaluators", json=evaluator)
        assert saved.status_code == 201, saved.text
        prefix = cli("runtimes", "lock", runtime_id[:16], *server, data_dir=data, backend=backend)
        assert prefix.returncode == 0 and json.loads(prefix.stdout) == body, prefix.stderr
        npm = cli("runtimes", "lock", runtime_id, "--format", "package-lock", data_dir=data, backend=backend)
        assert npm.returncode == 2 and "requirements or cyclonedx" in npm.stderr, npm.stderr  # a Python runtime's

        local = cli("runtimes", "lock", runtime_id[:16], data_dir=data, backend=backend)  # a prefix will do
        assert local.returncode == 0, local.stderr
        mine = json.loads(local.stdout)
        assert mine["packages"] == body["packages"] and mine["runtime_id"] == runtime_id
        assert mine["interpreter"]["name"] == "python" and mine["base_image"] == body["base_image"]

        text = cli("runtimes", "lock", runtime_id, "--format", "requirements", *server, data_dir=data, backend=backend)
        assert text.returncode == 0 and "\nsix==1.16.0" in text.stdout, text.stdout + text.stderr
        assert text.stdout == http.get(f"/v1/runtimes/{runtime_id}/lock", params={"format": "requirements"}).text
        sbom_file = tmp_path / "sbom.json"
        sbom = cli(
            "runtimes",
            "lock",
            runtime_id,
            "--format",
            "cyclonedx",
            "-o",
            str(sbom_file),
            data_dir=data,
            backend=backend,
        )
        assert sbom.returncode == 0 and sbom.stdout == "", sbom.stderr
        components = json.loads(sbom_file.read_text())["components"]
        assert any(c["name"] == "six" and c["purl"] == "pkg:pypi/six@1.16.0" for c in components)

        unknown = cli("runtimes", "lock", "python-0000000000000000", *server, data_dir=data, backend=backend)
        assert unknown.returncode == 2 and "404" in unknown.stderr, unknown.stderr
        nothing = cli("runtimes", "lock", "python-0000000000000000", data_dir=data, backend=backend)
        assert nothing.returncode == 2 and "no runtimes match" in nothing.stderr, nothing.stderr
        assert http.get("/healthz").status_code == 200


def _job(http: Any, code: str) -> str:
    evaluator = create_evaluator(http, code.format(tag=uuid.uuid4().hex))["id"]
    rows = [{"outputs": str(i % 2), "expected": "1"} for i in range(4)]
    job = wait(http, start(http, evaluator, rows=rows)["id"])
    assert job["status"] == "succeeded", job
    return str(job["id"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_replay_exits_0_when_identical_1_when_it_differs_2_when_unknown(tmp_path: Path, backend: str) -> None:
    data = tmp_path / "data"
    with serving(data, backend=backend) as (http, _proc):
        server = ["--server", str(http.base_url)]
        steady = _job(http, STEADY)
        same = cli("results", "replay", steady, "1", *server, data_dir=data, backend=backend)
        assert same.returncode == 0, same.stdout + same.stderr
        assert same.stdout.splitlines()[-1] == "identical" and f"job {steady} row 1" in same.stdout

        randomly = _job(http, RANDOM)
        changed = cli("results", "replay", randomly, "0", *server, "--json", data_dir=data, backend=backend)
        assert changed.returncode == 1, changed.stdout + changed.stderr
        replay = json.loads(changed.stdout)
        assert replay["identical"] is False and replay["differences"][0].startswith("score: ")
        plain = cli("results", "replay", randomly, "0", *server, data_dir=data, backend=backend)
        assert plain.returncode == 1 and "differs" in plain.stdout and "  score: " in plain.stdout

        missing = cli("results", "replay", steady, "9", *server, data_dir=data, backend=backend)
        assert missing.returncode == 2 and "404" in missing.stderr, missing.stderr
        assert http.get("/healthz").status_code == 200
