"""The wheel runs on its own (issue 32): built from the sdist, installed into a fresh venv in a temporary folder
with no checkout beside it, its ``evaluator-host serve`` evaluates Python, JavaScript and TypeScript on the
process backend and on docker (the base image built by the installed ``evaluator-host images build --base``),
runs a job and serves the playground.

Slow (it builds the distribution and installs its dependencies). The evaluations and the job go through the
Python client the wheel installs (``evaluator_host.client``, run by the installed interpreter, so it is the
wheel's copy that answers); the version, OpenAPI and page checks are plain HTTP.
"""

from __future__ import annotations

import json
import subprocess
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import evaluator_host
from evaluator_host.settings import Settings
from tests.support import REPO
from tests.support.backends import docker_only
from tests.support.installed import (
    call,
    clean_env,
    evaluate_retrying_a_cold_start,
    get_text,
    install,
    run_dist,
    serving_installed,
)

pytestmark = pytest.mark.slow

CODES = {
    "python": "def evaluate(inputs, outputs, trace):\n    return {'score': float(outputs == inputs['x'] * 2)}\n",
    "javascript": (
        "function evaluate(inputs, outputs, trace) {\n  return { score: outputs === inputs.x * 2 ? 1 : 0 };\n}\n"
    ),
    "typescript": (
        "export function evaluate(inputs: { x: number }, outputs: number, trace: unknown): { score: number } {\n"
        "  return { score: outputs === inputs.x * 2 ? 1 : 0 };\n}\n"
    ),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return run_dist(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="module")
def venv_bin(built: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("installed")
    assert REPO not in root.parents and not (root / "runtimes").exists()
    yield install(built[1], root / "venv")


def test_the_wheel_carries_the_harnesses_and_the_built_playground(built: tuple[Path, Path]) -> None:
    sdist, wheel = built
    names = set(zipfile.ZipFile(wheel).namelist())
    for harness in (REPO / "runtimes").rglob("*"):
        if harness.is_file() and "__pycache__" not in harness.parts:
            assert f"evaluator_host/_bundled/runtimes/{harness.relative_to(REPO / 'runtimes')}" in names
    assert "evaluator_host/_bundled/web/index.html" in names
    assert any(n.startswith("evaluator_host/_bundled/web/assets/") for n in names)
    assert "evaluator_host/sandbox/docker/build_base.sh" in names
    assert "evaluator_host/migration/typescript/node_modules/typescript/lib/typescript.js" in names  # the TS migration
    assert wheel.name.startswith(f"evaluator_host-{evaluator_host.__version__}-")
    # the sdist builds the wheel offline: it ships web/dist built, beside the sources and the npm lock
    members = set(tarfile.open(sdist).getnames())
    top = sdist.name.removesuffix(".tar.gz")
    for path in ("web/dist/index.html", "web/package-lock.json", "web/build.mjs", "setup.py", "CHANGELOG.md"):
        assert f"{top}/{path}" in members, path
    parser = "/evaluator_host/migration/typescript/node_modules/typescript/"  # its three files, nothing else
    assert not any("/node_modules/" in m and parser not in m + "/" for m in members)
    assert sum(parser in m and not m.endswith("/") and "." in m.rsplit("/", 1)[1] for m in members) == 3


def test_version(venv_bin: Path, tmp_path: Path) -> None:
    out = subprocess.run(
        [venv_bin / "evaluator-host", "--version"],
        env=clean_env(tmp_path, venv_bin),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == f"evaluator-host {evaluator_host.__version__} (HTTP API v{evaluator_host.API_VERSION})"


def test_the_typescript_migration_parses_with_the_shipped_compiler(venv_bin: Path, tmp_path: Path) -> None:
    legacy = tmp_path / "legacy.ts"
    legacy.write_text(
        "export function evaluate(app_params: any, inputs: any, output: string, correct_answer: string): number {\n"
        "  return output === correct_answer ? 1 : 0;\n}\n"
    )
    out = subprocess.run(
        [venv_bin / "evaluator-host", "migrate", str(legacy), "--diff"],
        env=clean_env(tmp_path, venv_bin),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "+export function evaluate(inputs: any, outputs: string, trace: unknown): number {" in out.stdout, out
    assert "not installed" not in out.stdout + out.stderr


def _evaluates_every_language(base: str) -> None:
    for language, code in CODES.items():
        body = {"language": language, "code": code, "inputs": {"x": 21}, "outputs": 42}
        result = evaluate_retrying_a_cold_start(lambda: call(base, "POST", "/v1/evaluate", body))  # noqa: B023
        assert result["status"] == "ok" and result["score"] == 1.0, (language, result)


# Run by the installed interpreter: the wheel's own client evaluates each language and runs a job.
_CLIENT_SCRIPT = """
import json, sys
from evaluator_host.client import Client

codes = json.loads(sys.argv[2])
with Client(sys.argv[1], api_key="") as client:
    scores = {lang: client.evaluate(code, lang, inputs={"x": 21}, outputs=42).score for lang, code in codes.items()}
    evaluator = client.create_evaluator("doubles", codes["typescript"], language="typescript")
    rows = [{"x": i, "outputs": i * 2 if i % 2 else -1} for i in range(10)]  # inputs: the whole row
    seen = []
    job = client.wait_job(client.start_job(evaluator.id, rows=rows), on_progress=lambda j: seen.append(j.status),
                          timeout_s=180)
    results = [item.result.score for item in client.iter_results(job)]
    print(json.dumps({"scores": scores, "status": job.status, "progress": job.progress.model_dump(),
                      "mean": job.aggregate.score.mean, "results": results, "seen": seen,
                      "module": __import__("evaluator_host.client").client.__file__}))
"""


def _through_the_installed_client(venv_bin: Path, base: str, tmp_path: Path) -> None:
    out = subprocess.run(
        [venv_bin / "python", "-c", _CLIENT_SCRIPT, base, json.dumps(CODES)],
        env=clean_env(tmp_path, venv_bin),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert found["scores"] == {"python": 1.0, "javascript": 1.0, "typescript": 1.0}, found
    assert found["status"] == "succeeded" and found["progress"] == {
        "total": 10,
        "done": 10,
        "failed": 0,
        "cached": 0,
    }, found
    assert found["mean"] == 0.5 and found["results"] == [0.0, 1.0] * 5, found
    assert found["seen"] and str(REPO) not in found["module"], found  # the callback ran; the wheel's copy


def test_serve_evaluates_runs_a_job_and_serves_the_page_on_the_process_backend(venv_bin: Path, tmp_path: Path) -> None:
    with serving_installed(venv_bin, tmp_path / "home", EVALUATOR_HOST_BACKEND="process") as base:
        health = call(base, "GET", "/healthz")
        assert health["backend"] == "process"
        assert (health["version"], health["api_version"]) == (evaluator_host.__version__, evaluator_host.API_VERSION)
        spec = call(base, "GET", "/openapi.json")
        assert spec["info"]["version"] == evaluator_host.__version__
        assert spec["info"]["x-api-version"] == evaluator_host.API_VERSION
        _evaluates_every_language(base)  # also warms the three languages' first starts
        _through_the_installed_client(venv_bin, base, tmp_path)
        status, kind, page = get_text(base, "/")
        assert status == 200 and kind.startswith("text/html") and "/assets/" in page and "not built" not in page
        asset = page.split('src="/assets/', 1)[1].split('"', 1)[0]
        status, kind, script = get_text(base, f"/assets/{asset}")
        assert status == 200 and "javascript" in kind and len(script) > 10_000
        assert call(base, "GET", "/healthz")["status"] == "ok"


@pytest.mark.docker
@docker_only
def test_serve_evaluates_on_docker_with_the_base_image_the_installed_command_builds(
    venv_bin: Path, tmp_path: Path
) -> None:
    tag = Settings().base_image  # EVALUATOR_HOST_BASE_IMAGE, else the default (.ci/run's make images built it)
    env = clean_env(tmp_path, venv_bin)
    env["EVALUATOR_HOST_BASE_IMAGE"] = tag
    build = [venv_bin / "evaluator-host", "images", "build", "--base"]
    subprocess.run(build, env=env, cwd=tmp_path, check=True, timeout=1800)
    with serving_installed(
        venv_bin, tmp_path / "home", EVALUATOR_HOST_BACKEND="docker", EVALUATOR_HOST_BASE_IMAGE=tag
    ) as base:
        assert call(base, "GET", "/healthz")["backend"] == "docker"
        _evaluates_every_language(base)
        assert call(base, "GET", "/healthz")["status"] == "ok"
