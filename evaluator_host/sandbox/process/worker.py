"""A process-backend worker: the harness in its sandbox, what its bootstrap is told, and its end.

:func:`worker_config` is the bootstrap's config (``runtimes/sandbox_init.py``) for an unbound worker:
what it sees (our files bound read-only at fixed paths under ``/sandbox``, its runtime, the family's
vendored packages, its egress socket), its limits (rlimits, cgroups, tmpfs), its uid and how the
harness is launched. :class:`ProcessWorker` is the running harness: its raw fd-level output drained
into a capped buffer, its strays reaped after each batch, its OOM kills counted, and on exit its
directory and cgroups removed before its uid serves another worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from evaluator_host.definitions import languages
from evaluator_host.definitions.languages import RUNTIMES_DIR
from evaluator_host.sandbox import strays
from evaluator_host.sandbox.base import ExitInfo, RawOutput, RuntimeKey, memory_exhausted
from evaluator_host.sandbox.cgroups import Counter, oom_counter
from evaluator_host.sandbox.egress.proxy import (
    IN_SANDBOX_PORT,
    SANDBOX_CA_BUNDLE,
    SANDBOX_CA_DIR,
    SANDBOX_SOCKET,
    EgressGate,
)
from evaluator_host.sandbox.process.isolation import Isolation
from evaluator_host.sandbox.process.raw_pipe import RawPipe
from evaluator_host.sandbox.strays import StrayReaper
from evaluator_host.settings import Settings

__all__ = ["ProcessWorker", "worker_config"]

_CPU_SECONDS = 3600  # a backstop per worker lifetime; the wall timeout is the real bound


def worker_config(
    settings: Settings,
    iso: Isolation,
    runtime: RuntimeKey,
    root: Path,
    slot: int,
    cgroups: list[Path],
    gate: EgressGate | None,
) -> dict[str, Any]:
    """The bootstrap's config (runtimes/sandbox_init.py) for an unbound worker of ``runtime``
    (with ``gate``: its egress socket bound in, the loopback up, the harness forwarding to it)."""
    family = languages.family(runtime.family)
    private_root = iso.mode != "rlimits"
    python = settings.python_executable
    # The bootstrap's interpreter is bound where it is (it is already running); everything
    # else of ours is bound read-only at a fixed path under /sandbox, wherever it lives here.
    binds = [[str(Path(python).resolve().parents[1])] * 2]
    runtimes_dir, packages = str(RUNTIMES_DIR), None
    if private_root:
        binds.append([runtimes_dir, "/sandbox/runtimes"])
        runtimes_dir = "/sandbox/runtimes"
    if runtime.location:
        packages = f"{runtime.location}/{family.packages_dir}"
        if private_root:
            binds.append([runtime.location, "/sandbox/runtime"])
            packages = f"/sandbox/runtime/{family.packages_dir}"
    harness = f"{runtimes_dir}/{family.name}/{family.harness}"
    vendor: list[str] = []
    if family.vendor:  # host packages the harness needs (RestrictedPython), read-only
        if private_root:
            binds += [[src, f"{languages.VENDOR_DIR}/{name}"] for src, name in family.vendor_dirs()]
            vendor = [languages.VENDOR_DIR]
        else:  # no private root to bind into: links in the worker's own directory
            (root / "vendor").mkdir()
            for src, name in family.vendor_dirs():
                (root / "vendor" / name).symlink_to(src)
            vendor = [str(root / "vendor")]
    harness_config: dict[str, Any] = {
        # the harness is pid 1 of its own pid namespace: it may kill the rest
        "reap_strays": private_root,
        "sync": False,  # no sync marks: the raw pipe itself orders raw output and replies (raw_pipe.py)
        "work_dir": "/tmp/.evaluator" if private_root else str(root / ".evaluator"),
        "vendor_dirs": vendor,
        # the harness's own memory limit, below the cgroup's (the Python harness: RLIMIT_AS, as the rlimits below)
        "memory_mb": runtime.memory_mb,
        "address_space_mb": runtime.memory_mb + family.address_space_mb,
        **family.packages_config(packages),
    }
    if gate is not None:
        binds.append([str(gate.path), SANDBOX_SOCKET])
        binds.append([str(gate.proxy.sandbox_bundle), SANDBOX_CA_BUNDLE])  # the CAs it trusts
        if (ca_dir := gate.proxy.sandbox_ca_dir) is not None:
            binds.append([str(ca_dir), SANDBOX_CA_DIR])  # the same, one file each (proxy_env)
        harness_config["egress"] = {"socket": SANDBOX_SOCKET, "port": IN_SANDBOX_PORT}
    rlimits = {
        "AS": (runtime.memory_mb + family.address_space_mb) * 1024 * 1024,
        "CPU": _CPU_SECONDS,
        "FSIZE": settings.tmpfs_mb * 1024 * 1024,
        "NOFILE": 256,
        "CORE": 0,
    }
    if iso.uid_drop:
        rlimits["NPROC"] = settings.pids_max
    launch: dict[str, Any]
    if family.runs_in_bootstrap_interpreter:
        launch = {"run_python": harness, "argv": [json.dumps(harness_config)]}
    else:
        executable = Path(family.host_executable(python)).resolve()
        home = executable.parents[1]
        if private_root:  # e.g. the Node wheel inside a venv under /tmp, hidden by the private /tmp
            binds.append([str(home), f"/sandbox/{family.name}-home"])
            executable = Path(f"/sandbox/{family.name}-home") / executable.relative_to(home)
        argv = family.command_for(str(executable), harness, runtime.memory_mb, harness_config)
        launch = {"exec": argv, "channel_fds": family.channel_fds}
    landlock: dict[str, list[str]] | None = None
    if not private_root and iso.landlock_abi > 0:  # rlimits: the host's file system and loopback, confined
        read = [bind[0] for bind in binds] + [str(RUNTIMES_DIR)]
        read += [src for src, _name in family.vendor_dirs()] if family.vendor else []
        read += [runtime.location] if runtime.location else []
        if not family.runs_in_bootstrap_interpreter:
            read.append(str(Path(family.host_executable(python)).resolve().parents[1]))
        landlock = {"read": read, "write": [str(root)]}
    return {
        "root": str(root) if private_root else None,
        "init": private_root,  # a pid namespace of its own: an init as pid 1, the harness as pid 2
        "seccomp": True,
        "no_sockets": not private_root,  # rlimits: no network namespace, and no egress either
        "landlock": landlock,
        "workdir": None if private_root else str(root),
        "binds": binds,
        "tmpfs_mb": settings.tmpfs_mb,
        "uid": settings.sandbox_uid_base + slot if iso.uid_drop else None,
        "cgroup_procs": [str(c / "cgroup.procs") for c in cgroups],
        "rlimits": rlimits,
        "loopback": gate is not None,
        **launch,
    }


class ProcessWorker:
    """A harness subprocess; raw fd-level output is drained into a capped buffer."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        workdir: Path,
        cgroups: list[Path],
        release: Any,
        namespaced: bool,
        memory_cgroup: Path | None,
        raw: RawPipe,
        egress: EgressGate | None = None,
        uid: int | None = None,
    ) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self.reader: asyncio.StreamReader = proc.stdout
        self.writer: asyncio.StreamWriter = proc.stdin
        self.output_overflow = asyncio.Event()
        self.egress = egress
        self._workdir = workdir
        self._cgroups = cgroups
        self._memory_cgroup = memory_cgroup
        self._release = release
        self._raw = RawOutput()
        self._raw_pipe = raw  # its fd 1/2, read into ``_raw`` from now on (raw_pipe.py)
        raw.start(self._raw_output)
        self._namespaced = namespaced  # then `proc` is `unshare`, whose one child is the namespace's init
        self._uid = uid  # rlimits-only mode as root: the worker's own uid tells its processes apart
        self._reaper: StrayReaper | None = None
        self._oom = oom_counter(memory_cgroup)
        pids = next((c / "pids.current" for c in cgroups if (c / "pids.current").exists()), None)
        self._pids = Counter(pids)
        self._exit: ExitInfo | None = None

    def raw_behind(self) -> Awaitable[None] | None:
        """None when the raw output written before now is all taken in, else what to wait for (raw_pipe.py)."""
        return self._raw_pipe.behind()

    def _raw_output(self, chunk: bytes) -> None:
        if chunk and self._raw.feed(chunk) and not self.output_overflow.is_set():
            self.output_overflow.set()
            self._signal()

    async def reap_strays(self) -> bool:
        """Kill what user code left running in the worker's pid namespace (from the host)."""
        if not self._namespaced:
            if self._uid is not None:  # rlimits as root: every process of its uid but the harness
                return await strays.reap_uid(self._uid, but=self.proc.pid)
            return True  # no namespace, no uid of its own: only the harness's own reaping (see security.md)
        if self._reaper is None or self._reaper.init_pid is None:
            inits = strays.children(self.proc.pid)
            self._reaper = StrayReaper(inits[0] if inits else None, self._pids)
        return await self._reaper.reap()

    def oom_kills(self) -> int:
        """Processes of this worker the kernel killed for memory so far (its memory cgroup's count)."""
        return self._oom.read()

    def set_output_limit(self, limit: int) -> None:
        """Cap the raw output kept per evaluation (set when the worker is bound)."""
        self._raw.cap = limit

    def take_raw_output(self) -> str:
        """Raw output written straight to fd 1/2 since the last call (capped)."""
        return self._raw.take()

    def _signal(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    async def kill(self) -> ExitInfo:
        """Kill the process group (the pid namespace dies with its init)."""
        if self.proc.returncode is None:
            self._signal()
        return await self.wait()

    async def wait(self) -> ExitInfo:
        """Wait for exit, then remove the worker's directories and cgroup."""
        if self._exit is not None:
            return self._exit
        code = await self.proc.wait()
        with contextlib.suppress(asyncio.TimeoutError):  # what it wrote last (a stray may hold the pipe open)
            await asyncio.wait_for(self._raw_pipe.closed.wait(), 2.0)
        self._raw_pipe.close()
        with contextlib.suppress(Exception):
            self.writer.close()
        tail = self._raw.tail
        oom = memory_exhausted(tail) or self.oom_kills() > 0
        self._oom.close()
        self._pids.close()
        if self._reaper is not None:
            self._reaper.close()
        self._exit = ExitInfo(returncode=code, oom_killed=oom, raw_output=tail)
        if self.egress is not None:
            await self.egress.close()
        shutil.rmtree(self._workdir, ignore_errors=True)
        gone = not self._cgroups
        if self._uid is not None:  # no cgroup or namespace holds its processes: its uid does
            gone = await strays.reap_uid(self._uid)
        for _ in range(100 if self._cgroups else 0):  # a cgroup can be removed once its last process is gone
            try:
                for cgroup in self._cgroups:
                    if cgroup.exists():
                        cgroup.rmdir()
                gone = True
                break
            except OSError:
                await asyncio.sleep(0.02)
        if gone:  # no process of the slot's uid is left: the uid may serve another worker
            self._release()
        return self._exit
