"""A service that refuses to start says why in one line on stderr and exits 2 — no traceback around the
message (issue 48): a real ``evaluator-host serve`` subprocess, given a malformed
``EVALUATOR_HOST_NETWORK_ALLOW``, or (as root) the rlimits-only mode whose sandbox uid cannot read its paths."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import zygote
from tests.support.service import free_port

REPO = Path(__file__).resolve().parents[2]


def _serve(data_dir: Path, env: dict[str, str], *flags: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "evaluator_host.cli", "serve", "--port", str(free_port()), *flags]
    full = {**os.environ, "EVALUATOR_HOST_DATA_DIR": str(data_dir), **env}
    return zygote.run(argv, cwd=REPO, env=full, capture_output=True, text=True, timeout=120)


def test_a_malformed_network_allow_is_one_line_and_exit_2(tmp_path: Path) -> None:
    env = {"EVALUATOR_HOST_NETWORK_ALLOW": "llm.local", "EVALUATOR_HOST_BACKEND": "process"}
    done = _serve(tmp_path / "data", env, "--log-level", "warning")
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "evaluator-host: EVALUATOR_HOST_NETWORK_ALLOW: 'llm.local' is not host:port (e.g. api.openai.com:443)\n"
    )
    # at the default log level too: the schema's info lines may come first, never a traceback
    chatty = _serve(tmp_path / "data2", env)
    assert chatty.returncode == 2 and "Traceback" not in chatty.stderr, chatty.stderr
    assert chatty.stderr.splitlines()[-1].startswith("evaluator-host: EVALUATOR_HOST_NETWORK_ALLOW:")


@pytest.mark.skipif(os.geteuid() != 0, reason="the rlimits-only mode drops to a sandbox uid only as root")
def test_rlimits_mode_whose_uid_cannot_read_its_paths_is_one_line_and_exit_2(tmp_path: Path) -> None:
    private = tmp_path / "private"  # (tmp_path is 0700: the sandbox uid cannot reach below it)
    env = {
        "EVALUATOR_HOST_BACKEND": "process",
        "EVALUATOR_HOST_PROCESS_ISOLATION": "rlimits",
        "EVALUATOR_HOST_CACHE_DIR": str(private / "cache"),
    }
    done = _serve(tmp_path / "data", env, "--log-level", "warning")
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("evaluator-host: the process backend runs user code as uid"), line
    assert "cannot read" in line and "Fix:" in line
