"""Build boxes: the containers runtime installs run in (docker backend).

A build box is a container FROM the base image, with network access, started idle
(``sleep infinity``, all capabilities dropped, no-new-privileges, a pids limit). An install
is one ``exec`` in it; the box is then committed by the image builder and thrown away, so
every runtime image starts from a clean base. A serving builder (``keep_spare``) keeps one
box started ahead of time and removes used ones in the background, so a build costs the
install and the commit, not a container start (~0.17 s here, mostly network set-up).

What a build needs of the host reaches it through a read-only bind mount at ``/build``
(never the image's environment, command or layers):

* the host's pip configuration (index, extra indexes, find-links, trusted hosts, proxy,
  timeouts) as a ``pip.conf``; local indexes and wheel folders it names are mounted
  read-only at the same paths;
* the host's npm registry and proxy settings as an ``npmrc``;
* the CA bundle setting (default: the host's system bundle) as pip's ``cert`` and npm's
  ``cafile``, so installs work behind a TLS-intercepting proxy.

Python installs are ``pip install --target /opt/evaluator/site`` run in-process, the lock
listed by the same interpreter; Node installs are ``npm install --ignore-scripts`` into
``/opt/evaluator/node``, the lock from its package-lock.json. Both print the lock after
:data:`LOCK_MARK`.
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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
from docker.types import LogConfig
from docker.utils.socket import frames_iter

from evaluator_host.sandbox.build_once import NPM_INSTALL_FLAGS, host_npm_config, npm_package_json
from evaluator_host.sandbox.docker.engine import Engine, NotFound
from evaluator_host.settings import Settings

__all__ = ["LOCK_MARK", "NODE_PREFIX", "SITE", "BuildBox", "BuildBoxes", "host_pip_config", "local_index_paths"]

log = logging.getLogger(__name__)

SITE = "/opt/evaluator/site"  # pip install --target (Python runtimes)
NODE_PREFIX = "/opt/evaluator/node"  # npm install --prefix: NODE_PREFIX/node_modules (Node runtimes)
LOCK_MARK = "----evaluator-host-lock----"
_BUILD_PIDS = 1024  # a build may run compilers; still no fork bomb on the host
_PIP_KEYS = ("index-url", "extra-index-url", "find-links", "trusted-host", "proxy", "timeout", "retries", "no-index")


@dataclass(frozen=True)
class BuildBox:
    """A started build container and the host folder mounted read-only at ``/build`` in it."""

    container_id: str
    directory: Path


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


class BuildBoxes:
    """Build boxes of one builder: the spare kept started, and the install run in a box."""

    def __init__(self, settings: Settings, engine: Engine, base_id: Callable[[], str]) -> None:
        self.settings = settings
        self.engine = engine
        self.base_id = base_id
        self.keep_spare = False  # set by a serving builder: keep one box started ahead of time
        self._pip: dict[str, str] | None = None
        self._npm: dict[str, str] | None = None
        self._spare: BuildBox | None = None
        self._lock = threading.Lock()
        self._background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evh-build-box")
        self._closed = False

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

    # -- the spare ------------------------------------------------------------------------
    def prepare(self) -> None:
        """Have a started box ready, so the next build skips container start-up (blocking)."""
        if not self.keep_spare or self._closed:
            return
        with self._lock:
            if self._spare is not None:
                return
        box = self.engine.run_sync(self._open_box)
        with self._lock:
            kept = self._spare is None and not self._closed
            if kept:
                self._spare = box
        if not kept:
            self._discard(box)

    def prepare_soon(self) -> None:
        """:meth:`prepare` in the background (never raises)."""
        if self.keep_spare and not self._closed:
            self._background.submit(self._quietly, self.prepare)

    def take(self) -> BuildBox:
        """The spare box if it still runs (something outside may have removed it), else a new one (blocking)."""
        with self._lock:
            box, self._spare = self._spare, None
        if box is not None:
            if self.engine.run_sync(self._running, box):
                return box
            log.warning("the spare build box %s is gone: starting another", box.container_id[:12])
            self._quietly(self._discard, box)
        return self.engine.run_sync(self._open_box)

    @staticmethod
    def _running(client: docker.DockerClient, box: BuildBox) -> bool:
        try:
            return bool(client.api.inspect_container(box.container_id)["State"]["Running"])
        except NotFound:
            return False

    def release(self, box: BuildBox) -> None:
        """Throw a used box away: in the background (and start the next spare) when serving."""
        if self.keep_spare and not self._closed:
            self._background.submit(self._quietly, self._discard, box)
            self.prepare_soon()
        else:
            self._discard(box)

    def close(self) -> None:
        """Finish background work and remove the spare box (blocking)."""
        self._closed = True
        self._background.shutdown(wait=True)
        with self._lock:
            box, self._spare = self._spare, None
        if box is not None:
            self._quietly(self._discard, box)

    @staticmethod
    def _quietly(fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - background housekeeping: the sweep catches leftovers
            log.warning("build box housekeeping failed", exc_info=True)

    def _open_box(self, client: docker.DockerClient) -> BuildBox:
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
            box = BuildBox(str(created["Id"]), build)
        except BaseException:
            shutil.rmtree(build, ignore_errors=True)
            raise
        try:
            api.start(box.container_id)
        except BaseException:
            self._discard(box)
            raise
        return box

    def _discard(self, box: BuildBox) -> None:
        try:
            self.engine.run_sync(lambda client: client.api.remove_container(box.container_id, force=True))
        except NotFound:
            pass
        finally:
            shutil.rmtree(box.directory, ignore_errors=True)

    # -- the install ----------------------------------------------------------------------
    def _install_script(self, box: BuildBox, language: str, pins: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """Write the install for ``pins`` into the box's /build; return its command and environment.

        Both print the lock after ``LOCK_MARK``: ``name==version`` lines (pip) or the
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
                f"print('{LOCK_MARK}')\n"
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
                f"echo {LOCK_MARK}\ncat package-lock.json\n",
            }
            command = ["sh", "/build/build.sh"]
            environment = {"HOME": "/tmp", "NODE_OPTIONS": "", "npm_config_update_notifier": "false"}
        for name, text in files.items():
            (box.directory / name).write_text(text)
            (box.directory / name).chmod(0o644)
        return command, environment

    def install(self, box: BuildBox, family: str, pins: dict[str, str]) -> tuple[str, int]:
        """Install ``pins`` in ``box``; its output (the lock after :data:`LOCK_MARK`) and exit code."""
        command, environment = self._install_script(box, family, pins)
        return self.engine.run_sync(self._exec, box, command, environment)

    def _exec(
        self, client: docker.DockerClient, box: BuildBox, command: list[str], environment: dict[str, str]
    ) -> tuple[str, int]:
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
        code = api.exec_inspect(exec_id).get("ExitCode")
        code = 1 if code is None else int(code)
        if code == 128 + 9 and time.monotonic() - started >= limit:  # `timeout -s KILL` fired
            output += f"\nthe install took longer than {limit:.0f} s"
        return output, code
