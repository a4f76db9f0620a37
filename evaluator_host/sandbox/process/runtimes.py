"""Runtimes: one per (language, base interpreter, exact pins), built once and shared.

On the process backend a Python runtime is a directory ``runtimes/<id>/`` holding
``site/`` (``pip install --target``, with the host's pip index settings) and ``manifest.json``
with the pins and the full resolved lock. The worker adds ``site/`` to an interpreter started
with ``-I -S``, so only the pinned packages (and the standard library) are importable.

A Python install can run package code (resolving or building an sdist), so it runs in a **build
sandbox** (:meth:`RuntimeBuilder._sandbox`) whenever the machine has namespaces: the worker
bootstrap (``runtimes/sandbox_init.py``) with a private read-only root (the interpreter, the build
folder at ``/build``, the local indexes), only the partial runtime's ``site/`` and a scratch folder
writable, an unprivileged build uid (as root), seccomp, and a network namespace whose one way out is
the build relay to the configured indexes (:mod:`evaluator_host.builds.build_sandbox`). Without
namespaces (the rlimits mode) there is no build sandbox: wheels only, whatever
``allow_sdist_builds`` says, and direct-URL requirements are refused before any of their code runs.

npm installs (``--ignore-scripts``: no package code) run in the same build sandbox, because npm
itself fetches what a package.json names (a git or tarball URL on any host) and reads npmrc files:
there the pinned Node wheel is bound read-only at ``/sandbox/node-home``, npm reads only a generated
npmrc (the host's registries, no tokens), writes the whole partial runtime (``package.json``,
``node_modules``), and reaches npm's registries only. In the rlimits mode npm runs on the host.

Before it is renamed into place a finished runtime is handed to root (:func:`hand_over`): the build
uid, every later build's, owns none of it and can write none of it.

Found or built through :class:`~evaluator_host.builds.build_once.BuildOnce`.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import glob
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import BinaryIO

from evaluator_host.builds import build_sandbox, installers, suggest
from evaluator_host.builds.build_once import BuildOnce, host_npm_config, runtime_id
from evaluator_host.definitions import languages
from evaluator_host.definitions.languages import RUNTIMES_DIR
from evaluator_host.errors import BuildError
from evaluator_host.sandbox.base import Runtime
from evaluator_host.sandbox.inventory import RuntimeInfo
from evaluator_host.sandbox.process.isolation import AFTER_MAPS, Isolation, probe, wait_for_userns, write_id_maps
from evaluator_host.sandbox.protocol import encode_frame
from evaluator_host.settings import Settings
from evaluator_host.storage import INSTALLER_MARKS, on_full_disk, storage_full

__all__ = ["RuntimeBuilder", "hand_over"]

_BOOTSTRAP = RUNTIMES_DIR / "sandbox_init.py"
_BUILD_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
_NODE_HOME = "/sandbox/node-home"  # the pinned Node wheel's folder, in the build sandbox (npm)


class RuntimeBuilder(BuildOnce):
    """Process-backend runtimes: ``site/`` directories under ``cache_dir/runtimes``."""

    def __init__(self, settings: Settings, isolation: Isolation | None = None) -> None:
        super().__init__(
            settings.resolved_cache_dir / "runtimes", settings.max_concurrent_builds, settings.max_builds_per_workspace
        )
        self.settings = settings
        self._isolation = isolation
        self.sweep_partials()

    @property
    def isolation(self) -> Isolation:
        """The machine's isolation (the backend's, else probed once)."""
        if self._isolation is None:
            self._isolation = probe(self.settings.process_isolation, self.settings.sandbox_uid_base)
        return self._isolation

    def use_isolation(self, isolation: Isolation) -> None:
        """Build in the sandbox ``isolation`` allows (the backend's probe)."""
        self._isolation = isolation

    @functools.cached_property
    def pip_config(self) -> dict[str, str]:
        """The host's pip index settings builds get (read once)."""
        return build_sandbox.host_pip_config()

    @property
    def sandboxed(self) -> bool:
        """Whether Python installs run in the build sandbox (needs namespaces)."""
        return self.isolation.mode != "rlimits"

    @property
    def sources(self) -> bool:
        """Whether sdists may be built: the setting, and only in the build sandbox."""
        return self.settings.allow_sdist_builds and self.sandboxed

    def sweep_partials(self) -> int:
        """Remove what builds and prunes that died with their process (a killed service) left: partial
        and half-removed directories.

        The cache may be shared by several processes, so a partial is removed only when no one holds
        its runtime's build lock (a live build holds it until its rename). Returns how many went.
        """
        removed = 0
        for leftover in [*self.root.glob(".*.partial-*"), *self.root.glob(".*.removed-*")]:
            marker = ".partial-" if ".partial-" in leftover.name else ".removed-"
            rid = leftover.name[1:].rsplit(marker, 1)[0]
            with open(self.root / f"{rid}.lock", "a") as lock_file:
                try:
                    fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # being built right now
                shutil.rmtree(leftover, ignore_errors=True)
                removed += 1
        return removed

    @functools.cache  # noqa: B019 - one builder per service, a handful of languages
    def base_identity(self, language: str) -> str:
        """What the runtime hash covers besides the pins: the family's interpreter binary (path,
        size and mtime, so an upgraded interpreter in place gets new runtimes)."""
        executable = languages.get(language).family.host_executable(self.settings.python_executable)
        info = os.stat(executable)
        return f"{executable}|{info.st_size}|{int(info.st_mtime)}"

    def runtime_for(self, language: str, pins: dict[str, str]) -> str:
        """The runtime id of ``pins`` for ``language`` (no build)."""
        return runtime_id(language, self.base_identity(language), pins)

    def bare_location(self) -> str | None:
        """No packages: the interpreter's standard library only."""
        return None

    def live_logs(self, rid: str) -> list[Path]:
        """The install's standard output, then its standard error, while it runs."""
        return [self.root / f".{rid}.building.log", self.root / f".{rid}.building.err"]

    def present(self, runtime: Runtime) -> bool:
        """Whether the runtime's directory is still there (a prune may have removed it)."""
        return runtime.location is None or os.path.isdir(runtime.location)

    def find(self, rid: str, language: str, pins: dict[str, str]) -> Runtime | None:
        """The runtime directory a finished build left (its manifest is written last)."""
        final = self.root / rid
        manifest = final / "manifest.json"
        if not manifest.exists():
            return None
        return Runtime(rid, language, pins, str(final), json.loads(manifest.read_text()).get("lock", []))

    def build(self, rid: str, language: str, pins: dict[str, str]) -> Runtime:
        """Run the family's install script into a partial directory, renamed into place when complete;
        a full disk is :class:`StorageFull`, with the partial directory removed like any failure."""
        partial = self.root / f".{rid}.partial-{uuid.uuid4().hex[:8]}"
        build = Path(tempfile.mkdtemp(prefix="evaluator-host-build-"))
        try:
            with on_full_disk(f"building runtime {rid}"):
                return self._build_into(partial, build, rid, language, pins)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
            shutil.rmtree(build, ignore_errors=True)

    def _build_into(self, partial: Path, build: Path, rid: str, language: str, pins: dict[str, str]) -> Runtime:
        started = time.monotonic()
        family = languages.get(language).family
        installer = installers.for_family(family)
        partial.mkdir(parents=True)
        ca_bundle = str(self.settings.ca_bundle) if self.settings.ca_bundle else None
        relay: build_sandbox.BuildRelay | None = None
        if self.sandboxed:
            if family.installer == "pip":
                # an index with credentials: named plainly in the sandbox, reached with them through the relay
                in_sandbox, upstreams = build_sandbox.relay_credentials(self.pip_config)
                allowed = build_sandbox.allowed_hosts(in_sandbox, {}, self.settings.build_allow_hosts)
            else:  # npm: its registries only (tokens are never passed on)
                upstreams, allowed = {}, build_sandbox.registry_hosts(self.npm_config, self.settings.build_allow_hosts)
            relay = build_sandbox.BuildRelay(allowed, upstreams, ca_bundle)
            install, config = self._sandbox(build, partial, family, pins, relay)
        else:
            context = installer.on_host(ca_bundle)
            if family.installer == "pip":
                context = installers.Context(
                    context.tool, context.options, context.environment, allow_direct=self._allow_direct()
                )
            install = installer.prepare(
                pins,
                build_dir=str(build),
                packages_dir=str(partial / family.packages_dir),
                context=context,
                sources=self.sources,
            )
            config = None
            for name, text in install.files.items():
                (build / name).write_text(text)
        try:
            output, log = self._run(install, rid, family, pins, config)
        except BuildError as failed:
            if relay is None or not relay.refused:
                raise
            # what the sandbox asked of a host that is not a configured index (an npm git or tarball
            # dependency, say): named, so the answer says why rather than only the installer's words
            refused = "; ".join(dict.fromkeys(relay.refused))
            reason = f"{failed.output}\nthe build relay refused: {refused}"
            raise BuildError(
                f"{failed}\nthe build relay refused: {refused}",
                runtime_id=rid,
                output=reason,
                suggestions=failed.suggestions,
            ) from failed
        finally:
            if relay is not None:
                relay.close()
        if family.installer == "npm":
            allowed = build_sandbox.allowed_hosts({}, self.npm_config, self.settings.build_allow_hosts)
            installers.check_npm_lock(family, pins, rid, output, allowed)
        lock = installer.lock(output.split(installers.LOCK_MARK, 1)[1])
        os.chmod(partial, 0o755)
        manifest = {
            "id": rid,
            "language": language,
            "packages": pins,
            "lock": lock,
            "base": self.base_identity(language),
            "build_seconds": round(time.monotonic() - started, 2),
            "created_at": time.time(),
        }
        (partial / "manifest.json").write_text(json.dumps(manifest, indent=2))
        (partial / "build.log").write_text(log)
        try:
            hand_over(partial)
        except OSError as exc:  # (as root, only a file system that refuses root fails here)
            reason = f"the finished runtime could not be handed over to the service: {exc}"
            message = f"installing {installers.shown(family, pins)} failed:\n{reason}"
            raise BuildError(message, runtime_id=rid, output=reason) from exc
        partial.rename(self.root / rid)
        return Runtime(rid, language, pins, str(self.root / rid), lock)

    @functools.cached_property
    def npm_config(self) -> dict[str, str]:
        """The host's npm registry settings (read once)."""
        return host_npm_config()

    def _allow_direct(self) -> tuple[str, ...]:
        """The hosts a direct-URL requirement may name (``build_allow_hosts`` without ports)."""
        return build_sandbox.direct_hosts(self.settings.build_allow_hosts)

    def build_uid(self) -> int | None:
        """The unprivileged uid installs run as (None: no uid change is possible here)."""
        return build_sandbox.build_uid(self.settings.sandbox_uid_base) if self.isolation.uid_drop else None

    def _sandbox(
        self,
        build: Path,
        partial: Path,
        family: languages.Family,
        pins: dict[str, str],
        relay: build_sandbox.BuildRelay,
    ) -> tuple[installers.Install, dict[str, object]]:
        """The install of ``pins`` in the build sandbox, and the bootstrap's config for it.

        In the sandbox: ``/build`` (read-only: the pins, the script, a ``pip.conf`` or ``npmrc``
        without credentials, the CA bundle, the constraints), the partial runtime at ``/sandbox/runtime``
        (pip: only its ``site/``; npm: the whole of it, where ``package.json`` and ``node_modules`` go)
        and ``/sandbox/scratch`` (writable, the build uid's), the interpreter, the pinned Node wheel at
        ``/sandbox/node-home`` (npm) and the local index folders (read-only), ``/sandbox/relay.sock``;
        nothing else of the host."""
        files, scratch, mount = build / "files", build / "scratch", build / "root"
        for folder in (files, scratch, mount):
            folder.mkdir()
        npm = family.installer == "npm"
        top = family.packages_dir.split("/", 1)[0]
        writable_runtime = partial if npm else partial / top
        writable_runtime.mkdir(parents=True, exist_ok=True)
        uid = self.build_uid()
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
            in_sandbox, _ = build_sandbox.relay_credentials(self.pip_config)
            (files / "pip.conf").write_text(build_sandbox.pip_conf(in_sandbox, cert=cert, constraint=None))
            context = installers.Context(
                [sys.executable],
                [],
                {**environment, "PIP_CONFIG_FILE": "/build/pip.conf"},
                "/sandbox/scratch",
                relay="/sandbox/relay.sock",
                allow_direct=self._allow_direct(),
                constraint=constraint,
            )
            packages_dir = f"/sandbox/runtime/{family.packages_dir}"
            binds += [[path, path] for path in build_sandbox.local_index_paths(self.pip_config)]
        install = installers.for_family(family).prepare(
            pins, build_dir="/build", packages_dir=packages_dir, context=context, sources=self.sources
        )
        for name, text in install.files.items():
            (files / name).write_text(text)
        for path in files.iterdir():
            path.chmod(0o644)
        files.chmod(0o755)
        binds += [[str(files), "/build"], [str(relay.path), "/sandbox/relay.sock"]]
        rlimits = {"NOFILE": 4096, "CORE": 0}
        if uid is not None:
            rlimits["NPROC"] = 1024
        target = "/sandbox/runtime" if npm else f"/sandbox/runtime/{top}"
        config: dict[str, object] = {
            "root": str(mount),
            "init": True,
            "seccomp": True,
            "loopback": True,
            "binds": binds,
            "writable": [[str(writable_runtime), target], [str(scratch), "/sandbox/scratch"]],
            "tmpfs_mb": self.settings.tmpfs_mb,
            "uid": uid,
            "rlimits": rlimits,
            "workdir": "/sandbox/scratch",
            # (the bootstrap execs a path: npm's script is `sh build.sh …`)
            "exec": ["/bin/sh", *install.command[1:]] if install.command[0] == "sh" else install.command,
        }
        return install, config

    # -- management (API, CLI) -----------------------------------------------------------
    def inventory(self, only: str | None = None) -> list[RuntimeInfo]:
        """Every runtime directory a finished build left (any base interpreter); ``only``: that id's."""
        found = []
        pattern = "*/manifest.json" if only is None else f"{glob.escape(only)}/manifest.json"
        for manifest in sorted(self.root.glob(pattern)):
            if manifest.parent.name.startswith("."):
                continue
            try:
                data = json.loads(manifest.read_text())
            except (OSError, ValueError):
                continue
            rid = manifest.parent.name
            found.append(
                RuntimeInfo(
                    id=rid,
                    language=languages.get(data.get("language", languages.DEFAULT)).family.name,
                    packages=dict(data.get("packages", {})),
                    lock=list(data.get("lock", [])),
                    size_bytes=_size(manifest.parent),
                    created_at=data.get("created_at"),
                    last_used=self.last_used(rid),
                    build_seconds=data.get("build_seconds"),
                    in_use=self.in_use(rid),
                    location=str(manifest.parent),
                )
            )
        return found

    def build_log(self, rid: str) -> str:
        """The whole log of the build that made ``rid`` ('' when there is none)."""
        try:
            return (self.root / rid / "build.log").read_text(errors="replace")
        except OSError:
            return ""

    def remove(self, rid: str) -> bool:
        """Remove runtime ``rid``; False (and nothing removed) while a live worker holds its lease
        or a build of it runs. The directory is renamed away first, so no worker ever starts on a
        half-removed one."""
        with self.exclusive(rid) as held:
            if not held:
                return False
            trash = self.root / f".{rid}.removed-{uuid.uuid4().hex[:8]}"
            try:
                (self.root / rid).rename(trash)
            except FileNotFoundError:
                pass
            self.forget_marks(rid)
        shutil.rmtree(trash, ignore_errors=True)
        return True

    def _run(
        self,
        install: installers.Install,
        rid: str,
        family: languages.Family,
        pins: dict[str, str],
        sandbox: dict[str, object] | None = None,
    ) -> tuple[str, str]:
        """Run an install (with ``sandbox``: in the build sandbox that config describes): its standard
        output and its whole log; ``BuildError`` when it fails or outlives ``build_timeout_s``."""
        limit = self.settings.build_timeout_s
        out_path, err_path = self.live_logs(rid)  # read by GET /v1/runtimes/{id} while it runs
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
                    uid = self.build_uid()
                    if uid is None or not wait_for_userns(proc.pid):
                        raise BuildError(
                            "the build sandbox did not start (no user namespace)", runtime_id=rid, output=""
                        )
                    write_id_maps(proc.pid, uid)
                proc.communicate(stdin, timeout=limit)
            except subprocess.TimeoutExpired as exc:
                _kill_group(proc)
                message = f"installing {installers.shown(family, pins)} took longer than {limit:.0f} s"
                raise BuildError(message, runtime_id=rid, output="") from exc
            except BaseException:
                _kill_group(proc)
                raise
            returncode = proc.returncode
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


def _size(directory: Path) -> int:
    """Bytes of the files under ``directory`` (not following links)."""
    total = 0
    for parent, _, files in os.walk(directory):
        for name in files:
            try:
                total += os.lstat(os.path.join(parent, name)).st_size
            except OSError:
                pass
    return total


def _disk_full(path: Path) -> bool:
    """Whether the disk of ``path`` has less than 1 MiB free (a failed install's output, written to the
    same disk, may then be empty: the installer's own words about it are lost)."""
    try:
        return shutil.disk_usage(path).free < 1 << 20
    except OSError:
        return False
