"""A package build writes at most ``build_max_disk_mb`` to disk, on every backend (issue 47, 8).

An sdist's build backend (its ``setup.py``) runs package code, which wrote 1 GiB in 5 s into its
runtime folder, and it stayed. Here a real sdist from a loopback index (``tests/support/package_index.py``)
writes past a small bound — many files (then it keeps running: the watch kills it), or one large file
(the file size limit stops it) — and the build fails with a ``BuildError`` naming the bound, leaves no
bytes behind (no runtime, no partial folder, no build folder, no build box holding them), and the
service still evaluates.
"""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path
from typing import Any

import docker
import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.builds.disk_bound import tree_usage
from evaluator_host.sandbox.docker.box_disk import written
from tests.support.backends import docker_only
from tests.support.package_index import loopback_index, sdist_with_backend
from tests.support.service import assert_healthy, make_settings
from tests.support.wait import wait_until

BOUND_MB = 32
# The build backend's code: files of ``{mib}`` MiB each into the runtime folder it may write (the build
# sandbox's, or a build box's), 256 MiB in all at most, then (``{linger}``) it keeps running.
FILLER = """
import os, time

def probe():
    for folder in ("/sandbox/runtime/site", "/opt/evaluator/site"):
        if os.path.isdir(folder) and os.access(folder, os.W_OK):
            break
    else:
        folder = "."
    chunk = b"x" * (1 << 20)
    for n in range(256 // {mib}):
        with open(os.path.join(folder, "filler-%d.bin" % n), "wb") as fh:
            for _ in range({mib}):
                fh.write(chunk)
    if {linger}:
        time.sleep(600)
    return "WROTE = True\\n"
"""
CODE = "import filler\n\ndef evaluate(inputs, outputs, trace):\n    return 1.0\n"
SHAPES = {"many-files-then-running": (4, True), "one-large-file": (256, False)}
BACKENDS: list[Any] = [
    "process",
    pytest.param("docker", marks=[pytest.mark.docker, docker_only]),  # store mode: the host's build sandbox
    pytest.param("docker-image", marks=[pytest.mark.docker, docker_only]),  # a build box, committed as an image
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_build_that_writes_past_its_disk_bound_fails_naming_it_and_leaves_nothing(
    tmp_path: Path, backend: str, shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (issue 47, 8): the build is stopped (the watch kills a build still writing or running;
    the file size limit stops one file), answers 422 ``BuildError`` naming ``build_max_disk_mb``, and
    nothing of what it wrote stays: not in the data dir, not in the host's build folders, not in a build
    box. The service is healthy after."""
    files, data, scratch = tmp_path / "index", tmp_path / "data", tmp_path / "tmp"
    files.mkdir()
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # the host's build folders (and a box's /build)
    mib, linger = SHAPES[shape]
    with loopback_index(files) as index:
        version = f"1.0.{uuid.uuid4().int % 10**8}"  # a runtime no earlier run built (docker images stay)
        sdist_with_backend(files, "filler", version, FILLER.format(mib=mib, linger=linger))
        monkeypatch.setenv("PIP_INDEX_URL", index.url)
        settings = make_settings(
            data,
            backend=backend.split("-")[0],
            docker_runtime_store=backend != "docker-image",
            allow_sdist_builds=True,
            build_max_disk_mb=BOUND_MB,
            build_timeout_s=120,
        )
        with TestClient(create_app(settings)) as client:
            answer = client.post(
                "/v1/evaluate",
                json={
                    "language": "python",
                    "code": CODE,
                    "packages": {"filler": version},
                    "settings": {"timeout_s": 60},
                },
            )
            assert answer.status_code == 422, answer.text
            error = answer.json()["error"]
            assert error["type"] == "BuildError", error
            assert "build_max_disk_mb" in error["message"] and f"{BOUND_MB} MiB" in error["message"], error
            assert "took longer" not in error["message"], error  # stopped by the bound, not the time limit
            builder = client.app.state.services.backend.builder  # type: ignore[attr-defined]
            rid = builder.runtime_for("python", {"filler": version})
            assert builder.inventory(rid) == [], rid
            assert tree_usage([data]) < (BOUND_MB << 20) // 2, sorted(p.name for p in data.rglob("*"))
            # (docker: a spare build box's folder and relay may be there, holding nothing of the build)
            assert tree_usage([scratch]) < (BOUND_MB << 20) // 2, list(scratch.iterdir())
            if backend == "process":
                assert not list(scratch.iterdir()), list(scratch.iterdir())
            if backend == "docker-image":
                engine = builder.engine
                boxes = {"label": ["evaluator-host.build=1", f"evaluator-host.owner={engine.owner}"]}
                engine_client = docker.from_env()
                try:

                    def no_box_holds_it() -> bool:
                        found = engine_client.api.containers(all=True, filters=boxes)
                        return all(written(engine_client, box["Id"]) < (BOUND_MB << 20) // 2 for box in found)

                    wait_until(no_box_holds_it, timeout=60, what="the build box that wrote past the bound is gone")
                finally:
                    engine_client.close()
            assert_healthy(client)
