"""One install on the process backend: in the build sandbox, or (the rlimits mode) on the host.

A Python install can run package code (resolving or building an sdist), so it runs in a **build
sandbox** (:meth:`InstallSite.sandbox_config`) whenever the machine has namespaces: the worker
bootstrap (``runtimes/sandbox_init.py``) with a private read-only root (the interpreter, the build
folder at ``/build``, the local indexes), only the partial runtime's ``site/`` and a scratch folder
writable, an unprivileged build uid (as root), seccomp, and a network namespace whose one way out is
the build relay to the configured indexes (:mod:`evaluator_host.builds.build_relay`). npm installs
(``--ignore-scripts``) run in the same sandbox with the pinned Node wheel bound read-only at
``/sandbox/node-home`` and a generated npmrc (the host's registries, no tokens).

:meth:`InstallSite.run` runs it in a session of its own (on a timeout the whole process group goes,
the build sandbox's init with it), its output in the runtime's live logs; a failure is a
``BuildError`` (``StorageFull`` when the disk is full). :func:`hand_over` makes a finished runtime
root's before it is renamed into place.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from evaluator_host.builds import build_relay, build_sandbox, disk_bound, installers, suggest, uv
from evaluator_host.definitions import languages
from evaluator_host.definitions.languages import RUNTIMES_DIR
from evaluator_host.errors import BuildError
from evaluator_host.sandbox.process.isolation import AFTER_MAPS, Isolation, wait_for_userns, write_id_maps
from evaluator_host.sandbox.protocol import encode_frame
from evaluator_host.settings import Settings
from evaluator_host.storage import INSTALLER_MARKS, storage_full

__all__ = ["LINKS_IN_SANDBOX", "MANIFEST_IN_SANDBOX", "STORE_IN_SANDBOX", "InstallSite", "hand_over"]

_BOOTSTRAP = RUNTIMES_DIR / "sandbox_init.py"
_BUILD_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
_NODE_HOME = "/sandbox/node-home"  # the pinned Node wheel's folder, in the build sandbox (npm)
_BUILD_TMPFS_MB = 256  # a build's /tmp: uv's tree of links for a large set (only what is used is memory)
_UV = "/sandbox/tools/uv"  # the service's uv, read-only in the build sandbox
STORE_IN_SANDBOX = "/sandbox/uv-cache"  # the shared package store, in the build sandbox
LINKS_IN_SANDBOX = "/tmp/links"  # the tree of links into the store uv installs (the sandbox's tmpfs: fast)
MANIFEST_IN_SANDBOX = "/sandbox/scratch/links.json"  # that tree, described for the host


@dataclass(frozen=True)
class InstallSite:
    """What one build's install runs with: the settings, the machine's isolation, the build uid (None:
    no uid change), the host's pip and npm settings, whether sdists may be built, the hosts a
    direct-URL requirement may name, and the runtimes folder (its disk)."""

    settings: Settings
    isolation: Isolation
    uid: int | None
    pip_config: dict[str, str]
    npm_config: dict[str, str]
    sources: bool
    allow_direct: tuple[str, ...]
    root: Path

    @property
    def store(self) -> Path:
        """The shared package store (uv's cache, :mod:`evaluator_host.builds.store`) of these runtimes."""
        return self.root.parent / "package-store"  # (beside the runtimes folder: the same file system)

    @property
    def can_share(self) -> bool:
        """Whether Python installs may use the shared store (uv is there). Only an install that runs no
        package code does (``share``: uv's ``--no-build``, wheels only); one that must build an sdist
        runs again with a cache of its own, never seeing the store, and its runtime is copied."""
        return uv.uv_binary() is not None

    def sandbox_config(
        self,
        build: Path,
        partial: Path,
        family: languages.Family,
        pins: dict[str, str],
        relay: build_relay.BuildRelay,
        share: bool = False,
    ) -> tuple[installers.Install, dict[str, object]]:
        """The install of ``pins`` in the build sandbox, and the bootstrap's config for it.

        In the sandbox: ``/build`` (read-only: the pins, the script, a ``pip.conf`` or ``npmrc``
        without credentials, the CA bundle, the constraints), the partial runtime at ``/sandbox/runtime``
        (pip: only its ``site/``; npm: the whole of it, where ``package.json`` and ``node_modules`` go)
        and ``/sandbox/scratch`` (writable, the build uid's), the interpreter, the pinned Node wheel at
        ``/sandbox/node-home`` (npm) and the local index folders (read-only), ``/sandbox/relay.sock``;
        pip families: the service's uv at ``/sandbox/tools/uv`` (read-only) and, for wheels-only builds,
        the shared package store at ``/sandbox/uv-cache`` (writable: uv adds what is missing; the entries
        runtimes use are root's, :mod:`evaluator_host.builds.store`), uv installing a tree of links into
        it in its private ``/tmp`` (a tmpfs) described in ``/sandbox/scratch/links.json`` for the host, which
        makes the runtime of it; nothing else of the host."""
        files, scratch, mount = build / "files", build / "scratch", build / "root"
        for folder in (files, scratch, mount):
            folder.mkdir()
        npm = family.installer == "npm"
        writable_store: list[list[str]] = []
        top = family.packages_dir.split("/", 1)[0]
        writable_runtime = partial if npm else partial / top
        writable_runtime.mkdir(parents=True, exist_ok=True)
        uid = self.uid
        if uid is not None:
            for folder in (scratch, writable_runtime):
                os.chown(folder, uid, uid)
        cert = None
        if self.settings.ca_bundle is not None:
            shutil.copyfile(self.settings.ca_bundle, files / "ca.pem")
            cert = "/build/ca.pem"
        environment = {
            **_BUILD_ENV,
            **build_sandbox.proxy_environment(),
            "HOME": "/sandbox/scratch",
            "TMPDIR": "/sandbox/scratch",
        }
        interpreters = {Path(sys.executable).resolve().parents[1], Path(sys.prefix), Path(sys.base_prefix)}
        interpreters.add(Path(self.settings.python_executable).resolve().parents[1])
        binds = [[str(path)] * 2 for path in sorted(interpreters)]
        context: installers.Context
        if npm:
            # the pinned Node wheel, read-only where workers see it too; npm reads only the generated
            # settings (user and global npmrc: the host's registries, no tokens, no proxies)
            home = Path(languages.node_executable()).resolve().parents[1]
            binds.append([str(home), _NODE_HOME])
            (files / "npmrc").write_text(build_sandbox.npmrc(self.npm_config, cafile=cert))
            (files / "npmrc-global").write_text("")
            (files / "forward.py").write_text(build_sandbox.FORWARDER)
            context = installers.Context(
                [f"{_NODE_HOME}/bin/node", f"{_NODE_HOME}/lib/node_modules/npm/bin/npm-cli.js"],
                ["--userconfig", "/build/npmrc", "--globalconfig", "/build/npmrc-global"],
                environment,
                "/sandbox/scratch",
                ("/sandbox/scratch/node-compile-cache",),
                relay="/sandbox/relay.sock",
                python=sys.executable,
            )
            packages_dir = f"/sandbox/runtime/{family.packages_dir}"
        else:
            constraint = None
            if self.pip_config.get("constraint") and os.path.isfile(self.pip_config["constraint"]):
                shutil.copyfile(self.pip_config["constraint"], files / "constraints.txt")
                constraint = "/build/constraints.txt"
            in_sandbox, _ = build_relay.relay_credentials(self.pip_config)
            (files / "pip.conf").write_text(build_sandbox.pip_conf(in_sandbox, cert=cert, constraint=None))
            context = installers.Context(
                [sys.executable],
                [],
                {**environment, "PIP_CONFIG_FILE": "/build/pip.conf", **uv.uv_environment(in_sandbox, cert)},
                "/sandbox/scratch",
                relay="/sandbox/relay.sock",
                allow_direct=self.allow_direct,
                constraint=constraint,
                target_python=self.settings.python_executable,
            )
            packages_dir = f"/sandbox/runtime/{family.packages_dir}"
            uv_bin = uv.uv_binary()
            if uv_bin is not None:
                binds.append([uv_bin, _UV])
                context = dataclasses.replace(context, uv=_UV)
                if share:  # the store, writable: uv links a tree into it (then the host links)
                    self.store.mkdir(exist_ok=True)
                    if uid is not None:
                        os.chown(self.store, uid, uid)
                    writable_store = [[str(self.store), STORE_IN_SANDBOX]]
                    context = dataclasses.replace(
                        context, cache=STORE_IN_SANDBOX, link="symlink", manifest=MANIFEST_IN_SANDBOX
                    )
                    packages_dir = LINKS_IN_SANDBOX
            binds += [[path, path] for path in build_sandbox.local_index_paths(self.pip_config)]
        install = installers.for_family(family).prepare(
            pins, build_dir="/build", packages_dir=packages_dir, context=context, sources=self.sources and not share
        )
        for name, text in install.files.items():
            (files / name).write_text(text)
        for path in files.iterdir():
            path.chmod(0o644)
        files.chmod(0o755)
        binds += [[str(files), "/build"], [str(relay.path), "/sandbox/relay.sock"]]
        # no file of the build larger than its disk bound (the whole of what it writes: InstallSite.run)
        rlimits = {"NOFILE": 4096, "CORE": 0, "FSIZE": self.settings.build_max_disk_mb << 20}
        if uid is not None:
            rlimits["NPROC"] = 1024
        target = "/sandbox/runtime" if npm else f"/sandbox/runtime/{top}"
        config: dict[str, object] = {
            "root": str(mount),
            "init": True,
            "seccomp": True,
            "loopback": True,
            "binds": binds,
            "writable": [[str(writable_runtime), target], [str(scratch), "/sandbox/scratch"], *writable_store],
            "tmpfs_mb": max(self.settings.tmpfs_mb, _BUILD_TMPFS_MB),
            "uid": uid,
            "rlimits": rlimits,
            "workdir": "/sandbox/scratch",
            # (the bootstrap execs a path: npm's script is `sh build.sh …`)
            "exec": ["/bin/sh", *install.command[1:]] if install.command[0] == "sh" else install.command,
        }
        return install, config

    def run(
        self,
        install: installers.Install,
        rid: str,
        family: languages.Family,
        pins: dict[str, str],
        logs: list[Path],
        sandbox: dict[str, object] | None = None,
        watched: tuple[Path, ...] = (),
    ) -> tuple[str, str]:
        """Run an install (with ``sandbox``: in the build sandbox that config describes): its standard
        output and its whole log; ``BuildError`` when it fails or outlives ``build_timeout_s``, or when
        ``watched`` (the build's folders) and its logs pass ``build_max_disk_mb`` while it runs or once it
        ended (:mod:`~evaluator_host.builds.disk_bound`: then it is killed at once)."""
        limit, bound_mb = self.settings.build_timeout_s, self.settings.build_max_disk_mb
        out_path, err_path = logs  # read by GET /v1/runtimes/{id} while it runs
        host_maps = sandbox is not None and self.isolation.host_maps
        if sandbox is not None:
            python = self.settings.python_executable
            command = [*self.isolation.unshare_argv, python, "-I", "-S", str(_BOOTSTRAP)]
            environment, stdin = install.environment, encode_frame(sandbox)
            if host_maps:  # userns as root: run the bootstrap once its id maps are written from here
                command = [*self.isolation.unshare_argv, python, "-I", "-S", "-c", AFTER_MAPS, *command[-3:]]
                stdin = b"." + stdin
        else:
            command, stdin = install.command, b""
            environment = {**installers.installer_environment(dict(os.environ)), **install.environment}
        with open(out_path, "w+b") as out, open(err_path, "w+b") as err:
            # a session of its own: on timeout the whole process group goes (the build sandbox's init
            # with it, and so its pid namespace: the uid change cleared unshare's kill-child signal)
            proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                env=environment,
                start_new_session=True,
            )
            try:
                if host_maps:
                    uid = self.uid
                    if uid is None or not wait_for_userns(proc.pid):
                        raise BuildError(
                            "the build sandbox did not start (no user namespace)", runtime_id=rid, output=""
                        )
                    write_id_maps(proc.pid, uid)
                _send(proc, stdin)
                used = self._watch(proc, limit, (*watched, *logs))
                if used is not None:  # (killed by the handler below, as on any failure)
                    raise disk_bound.exceeded(installers.shown(family, pins), rid, bound_mb, used)
            except subprocess.TimeoutExpired as exc:
                _kill_group(proc)
                message = f"installing {installers.shown(family, pins)} took longer than {limit:.0f} s"
                raise BuildError(message, runtime_id=rid, output="") from exc
            except BaseException:
                _kill_group(proc)
                raise
            returncode = proc.returncode
            used = disk_bound.tree_usage((*watched, *logs))  # (what it wrote since the last look counts too)
            if used >= bound_mb << 20:
                raise disk_bound.exceeded(installers.shown(family, pins), rid, bound_mb, used)
            stdout, stderr = (_read(handle) for handle in (out, err))
        if returncode != 0 or installers.LOCK_MARK not in stdout:
            if any(mark in stderr + stdout for mark in INSTALLER_MARKS) or _disk_full(self.root):
                raise storage_full(f"building runtime {rid}")  # (a full disk may also have eaten the output)
            raise installers.build_failed(
                family,
                pins,
                rid,
                f"{stdout}\n{stderr}" if installers.REFUSED_MARK in stdout else stderr or stdout,
                self.sources,
                versions_of=lambda name: suggest.pip_versions(sys.executable, name),
            )
        return stdout, stdout + stderr

    def _watch(self, proc: subprocess.Popen[bytes], limit: float, paths: tuple[Path, ...]) -> int | None:
        """Wait (at most ``limit``: then ``TimeoutExpired``) until ``proc`` exits, measuring ``paths`` as
        it runs: the bytes they hold once they pass ``build_max_disk_mb`` (the build still runs), else None."""
        bound, pacer = self.settings.build_max_disk_mb << 20, disk_bound.Pacer()
        deadline = time.monotonic() + limit
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(proc.args, limit)
            try:
                _wait_exit(proc, pacer.wait_s(left))
                return None
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    raise
            if pacer.due():
                started = time.monotonic()
                used = disk_bound.tree_usage(paths)
                pacer.measured(time.monotonic() - started)
                if used >= bound:
                    return used


def _send(proc: subprocess.Popen[bytes], data: bytes) -> None:
    """Write ``data`` to ``proc``'s standard input and close it (a sandbox that died at once takes none:
    its log says why)."""
    if proc.stdin is None:
        return
    try:
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(data)
    finally:
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()


def _wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """``proc.wait(timeout)`` woken by the exit itself (a pidfd), not by ``Popen.wait``'s polling, whose
    sleeps grow to 50 ms: ~25 ms more on every build's critical path. ``TimeoutExpired`` past ``timeout``."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except OSError:  # (a kernel without pidfds)
        proc.wait(timeout)
        return
    try:
        exits = select.poll()  # (not select.select: a busy service's descriptors pass FD_SETSIZE)
        exits.register(pidfd, select.POLLIN)
        if not exits.poll(max(0, int(timeout * 1000))):
            raise subprocess.TimeoutExpired(proc.args, timeout)
    finally:
        os.close(pidfd)
    proc.wait()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill an install's process group and wait (bounded) until none of it is left."""
    for _ in range(100):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            break
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(0.05)
    proc.wait()


def hand_over(runtime: Path) -> None:
    """Make a finished runtime the service's before it is renamed into place: as root, every entry
    (links themselves, never what they point to) is chowned to ``0:0``; write bits for group and
    others and setuid/setgid bits are dropped. The build uid — every later build's — then owns
    nothing of it and can write none of it. Run once nothing of the build runs any more (the build
    sandbox's pid namespace ended with it), so nothing can add an entry behind the walk."""
    as_root = os.geteuid() == 0
    for parent, dirs, names in os.walk(runtime, onerror=_raise):
        for name in [*dirs, *names, *([""] if parent == str(runtime) else [])]:
            path = os.path.join(parent, name) if name else parent
            info = os.lstat(path)
            if as_root and (info.st_uid or info.st_gid):
                os.lchown(path, 0, 0)
            if not stat.S_ISLNK(info.st_mode):
                mode = stat.S_IMODE(os.lstat(path).st_mode)
                if mode & _NOT_KEPT:
                    os.chmod(path, mode & ~_NOT_KEPT)


_NOT_KEPT = stat.S_IWGRP | stat.S_IWOTH | stat.S_ISUID | stat.S_ISGID


def _raise(error: OSError) -> None:
    raise error  # a folder the walk cannot read must not stay the build uid's unnoticed


def _read(handle: BinaryIO) -> str:
    handle.seek(0)
    return handle.read().decode("utf-8", "replace")


def _disk_full(path: Path) -> bool:
    """Whether the disk of ``path`` has less than 1 MiB free (a failed install's output, written to the
    same disk, may then be empty: the installer's own words about it are lost)."""
    try:
        return shutil.disk_usage(path).free < 1 << 20
    except OSError:
        return False
