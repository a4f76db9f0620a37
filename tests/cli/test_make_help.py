"""``make help`` shows the address ``make run`` serves on, never ``$(HOST):$(PORT)`` (issue 34, 9)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.support import REPO


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_help_expands_host_and_port() -> None:
    default = subprocess.run(["make", "-s", "help"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert default.returncode == 0, default.stderr
    assert "$(" not in default.stdout
    assert "start the service on 127.0.0.1:8000" in default.stdout
    given = subprocess.run(
        ["make", "-s", "help", "HOST=0.0.0.0", "PORT=9000"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert "start the service on 0.0.0.0:9000" in given.stdout
