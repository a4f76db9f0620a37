"""The docker builder's inventory is its own data dir's: a runtime image another data dir's service built for the
same pins on the same engine is not listed (nor matched by ``runtimes lock``) until this data dir's service uses
it (CI 49: "2 runtimes match 'python-68c5…'" on an engine where another service had built the same set)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import docker
import pytest

from evaluator_host.sandbox.docker.engine import OWNER, Engine
from evaluator_host.sandbox.docker.images import L_RUNTIME, DockerRuntimeBuilder
from tests.support import REPO, zygote
from tests.support.backends import docker_only
from tests.support.service import make_settings

pytestmark = [pytest.mark.docker, pytest.mark.network, docker_only]

PINS = {"six": "1.13.0"}  # a set no other test builds: its image is this test's alone


def _lock(data_dir: Path, rid: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EVALUATOR_HOST_DATA_DIR": str(data_dir), "EVALUATOR_HOST_BACKEND": "docker"}
    argv = [sys.executable, "-m", "evaluator_host.cli", "runtimes", "lock", rid[:16], "--backend", "docker"]
    return zygote.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)


def test_another_data_dirs_runtime_image_is_not_this_ones_until_it_uses_it(tmp_path: Path) -> None:
    theirs_settings = make_settings(tmp_path / "theirs", backend="docker", docker_runtime_store=False)
    mine_settings = make_settings(tmp_path / "mine", backend="docker")
    theirs = DockerRuntimeBuilder(theirs_settings, Engine(theirs_settings))
    mine = DockerRuntimeBuilder(mine_settings, Engine(mine_settings))
    rid = theirs.runtime_for("python", PINS)
    assert rid == mine.runtime_for("python", PINS)  # one engine, one base image: the same id
    assert theirs.remove(rid)  # an image an interrupted earlier run left: its build is this test's
    try:
        built = asyncio.run(theirs.ensure("python", PINS))  # another data dir's service builds the set first
        assert not built.location.startswith("/")  # an image, labelled with its data dir
        labels = theirs.engine.client().images.get(built.location).labels
        assert labels[OWNER] == theirs.engine.owner != mine.engine.owner
        assert [i.id for i in theirs.inventory(rid)] == [rid]

        assert mine.inventory(rid) == [] and rid not in {i.runtime_id for i in mine.list_images()}
        nothing = _lock(tmp_path / "mine", rid)
        assert nothing.returncode == 2 and "no runtimes match" in nothing.stderr, nothing.stderr

        found = asyncio.run(mine.ensure("python", PINS))  # this data dir's service uses the set: its runtime too
        assert found.location == built.location  # their image, found (not built again)
        assert [i.id for i in mine.inventory(rid)] == [rid]
        short_id = theirs.engine.client().images.get(built.location).short_id  # the id `images show` prints
        assert [i.image_id for i in mine.list_images() if i.runtime_id == rid] == [short_id]
        one = _lock(tmp_path / "mine", rid)
        assert one.returncode == 0, one.stderr  # one runtime matches, not two
        assert '"six"' in one.stdout and "1.13.0" in one.stdout
    finally:
        theirs.remove(rid)
        theirs.close()
        mine.close()


def _tiny_image(client: docker.DockerClient, n: int, labels: dict[str, str]) -> str:
    """A one-file image imported from a tar in memory (no base image, nothing to build), with ``labels``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = str(n).encode()
        info = tarfile.TarInfo("n")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    out = client.api.import_image_from_data(buf.getvalue(), changes=[f"LABEL {k}={v}" for k, v in labels.items()])
    return str(json.loads(out.strip().splitlines()[-1])["status"])


def test_listing_runtimes_while_another_service_removes_its_images_never_fails(tmp_path: Path) -> None:
    """CI 49 at 3 workers: ``runtimes lock`` failed with a 404 because listing inspected each runtime image after
    listing them, and another service on the engine removed one of its own in between. The listing must hold
    however the engine's images change under it (and never show another data dir's)."""
    settings = make_settings(tmp_path / "mine", backend="docker")
    mine = DockerRuntimeBuilder(settings, Engine(settings))
    client = docker.from_env()
    theirs = [_tiny_image(client, n, {L_RUNTIME: f"vanishing-{n}", OWNER: "another-data-dir"}) for n in range(40)]
    removed = threading.Event()

    def remove_theirs() -> None:  # another service's clean-up, one image at a time
        for image in theirs:
            client.images.remove(image, force=True)
        removed.set()

    remover = threading.Thread(target=remove_theirs)
    listings: list[list[str]] = []
    try:
        remover.start()
        while not removed.is_set() and len(listings) < 10_000:
            listings.append([i.runtime_id for i in mine.list_images()])
        remover.join(timeout=120)
        assert removed.is_set()
        assert len(listings) >= 2, "no listing overlapped the removals: nothing was proven"
        assert not any(rid.startswith("vanishing-") for listing in listings for rid in listing)
    finally:
        remover.join(timeout=120)
        for image in theirs:
            with contextlib.suppress(docker.errors.NotFound):
                client.images.remove(image, force=True)
        mine.close()
        client.close()
