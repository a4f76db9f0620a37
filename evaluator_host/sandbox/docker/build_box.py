"""Build boxes: the containers runtime installs run in (docker backend).

A build box is a container FROM the base image, started idle (``sleep infinity``, all
capabilities dropped, no-new-privileges, a pids limit) with **no network** (``network_mode=none``):
its one way out is the build relay (:mod:`evaluator_host.builds.build_sandbox`), a unix socket
bound in at ``/sandbox/relay.sock``, which reaches the configured package indexes and nothing else.
An install is one ``exec`` in it, **as the unprivileged build uid** (never root: an sdist's build
runs the package's own code); the box is then committed by the image builder and thrown away, so
every runtime image starts from a clean base. A serving builder (``keep_spare``) keeps one
box started ahead of time and removes used ones in the background, so a build costs the
install and the commit, not a container start (~0.17 s here, mostly network set-up). Its first
spare box starts ``spare_build_box_after_s`` (10 s) into its life or after its first build, whichever
is first: a start-up's machine is for what requests wait for (a service that never builds, as most of
a test suite's, starts no box and never reads the host's pip and npm settings).

What a build needs of the host reaches it through a read-only bind mount at ``/build``
(never the image's environment, command or layers):

* the host's pip index settings (index, extra indexes, find-links, trusted hosts, timeouts) as a
  ``pip.conf`` **without credentials** (userinfo in URLs is dropped); local indexes and wheel
  folders it names are mounted read-only at the same paths; the operator's constraints file;
* the host's npm registry settings (no tokens, no proxies) as an ``npmrc``;
* the CA bundle setting (default: the host's system bundle) as pip's ``cert`` and npm's
  ``cafile``, so installs work behind a TLS-intercepting proxy.

The install itself is the family's installer script (:mod:`evaluator_host.builds.installers`),
the same one the process backend runs in its build sandbox: pip into ``/opt/evaluator/site``, npm
(``--ignore-scripts``) into ``/opt/evaluator/node/node_modules``; it prints the lock.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
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

from evaluator_host.builds import build_relay, build_sandbox, installers, uv
from evaluator_host.builds.build_relay import BuildRelay
from evaluator_host.builds.build_sandbox import host_pip_config, local_index_paths
from evaluator_host.builds.npm import host_npm_config
from evaluator_host.definitions.languages import Family
from evaluator_host.sandbox.docker import box_disk
from evaluator_host.sandbox.docker.engine import Engine, container_running, exec_exit_code, remove_container
from evaluator_host.settings import Settings

__all__ = ["BuildBox", "BuildBoxes", "host_pip_config", "local_index_paths"]

log = logging.getLogger(__name__)

_BUILD_PIDS = 1024  # a build may run compilers; still no fork bomb on the host
_PACKAGES_ROOT = "/opt/evaluator"  # where the families' image_packages_dir live (the build uid's)


@dataclass(frozen=True)
class BuildBox:
    """A started build container and the host folder mounted read-only at ``/build`` in it."""

    container_id: str
    directory: Path
    relay: BuildRelay | None = None  # the box's way to the package indexes (closed with the box)
    store: bool = False  # the shared uv cache is bound at /uv-cache (wheels-only installs only)


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
        build_relay.sweep_stale()  # (what services killed on this machine left of their relays)

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
            if self.engine.run_sync(lambda client: container_running(client.api, box.container_id)):
                return box
            log.warning("the spare build box %s is gone: starting another", box.container_id[:12])
            self._quietly(self._discard, box)
        return self.engine.run_sync(self._open_box)

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

    @property
    def store(self) -> Path:
        """The uv cache the boxes share (bound at ``/uv-cache``, never committed: a bind mount)."""
        return self.settings.resolved_cache_dir / "images" / "package-store"

    def open_without_store(self) -> BuildBox:
        """A new box without the shared cache (an install that builds an sdist runs package code)."""
        return self.engine.run_sync(self._open_box, False)

    def _open_box(self, client: docker.DockerClient, store: bool = False) -> BuildBox:
        """Start a build container FROM the base (no network but the relay), idle until a build runs
        in it; its packages folders belong to the build uid; the service's uv read-only at
        ``/build-tools/uv``. Every bind mount is read-only: by default a box's uv cache is its own (in its
        /tmp, removed before the commit). ``store`` (not used by default) would bind the shared uv cache
        writable at ``/uv-cache`` — a host folder one build could write and a later build read, which the
        docker backend does not take while it gains no shared bytes from it (one image per set)."""
        build = Path(tempfile.mkdtemp(prefix="evaluator-host-build-"))
        relay: BuildRelay | None = None
        try:
            config = self.pip_config()
            cert = None
            if self.settings.ca_bundle is not None:
                shutil.copyfile(self.settings.ca_bundle, build / "ca.pem")
                cert = "/build/ca.pem"
            if config.get("constraint") and os.path.isfile(config["constraint"]):
                shutil.copyfile(config["constraint"], build / "constraints.txt")
            # an index with credentials: named plainly in the box, reached with them through the relay
            in_box, upstreams = build_relay.relay_credentials(config)
            (build / "pip.conf").write_text(build_sandbox.pip_conf(in_box, cert=cert, constraint=None))
            (build / "npmrc").write_text(build_sandbox.npmrc(self.npm_config(), cafile=cert))
            (build / "forward.py").write_text(build_sandbox.FORWARDER)
            for path in build.iterdir():
                path.chmod(0o644)
            build.chmod(0o755)
            relay = BuildRelay(
                build_sandbox.allowed_hosts(in_box, self.npm_config(), self.settings.build_allow_hosts),
                upstreams,
                str(self.settings.ca_bundle) if self.settings.ca_bundle else None,
            )
            # bind mounts (not volumes): nothing of them is recorded in the committed image
            binds = {
                str(build): {"bind": "/build", "mode": "ro"},
                str(relay.path): {"bind": "/sandbox/relay.sock", "mode": "ro"},
            }
            binds.update({path: {"bind": path, "mode": "ro"} for path in local_index_paths(config)})
            uv_bin = uv.uv_binary()
            if uv_bin is not None:
                binds[uv_bin] = {"bind": installers.UV_IN_BOX, "mode": "ro"}
                if store:
                    self.store.mkdir(parents=True, exist_ok=True)
                    os.chown(self.store, self.build_uid(), self.build_uid())
                    binds[str(self.store)] = {"bind": installers.UV_CACHE_IN_BOX, "mode": "rw"}
            (build / "uv.env").write_text(json.dumps(uv.uv_environment(in_box, cert)))
            (build / "uv.env").chmod(0o644)
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
                    network_mode="none",
                    cap_drop=["ALL"],
                    # root's execs only: the set-up before any package code, the hand-over after it
                    # (a folder the build made unreadable to others then fails the build, not the walk)
                    cap_add=["CHOWN"],
                    security_opt=["no-new-privileges:true"],
                    pids_limit=_BUILD_PIDS,
                    ulimits=[box_disk.fsize_ulimit(self.settings.build_max_disk_mb)],  # no file past the bound
                    log_config=LogConfig(type=LogConfig.types.NONE),
                ),
            )
            box = BuildBox(str(created["Id"]), build, relay, store and uv_bin is not None)
        except BaseException:
            shutil.rmtree(build, ignore_errors=True)
            if relay is not None:
                relay.close()
            raise
        try:
            api.start(box.container_id)
            uid = self.build_uid()
            setup = api.exec_create(
                box.container_id,
                [
                    "sh",
                    "-c",
                    f"mkdir -p {_PACKAGES_ROOT}/site {_PACKAGES_ROOT}/node && chown -R {uid}:{uid} {_PACKAGES_ROOT}",
                ],
                user="0:0",
            )["Id"]
            api.exec_start(setup)
            if exec_exit_code(api, setup, box.container_id) != 0:
                raise RuntimeError(f"could not prepare {_PACKAGES_ROOT} in the build box")
        except BaseException:
            self._discard(box)
            raise
        return box

    def build_uid(self) -> int:
        """The unprivileged uid installs run as in a box."""
        return build_sandbox.build_uid(self.settings.sandbox_uid_base)

    def _discard(self, box: BuildBox) -> None:
        try:
            self.engine.run_sync(lambda client: remove_container(client.api, box.container_id))
        finally:
            shutil.rmtree(box.directory, ignore_errors=True)
            if box.relay is not None:
                box.relay.close()

    # -- the install ----------------------------------------------------------------------
    def install(
        self, box: BuildBox, family: Family, pins: dict[str, str], live_log: Path | None = None
    ) -> tuple[str, int]:
        """Run the family's install script for ``pins`` in ``box``: its output (the lock after
        :data:`~evaluator_host.builds.installers.LOCK_MARK`) and exit code; the output is also
        written to ``live_log`` as it comes (what ``GET /v1/runtimes/{id}`` shows of a build).
        :class:`~evaluator_host.sandbox.docker.box_disk.Exceeded` when what the box wrote and the output
        passed ``build_max_disk_mb`` (the install is killed as soon as it is seen)."""
        installer = installers.for_family(family)
        context = installer.in_box()
        share = box.store and family.installer == "pip"
        if family.installer == "pip":
            uv_env = json.loads((box.directory / "uv.env").read_text())
            context = dataclasses.replace(
                context,
                environment={**context.environment, **uv_env},
                uv=context.uv if uv.uv_binary() is not None else None,
                # without the store: a private cache in the box's /tmp, removed before the commit
                cache=context.cache if share else None,
            )
        context = dataclasses.replace(
            context,
            environment={**context.environment, **build_sandbox.proxy_environment()},
            relay="/sandbox/relay.sock",
            allow_direct=build_sandbox.direct_hosts(self.settings.build_allow_hosts),
            constraint="/build/constraints.txt" if (box.directory / "constraints.txt").exists() else None,
        )
        install = installer.prepare(
            pins,
            build_dir="/build",
            packages_dir=family.image_packages_dir,
            context=context,
            sources=self.settings.allow_sdist_builds and not share,  # the store: wheels only, no package code
        )
        for name, text in install.files.items():
            (box.directory / name).write_text(text)
            (box.directory / name).chmod(0o644)
        output, code, used = self.engine.run_sync(self._exec, box, install.command, install.environment, live_log)
        if used is not None:
            raise box_disk.Exceeded(used)
        return output, code

    def hand_over(self, box: BuildBox) -> None:
        """Make ``box``'s installed packages root's before it is committed (blocking): every process of
        the build uid is killed (the forwarder, anything the install left running), then, as root,
        ``/opt/evaluator`` is chowned to ``0:0`` (links themselves) and loses write bits for group and
        others and setuid/setgid bits. The runtime image then holds nothing the build uid owns or can
        write, whatever uid its workers run as. Raises ``RuntimeError`` when it cannot be done."""
        uid = self.build_uid()

        def run(client: docker.DockerClient) -> None:
            api = client.api
            stop = api.exec_create(box.container_id, ["sh", "-c", "kill -9 -1"], user=f"{uid}:{uid}")["Id"]
            api.exec_start(stop)  # (kills itself too: its exit code says nothing; the check below does)
            script = (  # (killed processes may linger a moment until the box's init reaps them)
                "n=0; while :; do left=; for p in /proc/[0-9]*; do "
                f'[ "$(stat -c %u "$p" 2>/dev/null)" = {uid} ] && left=1; done; [ -z "$left" ] && break; '
                "n=$((n+1)); [ $n -ge 50 ] && { echo 'a process of the build uid outlived the install' >&2; exit 9; }; "
                "sleep 0.1; done; "
                f"chown -R -P 0:0 {_PACKAGES_ROOT} && chmod -R go-w,ug-s {_PACKAGES_ROOT}"
            )
            root = api.exec_create(box.container_id, ["sh", "-c", script], user="0:0")["Id"]
            output = api.exec_start(root)
            if exec_exit_code(api, root, box.container_id) != 0:
                shown = output.decode("utf-8", "replace")[-500:] if isinstance(output, bytes) else ""
                raise RuntimeError(f"could not hand {_PACKAGES_ROOT} over to root in the build box: {shown}")

        self.engine.run_sync(run)

    def _exec(
        self,
        client: docker.DockerClient,
        box: BuildBox,
        command: list[str],
        environment: dict[str, str],
        live_log: Path | None = None,
    ) -> tuple[str, int, int | None]:
        api = client.api
        limit = self.settings.build_timeout_s
        command = ["timeout", "-s", "KILL", f"{limit:.0f}", *command]
        uid = self.build_uid()
        exec_id = api.exec_create(box.container_id, command, user=f"{uid}:{uid}", environment=environment)["Id"]
        started = time.monotonic()
        sock = api.exec_start(exec_id, socket=True)
        watch = box_disk.BoxWatch(client, box.container_id, uid, self.settings.build_max_disk_mb)
        try:
            raw = getattr(sock, "_sock", sock)
            raw.settimeout(limit + 60)
            chunks = []
            with open(live_log or os.devnull, "wb") as live:
                for _, data in frames_iter(sock, tty=False):
                    chunks.append(data)
                    live.write(data)
                    live.flush()
                    watch.output(len(data))
            output = b"".join(chunks).decode("utf-8", "replace")
        finally:
            sock.close()
            watch.stop()
        ended = time.monotonic()  # (before the exit is read: a failed command's read takes up to a second more)
        used = watch.over()  # (past the bound: the box is never committed)
        code = exec_exit_code(api, exec_id, box.container_id)  # (the box gone under the install: SandboxError)
        if code == 128 + 9 and ended - started >= limit:  # `timeout -s KILL` fired
            output += f"\nthe install took longer than {limit:.0f} s"
        return output, code, used
