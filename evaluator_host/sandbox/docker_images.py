"""Runtime images for the docker backend: one per (language, base image id, exact pins).

A runtime image is the base image plus one layer holding ``/opt/evaluator/site``
(``pip install --target``), tagged ``evaluator-host/runtime:<runtime id>`` and labelled
with the pins and the full resolved lock (``pip list --format=freeze``). It is made
by running the install in a *build box* — a container FROM the base, with network
access, started idle — and committing it. A serving builder keeps one box started
ahead of time, so a build costs the install and the commit, not a container start;
used boxes are removed in the background.

* the host's pip configuration (index, extra indexes, find-links, trusted hosts, proxy,
  timeouts) is copied into a ``pip.conf`` for the build; local indexes and wheel
  folders it names are mounted read-only at the same paths;
* likewise the host's npm registry and proxy settings go into an ``npmrc`` (Node runtimes:
  ``npm install --ignore-scripts`` into ``/opt/evaluator/node``, the lock from its
  package-lock.json);
* the CA bundle setting (default: the host's system bundle) is mounted as pip's
  ``cert`` and npm's ``cafile`` so installs work behind a TLS-intercepting proxy;
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
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
from docker.types import LogConfig
from docker.utils.socket import frames_iter

from evaluator_host.errors import BackendUnavailable, BuildError
from evaluator_host.packages import runtime_id
from evaluator_host.sandbox.backend import Runtime
from evaluator_host.sandbox.builder import (
    NPM_INSTALL_FLAGS,
    BuildOnce,
    host_npm_config,
    npm_lock,
    npm_package_json,
    trim_install_log,
)
from evaluator_host.sandbox.docker_engine import MANAGED, Engine, NotFound
from evaluator_host.settings import Settings

__all__ = ["RUNTIME_REPO", "DockerRuntimeBuilder", "ImageInfo", "host_pip_config"]

log = logging.getLogger(__name__)

RUNTIME_REPO = "evaluator-host/runtime"
SITE = "/opt/evaluator/site"  # pip install --target (Python runtimes)
NODE_PREFIX = "/opt/evaluator/node"  # npm install --prefix: NODE_PREFIX/node_modules (Node runtimes)
L_RUNTIME = "evaluator-host.runtime-id"
L_LANGUAGE = "evaluator-host.language"
L_PACKAGES = "evaluator-host.packages"
L_LOCK = "evaluator-host.lock"
L_BASE = "evaluator-host.base-image"
_LOCK_MARK = "----evaluator-host-lock----"
_BUILD_PIDS = 1024  # a build may run compilers; still no fork bomb on the host
_PIP_KEYS = ("index-url", "extra-index-url", "find-links", "trusted-host", "proxy", "timeout", "retries", "no-index")


@dataclass(frozen=True)
class _BuildBox:
    """A started build container and the host folder mounted read-only at ``/build`` in it."""

    container_id: str
    directory: Path


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
        self._npm: dict[str, str] | None = None
        # A started build box waiting for the next build (see prepare()), and the thread that
        # refills it and removes used boxes off the request path.
        self.keep_spare = False
        self._spare: _BuildBox | None = None
        self._box_lock = threading.Lock()
        self._background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evh-build-box")
        self._closed = False

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

    def npm_config(self) -> dict[str, str]:
        """The npm settings builds use (host's registry and proxy settings, read once)."""
        if self._npm is None:
            self._npm = host_npm_config()
        return self._npm

    def prepare(self) -> None:
        """Have a started build box ready, so the next build skips container start-up (blocking).

        Only a serving builder (``keep_spare``) keeps one; it is refilled after each build.
        """
        if not self.keep_spare or self._closed:
            return
        with self._box_lock:
            if self._spare is not None:
                return
        box = self.engine.run_sync(self._open_box)
        with self._box_lock:
            kept = self._spare is None and not self._closed
            if kept:
                self._spare = box
        if not kept:
            self._discard(box)

    def prepare_soon(self) -> None:
        """:meth:`prepare` in the background (never raises)."""
        if self.keep_spare and not self._closed:
            self._background.submit(self._quietly, self.prepare)

    def close(self) -> None:
        """Finish background work and remove the spare build box (blocking)."""
        self._closed = True
        self._background.shutdown(wait=True)
        with self._box_lock:
            box, self._spare = self._spare, None
        if box is not None:
            self._quietly(self._discard, box)

    @staticmethod
    def _quietly(fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - background housekeeping: the sweep catches leftovers
            log.warning("build box housekeeping failed", exc_info=True)

    def _open_box(self, client: docker.DockerClient) -> _BuildBox:
        """Start a build container FROM the base (network on), idle until a build runs in it."""
        build = Path(tempfile.mkdtemp(prefix="evaluator-host-build-"))
        try:
            config = self.pip_config()
            conf = ["[global]", "no-input = true", "disable-pip-version-check = true", "no-cache-dir = true"]
            conf += [f"{key} = {value}" for key, value in config.items()]
            if self.settings.ca_bundle is not None:
                shutil.copyfile(self.settings.ca_bundle, build / "ca.pem")
                conf.append("cert = /build/ca.pem")
            (build / "pip.conf").write_text("\n".join(conf) + "\n")
            npmrc = [f"{key}={value}" for key, value in self.npm_config().items()]
            if self.settings.ca_bundle is not None:
                npmrc.append("cafile=/build/ca.pem")
            (build / "npmrc").write_text("\n".join(npmrc) + "\n")
            for path in build.iterdir():
                path.chmod(0o644)
            build.chmod(0o755)
            # bind mounts (not volumes): nothing of them is recorded in the committed image
            binds = {str(build): {"bind": "/build", "mode": "ro"}}
            binds.update({path: {"bind": path, "mode": "ro"} for path in local_index_paths(config)})
            api = client.api
            created = api.create_container(
                self.base_id(),
                ["sleep", "infinity"],
                user="0:0",
                environment={},
                labels=self.engine.labels(**{"evaluator-host.build": "1"}),
                name=f"evh-build-{self.engine.owner}-{os.urandom(4).hex()}",
                host_config=api.create_host_config(
                    binds=binds,
                    init=True,
                    cap_drop=["ALL"],
                    security_opt=["no-new-privileges:true"],
                    pids_limit=_BUILD_PIDS,
                    log_config=LogConfig(type=LogConfig.types.NONE),
                ),
            )
            box = _BuildBox(str(created["Id"]), build)
        except BaseException:
            shutil.rmtree(build, ignore_errors=True)
            raise
        try:
            api.start(box.container_id)
        except BaseException:
            self._discard(box)
            raise
        return box

    def _discard(self, box: _BuildBox) -> None:
        try:
            self.engine.run_sync(lambda client: client.api.remove_container(box.container_id, force=True))
        except NotFound:
            pass
        finally:
            shutil.rmtree(box.directory, ignore_errors=True)

    def _take_box(self, client: docker.DockerClient) -> _BuildBox:
        with self._box_lock:
            box, self._spare = self._spare, None
        return box if box is not None else self._open_box(client)

    def _install_script(self, box: _BuildBox, language: str, pins: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """Write the install for ``pins`` into the box's /build; return its command and environment.

        Both print the lock after ``_LOCK_MARK``: ``name==version`` lines (pip) or the
        package-lock.json (npm).
        """
        files: dict[str, str]
        if language == "python":
            # pip runs in-process, then the lock is listed as `pip list --format=freeze` would print
            # it, without a second interpreter start-up (pip's `main` is what `python -m pip` calls)
            files = {
                "requirements.txt": "".join(f"{name}=={version}\n" for name, version in pins.items()),
                "build.py": "import importlib.metadata, sys\n"
                "from pip._internal.cli.main import main\n"
                f"code = main(['install', '--no-warn-script-location', '--target', '{SITE}',"
                " '-r', '/build/requirements.txt'])\n"
                "if code:\n    sys.exit(code)\n"
                f"print('{_LOCK_MARK}')\n"
                f"for d in importlib.metadata.distributions(path=['{SITE}']):\n"
                "    print(d.metadata['Name'] + '==' + d.version)\n",
            }
            command = ["python3", "/build/build.py"]
            environment = {
                "PIP_CONFIG_FILE": "/build/pip.conf",
                "PIP_BREAK_SYSTEM_PACKAGES": "1",
                "PYTHONDONTWRITEBYTECODE": "1",
            }
        else:
            files = {
                "package.json": json.dumps(npm_package_json(pins), indent=2) + "\n",
                # the npm cache lives in /tmp/.npm and is removed before the commit
                "build.sh": "set -e\n"
                f"mkdir -p {NODE_PREFIX} && cp /build/package.json {NODE_PREFIX}/ && cd {NODE_PREFIX}\n"
                f"npm install {' '.join(NPM_INSTALL_FLAGS)} --userconfig /build/npmrc --cache /tmp/.npm "
                "|| { rc=$?; rm -rf /tmp/.npm; exit $rc; }\n"
                "rm -rf /tmp/.npm /root/.npm /tmp/node-compile-cache\n"
                f"echo {_LOCK_MARK}\ncat package-lock.json\n",
            }
            command = ["sh", "/build/build.sh"]
            environment = {"HOME": "/tmp", "NODE_OPTIONS": "", "npm_config_update_notifier": "false"}
        for name, text in files.items():
            (box.directory / name).write_text(text)
            (box.directory / name).chmod(0o644)
        return command, environment

    def build(self, rid: str, language: str, pins: dict[str, str]) -> Runtime:
        """Run the installer in a build box FROM the base and commit it (see the module docstring)."""
        family = "python" if language == "python" else "node"
        shown = [f"{name}=={version}" if family == "python" else f"{name}@{version}" for name, version in pins.items()]
        started = time.monotonic()
        log.info("building runtime %s for %s", rid, ", ".join(shown))
        box = self.engine.run_sync(self._take_box)
        try:
            command, environment = self._install_script(box, family, pins)
            output, code, runtime = self.engine.run_sync(
                self._run_and_commit, box, rid, family, pins, command, environment
            )
        finally:
            if self.keep_spare and not self._closed:
                self._background.submit(self._quietly, self._discard, box)
                self.prepare_soon()
            else:
                self._discard(box)
        (self.root / f"{rid}.build.log").write_text(
            f"# {' '.join(shown)} (exit {code}, {time.monotonic() - started:.1f} s)\n{output}"
        )
        if runtime is None:
            reason = trim_install_log(output.split(_LOCK_MARK)[0])
            raise BuildError(f"installing {', '.join(shown)} failed:\n{reason}", runtime_id=rid, output=reason)
        return Runtime(runtime.id, language, pins, runtime.location, runtime.lock)

    def _run_and_commit(
        self,
        client: docker.DockerClient,
        box: _BuildBox,
        rid: str,
        family: str,
        pins: dict[str, str],
        command: list[str],
        environment: dict[str, str],
    ) -> tuple[str, int, Runtime | None]:
        """Run the install in ``box``; commit it when it succeeded (its output, exit code, runtime)."""
        api = client.api
        limit = self.settings.build_timeout_s
        command = ["timeout", "-s", "KILL", f"{limit:.0f}", *command]
        exec_id = api.exec_create(box.container_id, command, user="0:0", environment=environment)["Id"]
        started = time.monotonic()
        sock = api.exec_start(exec_id, socket=True)
        try:
            raw = getattr(sock, "_sock", sock)
            raw.settimeout(limit + 60)
            output = b"".join(data for _, data in frames_iter(sock, tty=False)).decode("utf-8", "replace")
        finally:
            sock.close()
        installed = time.monotonic()
        code = api.exec_inspect(exec_id).get("ExitCode")
        code = 1 if code is None else int(code)
        if code == 128 + 9 and time.monotonic() - started >= limit:
            return f"{output}\nthe install took longer than {limit:.0f} s", code, None
        if code != 0 or _LOCK_MARK not in output:
            return output, code, None
        tail = output.split(_LOCK_MARK)[-1]
        lock = npm_lock(tail) if family == "node" else sorted(ln for ln in tail.splitlines() if "==" in ln)
        labels = {
            MANAGED: "1",
            L_RUNTIME: rid,
            L_LANGUAGE: family,
            L_PACKAGES: json.dumps(pins, sort_keys=True),
            L_LOCK: json.dumps(lock),
            L_BASE: self.base_id(),
        }
        image = api.commit(
            box.container_id,
            repository=RUNTIME_REPO,
            tag=rid,
            pause=False,  # the box only runs `sleep` now: nothing to freeze
            conf={
                "Labels": labels,
                "Cmd": ["python3"],
                "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"],
            },
        )
        log.info(
            "built runtime %s: install %.2f s, commit %.2f s", rid, installed - started, time.monotonic() - installed
        )
        return output, code, Runtime(rid, family, pins, str(image["Id"]), lock)

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
