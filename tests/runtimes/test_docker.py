"""/v1/runtimes and runtimes list|prune on the docker backend: images as runtimes, the engine keeps those in use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from tests.support import REPO, zygote
from tests.support.backends import docker_only
from tests.support.service import make_settings
from tests.support.wait import wait_until

pytestmark = [pytest.mark.network, pytest.mark.docker, docker_only]

PINS = {"six": "1.12.0"}  # a set no other test builds: this module may remove its image


def cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EVALUATOR_HOST_DATA_DIR": str(data_dir), "EVALUATOR_HOST_DOCKER_RUNTIME_STORE": "0"}
    argv = [sys.executable, "-m", "evaluator_host.cli", "runtimes", *args, "--backend", "docker"]
    return zygote.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_a_prebuilt_image_shows_its_lock_size_and_build_time_is_kept_while_in_use_then_goes(tmp_path: Path) -> None:
    # (runtime images: the store mode off, as npm sets and a host it does not fit have them)
    with TestClient(create_app(make_settings(tmp_path, backend="docker", docker_runtime_store=False))) as service:
        created = service.post("/v1/runtimes", json={"language": "python", "packages": PINS})
        assert created.status_code in (200, 202), created.text
        location = created.headers["location"]
        view = wait_until(lambda: (v := service.get(location).json())["status"] != "building" and v, 180, 0.5)
        assert view["status"] == "ready", view
        assert "six==1.12.0" in view["lock"] and view["size_bytes"] > 1_000_000
        code = "import six\n\ndef evaluate(inputs, outputs, trace):\n    return 1.0\n"
        answer = service.post("/v1/evaluate", json={"language": "python", "code": code, "packages": PINS})
        assert answer.json()["runtime"]["id"] == view["id"]
        records = [json.loads(line) for line in cli(tmp_path, "list", "--json").stdout.splitlines()]
        assert [r["in_use"] for r in records if r["id"] == view["id"]] == [True]  # the warm worker's container
        assert f"in use, kept {view['id']}" in cli(tmp_path, "prune", "--runtime", view["id"]).stdout
    # the service stopped, its containers went with it: now the image goes
    assert f"removed {view['id']}" in cli(tmp_path, "prune", "--runtime", view["id"]).stdout
