"""Hostile evaluators, one table for every language: each limit holds and the service stays healthy.

Each row is one hostile behaviour written in each language it makes sense in (Python,
JavaScript, and TypeScript where the TypeScript path adds something), with the status the
evaluation must end in and what else must hold. Every row runs on every backend (the
``client`` fixture is parametrized by backend), and every row ends with a health check and
a fresh evaluation. Behaviours that exist in one language only are in
``test_hostile_specific.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.support import REPO
from tests.support.backends import BACKENDS
from tests.support.hostile import (
    HOSTILE,
    Case,
    Check,
    Code,
    Result,
)
from tests.support.service import assert_healthy, evaluate


def run(client: TestClient, code: Code, language: str, status: str | None, check: Check | None) -> Result:
    """Evaluate ``code``; the answer has ``status`` (unless None) and passes both checks."""
    result = evaluate(client, code.source, language, **code.body())
    if status is not None:
        assert result["status"] == status, result
    for each in (check, code.check):
        if each is not None:
            assert each(result), result
    return result


@pytest.mark.parametrize("client", BACKENDS, indirect=True)
@pytest.mark.parametrize(
    ("case", "language"),
    [pytest.param(case, language, id=f"{case.name}-{language}") for case in HOSTILE for language in case.code],
)
def test_hostile(client: TestClient, monkeypatch: pytest.MonkeyPatch, case: Case, language: str) -> None:
    """The hostile evaluator ends in the row's status and checks, what it left behind is gone, the service is fine."""
    if case.needs_own_pid_namespace and client.get("/healthz").json()["isolation_details"].get("mode") == "rlimits":
        pytest.skip("no pid namespace of its own: the worker cannot tell its processes from the host's")
    for name, value in (case.host_env or {}).items():
        monkeypatch.setenv(name, value)
    run(client, case.code[language], language, case.status, case.check)
    if case.then is not None:
        run(client, case.then[language], language, "ok", None)
    assert_healthy(client)


#: Host files no evaluator may read: the service's database, root-only and other users' files, the checkout.
HOST_FILES = {
    "database": lambda data_dir: str(next(iter(data_dir.rglob("evaluator-host.db")), "/nonexistent")),
    "etc_shadow": lambda data_dir: "/etc/shadow",
    "root_bashrc": lambda data_dir: "/root/.bashrc",
    "repo_pyproject": lambda data_dir: str(REPO / "pyproject.toml"),
}
READ_ONE_FILE = {
    "python": (
        "PATH = {path!r}\n\ndef evaluate(inputs, outputs, trace):\n"
        "    try:\n        open(PATH).read(1)\n        return 0.0\n    except OSError:\n        return 1.0\n"
    ),
    "javascript": (
        "const fs = require('fs')\nconst PATHS = [{path!r}]\n"
        "function evaluate(i, o, t) {{\n"
        "  const read = PATHS.filter((p) => {{ try {{ fs.readFileSync(p); return true }} catch {{ return false }} }})\n"
        "  return {{ score: read.length ? 0 : 1, read }}\n}}\n"
    ),
}


@pytest.mark.parametrize("client", BACKENDS, indirect=True)
@pytest.mark.parametrize(
    ("host_file", "language"),
    [pytest.param(f, language, id=f"{f}-{language}") for f in HOST_FILES for language in READ_ONE_FILE],
)
def test_host_file_is_not_readable(client: TestClient, data_dir: Path, host_file: str, language: str) -> None:
    """Opening the host file from inside the sandbox fails, and the service is fine."""
    path = HOST_FILES[host_file](data_dir)
    result = evaluate(client, READ_ONE_FILE[language].format(path=path), language)
    assert result["score"] == 1.0, result
    assert_healthy(client)
