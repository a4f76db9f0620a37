"""Store mode's side of a docker worker (``docker_runtime_store``): a Python set's runtime is a folder of links into
the package store (:mod:`evaluator_host.sandbox.docker.images` finds or builds it), bound read-only where an image
keeps its packages, and leased from before its container is created until the container is removed, so that a
prune of the folder waits for it (docs/architecture.md, 28). Store mode is taken where it fits: a host whose Python
has the base image's minor version and a C library no newer than the image's (:func:`store_fits`, asked once).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
from typing import Any, Protocol

import docker

from evaluator_host.definitions import languages
from evaluator_host.errors import SandboxError
from evaluator_host.sandbox.base import RuntimeKey
from evaluator_host.sandbox.docker.engine import Engine
from evaluator_host.settings import Settings

__all__ = ["FolderLeases", "close_lease", "folder_binds", "is_folder", "lease_folder", "store_fits"]

log = logging.getLogger("evaluator_host.sandbox.docker.images")  # (its warnings read as the images' before)


class FolderLeases(Protocol):
    """What a folder's lease needs of the docker builder
    (:class:`~evaluator_host.sandbox.docker.images.DockerRuntimeBuilder`)."""

    def lease(self, rid: str) -> int: ...

    def forget_location(self, location: str | None) -> None: ...


def is_folder(location: str | None) -> bool:
    """Whether a docker runtime's ``location`` is a store folder (an absolute path), not an image id."""
    return location is not None and location.startswith("/")


def store_fits(settings: Settings, engine: Engine, base_id: str) -> bool:
    """Whether a folder built for the host's interpreter runs on the base image's: the same minor
    version and a C library no newer than the image's (a wheel chosen for the host must load there)."""
    ask = "import os, sys; print(sys.version_info[0], sys.version_info[1], os.confstr('CS_GNU_LIBC_VERSION'))"

    def image_python(client: docker.DockerClient) -> str:
        out = client.containers.run(  # (labelled as the service's: a sweep removes it if the service dies)
            base_id,
            ["python3", "-I", "-S", "-c", ask],
            network_disabled=True,
            remove=True,
            labels=engine.labels(),
        )
        return bytes(out).decode().strip()

    try:
        answer = subprocess.run(
            [settings.python_executable, "-I", "-S", "-c", ask], capture_output=True, text=True, timeout=30
        ).stdout.strip()
        theirs = engine.run_sync(image_python)
    except Exception:  # noqa: BLE001 - whatever fails here means images, as before
        log.warning("docker_runtime_store: could not compare the interpreters; runtimes stay images")
        return False
    mine_v, theirs_v = answer.split()[:2], theirs.split()[:2]
    mine_c, theirs_c = answer.split()[-1], theirs.split()[-1]
    fits = mine_v == theirs_v and _version(mine_c) <= _version(theirs_c)
    if not fits:
        log.warning("docker_runtime_store: host %s vs image %s: runtimes stay images", answer, theirs)
    return fits


def _version(libc: str) -> tuple[int, ...]:
    """``glibc 2.36`` → (2, 36)."""
    try:
        return tuple(int(part) for part in libc.split()[-1].split("."))
    except ValueError:
        return (999,)


def folder_binds(runtime: RuntimeKey, folder: str | None) -> dict[str, dict[str, Any]]:
    """The read-only bind of a store folder's packages where the family's image keeps them ({} for an image)."""
    return (
        {
            f"{folder}/{languages.family(runtime.family).packages_dir}": {
                "bind": languages.family(runtime.family).image_packages_dir,
                "mode": "ro",
            }
        }
        if folder is not None
        else {}
    )


def lease_folder(builder: FolderLeases, location: str | None) -> int | None:
    """A store folder's lease, taken before its container is created and held while it lives (a prune
    then keeps the folder); :class:`SandboxError` when a prune removed it first (docker would bind an
    empty folder in its place). None for an image."""
    if not is_folder(location):
        return None
    lease = builder.lease(os.path.basename(str(location)))
    if not os.path.isdir(str(location)):
        close_lease(lease)
        builder.forget_location(location)
        raise SandboxError(f"the runtime {location} was removed: retry to rebuild it")
    return lease


def close_lease(lease: int | None) -> None:
    """Release a folder's lease (None: an image's, nothing to release)."""
    if lease is not None:
        with contextlib.suppress(OSError):
            os.close(lease)
