"""Docker store mode (``docker_runtime_store``): a Python set's runtime is a folder of hard links into the
package store, bound read-only into workers started from the base image, instead of a committed image."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import docker
import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.sandbox.docker.engine import OWNER, Engine
from evaluator_host.sandbox.docker.store_binds import is_folder
from evaluator_host.sandbox.process.bytecode import TODO
from tests.support import REPO, zygote
from tests.support.backends import docker_only
from tests.support.service import assert_healthy, evaluate, make_settings
from tests.support.wait import wait_until

pytestmark = [pytest.mark.docker, pytest.mark.network, docker_only]

# sets no other test builds (an image of the same set, from image mode, would be found first)
ONE = {"rapidfuzz": "3.9.7", "wcwidth": "0.2.13"}
TWO = {"rapidfuzz": "3.9.7", "wcwidth": "0.2.13", "idna": "3.10"}
CODE = """\
import os, {module}
def evaluate(inputs, outputs, trace):
    here = os.path.dirname({module}.__file__)
    try:
        open(os.path.join(here, "planted.py"), "w")
        wrote = "wrote"
    except OSError as exc:
        wrote = type(exc).__name__
    return {{"score": 1.0, "where": here, "wrote": wrote, "uid": os.getuid()}}
"""


def _prune(data_dir: Path, rid: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EVALUATOR_HOST_DATA_DIR": str(data_dir), "EVALUATOR_HOST_DOCKER_RUNTIME_STORE": "1"}
    argv = [sys.executable, "-m", "evaluator_host.cli", "runtimes", "prune", "--runtime", rid, "--backend", "docker"]
    return zygote.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def _inodes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.lstat().st_ino for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


def test_sets_are_store_folders_bound_read_only_into_base_image_workers_and_share_their_files(tmp_path: Path) -> None:
    """Two sets differing by one package: each runs in a container FROM the base image with its folder bound
    read-only at the image's packages path (a write answers an error, not a file); no runtime image is
    committed; the second set's rapidfuzz is the first's files (the same inodes, bytecode included), every
    file root's; the runtimes resource shows both folders, with their locks and hashes; a live worker's lease keeps a
    folder from a prune."""
    settings = make_settings(tmp_path, backend="docker", docker_runtime_store=True)
    engine = docker.from_env()
    # this data dir's runtime images (another test process's service may commit its own meanwhile)
    mine = {"label": ["evaluator-host.packages", f"{OWNER}={Engine(settings).owner}"]}
    try:
        with TestClient(create_app(settings)) as client:
            first = evaluate(client, CODE.format(module="rapidfuzz"), packages=ONE)
            second = evaluate(client, CODE.format(module="idna"), packages=TWO)
            for result, module in ((first, "rapidfuzz"), (second, "idna")):
                assert result["status"] == "ok", result
                details = result["details"]
                assert details["where"] == f"/opt/evaluator/site/{module}", details
                assert details["wrote"] in ("OSError", "PermissionError"), details  # read-only
                assert details["uid"] != 0
            assert engine.images.list(filters=mine) == []  # no runtime image committed
            one, two = first["runtime"]["id"], second["runtime"]["id"]
            shown = {rid: client.get(f"/v1/runtimes/{rid}").json() for rid in (one, two)}
            assert shown[one]["status"] == shown[two]["status"] == "ready", shown
            assert "wcwidth==0.2.13" in shown[one]["lock"] and "idna==3.10" in shown[two]["lock"], shown
            assert shown[one]["hashes"], shown[one]  # (the lock's archive hashes, from the folder's manifest)
            a, b = tmp_path / "runtimes" / one / "site", tmp_path / "runtimes" / two / "site"
            assert is_folder(str(a.parent))
            pyc = "rapidfuzz/__pycache__/__init__.cpython-311.pyc"  # (compiled after the first result: issue 55 §4)
            # linked one file at a time: wait until each runtime's work-left-over file is gone too (written before
            # the build answered, removed once every link is made)
            wait_until(lambda: all((p / pyc).is_file() and not (p.parent / TODO).exists() for p in (a, b)), timeout=120)
            in_a, in_b = _inodes(a), _inodes(b)
            shared = [name for name in in_a if name.startswith("rapidfuzz/")]
            assert len(shared) > 50
            for name in shared:
                assert in_a[name] == in_b[name], name
                info = os.lstat(a / name)
                assert info.st_uid == 0 and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH), name
            assert not (a / "rapidfuzz" / "planted.py").exists()
            assert_healthy(client)
            # its idle worker's container holds the folder's lease: a prune (another process) keeps it
            assert f"in use, kept {one}" in _prune(tmp_path, one).stdout
            assert a.is_dir()
        # the service stopped, its containers and leases went with it: now the folder goes
        assert f"removed {one}" in _prune(tmp_path, one).stdout
        assert not a.exists() and b.is_dir()
    finally:
        engine.close()
