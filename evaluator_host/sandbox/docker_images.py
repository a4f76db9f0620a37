"""Runtime images for the docker backend: one per (language, base image id, exact pins).

A runtime image is the base image plus one layer holding ``/opt/evaluator/site``
(``pip install --target``), tagged ``evaluator-host/runtime:<runtime id>`` and labelled
with the pins and the full resolved lock (``pip list --format=freeze``). It is made
by running a build container FROM the base with network access, then committing it:

* the host's pip configuration (index, extra indexes, find-links, trusted hosts, proxy,
  timeouts) is copied into a ``pip.conf`` for the build; local indexes and wheel
  folders it names are mounted read-only at the same paths;
* the CA bundle setting (default: the host's system bundle) is mounted as pip's
  ``cert`` so installs work behind a TLS-intercepting proxy;
* all of that lives in a read-only ``/build`` mount, never in the image's
  environment, command or layers.

Builds are serialized per runtime id (asyncio lock + file lock), a failed build
raises :class:`BuildError` with pip's message and leaves no image; every build's log
is kept in ``data_dir/images/<id>.build.log``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
from docker.types import Mount

from evaluator_host.errors import BackendUnavailable, BuildError
from evaluator_host.packages import runtime_id
from evaluator_host.sandbox.backend import Runtime
from evaluator_host.sandbox.builder import BuildOnce, trim_install_log
from evaluator_host.sandbox.docker_engine import MANAGED, Engine, NotFound
from evaluator_host.settings import Settings

__all__ = ["RUNTIME_REPO", "DockerRuntimeBuilder", "ImageInfo", "host_pip_config"]

log = logging.getLogger(__name__)

RUNTIME_REPO = "evaluator-host/runtime"
SITE = "/opt/evaluator/site"
L_RUNTIME = "evaluator-host.runtime-id"
L_LANGUAGE = "evaluator-host.language"
L_PACKAGES = "evaluator-host.packages"
L_LOCK = "evaluator-host.lock"
L_BASE = "evaluator-host.base-image"
_LOCK_MARK = "----evaluator-host-lock----"
_PIP_KEYS = ("index-url", "extra-index-url", "find-links", "trusted-host", "proxy", "timeout", "retries", "no-index")


@dataclass(frozen=True)
class ImageInfo:
    """A cached runtime image, as ``evaluator-host images list`` shows it."""

    runtime_id: str
    image_id: str
    language: str
    packages: dict[str, str]
    lock: list[str]
    size_bytes: int
    created: str
    last_used: float | None


def host_pip_config(python: str = sys.executable) -> dict[str, str]:
    """The host's effective pip settings we pass on to builds (``pip config list``).

    Environment (``PIP_*``) values win over files, as in pip itself. ``cert`` is left
    out: builds get the CA bundle setting instead.
    """
    try:
        out = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    files: dict[str, str] = {}
    env: dict[str, str] = {}
    for line in out.splitlines():
        match = re.match(r"^([^.=]*)\.([a-z-]+)='(.*)'$", line.strip())
        if not match or match.group(2) not in _PIP_KEYS:
            continue
        (env if match.group(1) == ":env:" else files)[match.group(2)] = match.group(3)
    return {**files, **env}


def local_index_paths(config: dict[str, str]) -> list[str]:
    """Host folders named by the pip settings (file:// indexes, find-links dirs)."""
    paths = []
    for key in ("index-url", "extra-index-url", "find-links"):
        for item in config.get(key, "").split():
            path = item[len("file://") :] if item.startswith("file://") else item
            if path.startswith("/") and os.path.isdir(path):
                path = os.path.realpath(path)
                # a PEP 503 tree ("<root>/simple") links its files relative to <root>
                paths.append(os.path.dirname(path) if os.path.basename(path) == "simple" else path)
    return sorted(set(paths))


class DockerRuntimeBuilder(BuildOnce):
    """Runtime images: the base image for no packages, one committed image per package set."""

    def __init__(self, settings: Settings, engine: Engine) -> None:
        super().__init__(settings.data_dir / "images")  # locks, build logs, last-use marks
        self.settings = settings
        self.engine = engine
        self._base_id: str | None = None
        self._pip: dict[str, str] | None = None

    # -- identity ------------------------------------------------------------------------
    def base_id(self) -> str:
        """The base image's id (looked up once; ``BackendUnavailable`` when it is missing)."""
        if self._base_id is None:

            def lookup(client: docker.DockerClient) -> str:
                try:
                    return str(client.images.get(self.settings.base_image).id)
                except NotFound:
                    raise BackendUnavailable(
                        f"the base image {self.settings.base_image} is missing: run `make images` "
                        "(or set EVALUATOR_HOST_BASE_IMAGE)",
                        retry_after_s=60,
                    ) from None

            self._base_id = self.engine.run_sync(lookup)
        return self._base_id

    def runtime_for(self, language: str, pins: dict[str, str]) -> str:
        """The runtime id of ``pins`` on this base image (no build)."""
        return runtime_id(language, self.base_id(), pins)

    def tag(self, rid: str) -> str:
        """The image reference of runtime ``rid``."""
        return f"{RUNTIME_REPO}:{rid}"

    # -- BuildOnce -----------------------------------------------------------------------
    def bare_location(self) -> str | None:
        """No packages: the base image itself."""
        return self.base_id()

    def find(self, rid: str, language: str, pins: dict[str, str]) -> Runtime | None:
        """The image tagged for ``rid``, if any service built it."""
        return self.engine.run_sync(self._existing, rid)

    def _existing(self, client: docker.DockerClient, rid: str) -> Runtime | None:
        try:
            image = client.images.get(self.tag(rid))
        except NotFound:
            return None
        labels = image.labels or {}
        return Runtime(
            rid,
            labels.get(L_LANGUAGE, "python"),
            json.loads(labels.get(L_PACKAGES, "{}")),
            str(image.id),
            json.loads(labels.get(L_LOCK, "[]")),
        )

    # -- build ---------------------------------------------------------------------------
    def pip_config(self) -> dict[str, str]:
        """The pip settings builds use (host's, read once)."""
        if self._pip is None:
            self._pip = host_pip_config()
        return self._pip

    def build(self, rid: str, language: str, pins: dict[str, str]) -> Runtime:
        """Run pip in a build container FROM the base and commit it (see the module docstring)."""
        requirements = [f"{name}=={version}" for name, version in pins.items()]
        config = self.pip_config()
        started = time.monotonic()
        log.info("building runtime %s for %s", rid, ", ".join(requirements))
        with tempfile.TemporaryDirectory(prefix="evaluator-host-build-") as tmp:
            build = Path(tmp)
            conf = ["[global]", "no-input = true", "disable-pip-version-check = true", "no-cache-dir = true"]
            conf += [f"{key} = {value}" for key, value in config.items()]
            if self.settings.ca_bundle is not None:
                shutil.copyfile(self.settings.ca_bundle, build / "ca.pem")
                conf.append("cert = /build/ca.pem")
            (build / "pip.conf").write_text("\n".join(conf) + "\n")
            (build / "requirements.txt").write_text("\n".join(requirements) + "\n")
            (build / "build.sh").write_text(
                "set -e\nexport PIP_CONFIG_FILE=/build/pip.conf PIP_BREAK_SYSTEM_PACKAGES=1 "
                "PYTHONDONTWRITEBYTECODE=1\n"
                f"python3 -m pip install --no-warn-script-location --target {SITE} -r /build/requirements.txt\n"
                f"echo {_LOCK_MARK}\n"
                # the lock, as `pip list --format=freeze` would print it, without a second pip start-up
                f"python3 -I -c 'import importlib.metadata as m\n"
                f'for d in m.distributions(path=["{SITE}"]): print(d.metadata["Name"] + "==" + d.version)\'\n'
            )
            for path in build.iterdir():
                path.chmod(0o644)
            build.chmod(0o755)
            # bind mounts (not volumes): nothing of them is recorded in the committed image
            mounts = [Mount("/build", str(build), type="bind", read_only=True)]
            mounts += [Mount(path, path, type="bind", read_only=True) for path in local_index_paths(config)]
            output, code, runtime = self.engine.run_sync(self._run_and_commit, rid, language, pins, mounts)
        (self.root / f"{rid}.build.log").write_text(
            f"# {' '.join(requirements)} (exit {code}, {time.monotonic() - started:.1f} s)\n{output}"
        )
        if runtime is None:
            reason = trim_install_log(output.split(_LOCK_MARK)[0])
            raise BuildError(f"installing {', '.join(requirements)} failed:\n{reason}", runtime_id=rid, output=reason)
        return runtime

    def _run_and_commit(
        self,
        client: docker.DockerClient,
        rid: str,
        language: str,
        pins: dict[str, str],
        mounts: list[Mount],
    ) -> tuple[str, int, Runtime | None]:
        """Run the install in a build container; commit it when it succeeded (its output, exit code, runtime)."""
        container = client.containers.create(
            self.base_id(),
            ["sh", "/build/build.sh"],
            user="0:0",
            mounts=mounts,
            labels=self.engine.labels(**{"evaluator-host.build": rid}),
            name=f"evh-build-{rid}-{os.urandom(3).hex()}",
            environment={},
        )
        try:
            container.start()
            try:
                status = container.wait(timeout=self.settings.build_timeout_s)
                code = int(status.get("StatusCode", 1))
            except Exception:  # noqa: BLE001 - the wait timed out: report it as a failed build
                container.kill()
                return f"the install took longer than {self.settings.build_timeout_s:.0f} s", 124, None
            output = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
            if code != 0 or _LOCK_MARK not in output:
                return output, code, None
            lock = sorted(ln for ln in output.split(_LOCK_MARK)[-1].splitlines() if "==" in ln)
            labels = {
                MANAGED: "1",
                L_RUNTIME: rid,
                L_LANGUAGE: language,
                L_PACKAGES: json.dumps(pins, sort_keys=True),
                L_LOCK: json.dumps(lock),
                L_BASE: self.base_id(),
            }
            image = container.commit(
                repository=RUNTIME_REPO,
                tag=rid,
                conf={"Labels": labels, "Cmd": ["python3"], "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"]},
            )
            return output, code, Runtime(rid, language, pins, str(image.id), lock)
        finally:
            container.remove(force=True)

    # -- management (CLI) ----------------------------------------------------------------
    def _used_path(self, rid: str) -> Path:
        return self.root / f"{rid}.used"

    def touch(self, rid: str) -> None:
        """Record that runtime ``rid`` was used now (for ``images list`` and ``prune``)."""
        path = self._used_path(rid)
        try:
            if time.time() - path.stat().st_mtime < 60:
                return
        except FileNotFoundError:
            pass
        path.touch()

    def list_images(self) -> list[ImageInfo]:
        """Every cached runtime image (any base)."""

        def listing(client: docker.DockerClient) -> list[Any]:
            return list(client.images.list(filters={"label": f"{L_RUNTIME}"}))

        infos = []
        for image in self.engine.run_sync(listing):
            labels = image.labels or {}
            rid = labels[L_RUNTIME]
            used = self._used_path(rid)
            infos.append(
                ImageInfo(
                    runtime_id=rid,
                    image_id=str(image.short_id),
                    language=labels.get(L_LANGUAGE, "?"),
                    packages=json.loads(labels.get(L_PACKAGES, "{}")),
                    lock=json.loads(labels.get(L_LOCK, "[]")),
                    size_bytes=int(image.attrs.get("Size", 0)),
                    created=str(image.attrs.get("Created", ""))[:19],
                    last_used=used.stat().st_mtime if used.exists() else None,
                )
            )
        return sorted(infos, key=lambda i: (i.language, i.runtime_id))

    def remove(self, rid: str) -> bool:
        """Remove runtime image ``rid``; False when a container still uses it."""

        def remove(client: docker.DockerClient) -> bool:
            try:
                client.images.remove(self.tag(rid))
            except NotFound:
                return True
            except docker.errors.APIError as exc:
                if exc.status_code == 409:
                    return False
                raise
            return True

        removed = self.engine.run_sync(remove)
        if removed:
            self._used_path(rid).unlink(missing_ok=True)
            self._cache.pop(rid, None)
        return removed
