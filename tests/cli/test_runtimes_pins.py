"""``runtimes list`` and ``runtimes show`` write each pin as its installer does (issue 34, 9):
``six==1.16.0`` for Python, ``leven@4.0.0`` for npm (never ``leven==4.0.0``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api.app import create_app
from tests.support import REPO, zygote
from tests.support.service import make_settings
from tests.support.wait import wait_until


def cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EVALUATOR_HOST_DATA_DIR": str(data_dir), "COLUMNS": "200"}
    argv = [sys.executable, "-m", "evaluator_host.cli", "runtimes", *args, "--backend", "process"]
    return zygote.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.network
@pytest.mark.slow
def test_npm_pins_are_shown_as_name_at_version(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path, backend="process"))) as client:
        ids = {}
        for language, packages in (("javascript", {"leven": "4.0.0"}), ("python", {"six": "1.16.0"})):
            made = client.post("/v1/runtimes", json={"language": language, "packages": packages})
            assert made.status_code in (200, 201, 202), made.text
            ids[language] = made.json()["id"]
        for rid in ids.values():
            wait_until(lambda rid=rid: client.get(f"/v1/runtimes/{rid}").json()["status"] != "building", timeout=300)
            assert client.get(f"/v1/runtimes/{rid}").json()["status"] == "ready"
    listed = cli(tmp_path, "list")
    assert listed.returncode == 0, listed.stderr
    assert "leven@4.0.0" in listed.stdout and "leven==" not in listed.stdout
    assert "six==1.16.0" in listed.stdout
    shown = cli(tmp_path, "show", ids["javascript"])
    assert "packages   leven@4.0.0" in shown.stdout, shown.stdout
    assert "packages   six==1.16.0" in cli(tmp_path, "show", ids["python"]).stdout
