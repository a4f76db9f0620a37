"""What runs the code (issue 34, 8): /healthz names the Python and Node.js versions of the backend, each
evaluate answer's ``runtime.interpreter`` names the one that ran it — and it is what the code itself
sees; a TypeScript inspection says the types are not checked."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import interpreters
from evaluator_host.api.routes.inspect import TS_NOT_CHECKED
from evaluator_host.settings import Settings
from tests.support.backends import docker_only

PY = (
    "import platform\n\ndef evaluate(inputs, outputs, trace):\n"
    "    return {'score': 1.0, 'v': platform.python_version()}\n"
)
JS = "function evaluate(inputs, outputs, trace) {\n  return {score: 1, v: process.version.slice(1)}\n}\n"
TS = "function evaluate(inputs: any, outputs: string, trace: any): number {\n  return outputs.length\n}\n"


def _version_seen(result: dict[str, Any]) -> str:
    assert result["status"] == "ok", result
    return str(result["details"]["v"])


def test_healthz_and_every_result_name_the_interpreter_the_code_runs_under(client: TestClient) -> None:
    runtimes = client.get("/healthz").json()["runtimes"]
    assert set(runtimes) == {"python", "node"}
    for language, code, name in (("python", PY, "python"), ("javascript", JS, "node"), ("typescript", JS, "node")):
        one = client.post("/v1/evaluate", json={"language": language, "code": code, "outputs": "a"}).json()
        assert one["runtime"]["interpreter"] == {"name": name, "version": runtimes[name]}, one
        assert _version_seen(one) == runtimes[name]  # what the code itself sees
        batch = client.post("/v1/evaluate", json={"language": language, "code": code, "cases": [{}, {}]}).json()
        assert [r["runtime"]["interpreter"]["version"] for r in batch["results"]] == [runtimes[name]] * 2
    made = client.post("/v1/evaluators", json={"name": "py-version", "language": "python", "code": PY}).json()
    by_id = client.post(f"/v1/evaluators/{made['id']}/evaluate", json={"outputs": "a"}).json()
    assert by_id["runtime"]["interpreter"] == {"name": "python", "version": runtimes["python"]}


def test_a_typescript_inspection_says_types_are_not_checked(client: TestClient) -> None:
    found = client.post("/v1/inspect", json={"language": "typescript", "code": TS}).json()
    assert found["ok"] and TS_NOT_CHECKED in found["warnings"]
    assert "tsc --noEmit" in TS_NOT_CHECKED
    python = client.post("/v1/inspect", json={"language": "python", "code": PY}).json()
    assert TS_NOT_CHECKED not in python["warnings"]


def test_a_version_unknown_at_start_is_asked_again_until_known(tmp_path: Path) -> None:
    """A start-up probe that lost the race against a loaded machine (the docker probe's container start can
    pass its timeout) does not leave ``"unknown"`` for the service's life: ask_again asks the real
    interpreter again and the answers read the version from then on."""
    settings = Settings(data_dir=tmp_path, backend="process")
    interpreters.discover(settings, "process-again")
    found = dict(interpreters.known("process-again") or {})
    assert "unknown" not in found.values(), found
    interpreters._found["process-again"] = {**found, "python": "unknown"}  # as a timed-out probe leaves it
    asyncio.run(interpreters.ask_again(settings, "process-again", waits=(0.0, 0.0)))
    assert interpreters.known("process-again") == found
    runtime = interpreters.with_interpreter({"language": "python"}, interpreters.known("process-again"))
    assert runtime["interpreter"] == {"name": "python", "version": found["python"]}


@docker_only
def test_the_base_images_python_is_asked_in_a_container_once_per_image_id_in_a_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every docker-backend service start asked ``python3`` of the base image in a throwaway container (an engine
    start and stop, ~0.4 s of CPU); an image's files never change, so a process asks once per image id, and the
    next service of that process (the suite's in-process apps) asks the engine only for the id."""
    settings = Settings(data_dir=tmp_path, backend="docker")
    asked: list[list[str]] = []
    real = interpreters._ask

    def counted(argv: list[str], *, python: bool = True) -> str:
        asked.append(argv)
        return real(argv, python=python)

    monkeypatch.setattr(interpreters, "_in_image", {})
    monkeypatch.setattr(interpreters, "_found", {})  # (this process's other services keep what they found)
    monkeypatch.setattr(interpreters, "_ask", counted)
    first = interpreters.discover(settings, "docker")
    second = interpreters.discover(settings, "docker")
    assert first == second and "unknown" not in first.values(), first
    runs = [argv[-1] for argv in asked if "run" in argv]
    assert len(runs) == 1 and runs[0].startswith("sha256:"), runs  # one container, of the image's id; then none
