"""The process backend: each worker is a harness in a sandboxed subprocess.

The embedded default when no Docker engine answers. Isolation is whatever
:func:`evaluator_host.sandbox.process.isolation.probe` found (namespaces + pivot_root +
unprivileged uid as root); rlimits, a scrubbed environment and a private ``/tmp``
always. See docs/security.md for what this does and does not protect against.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import uuid
from pathlib import Path
from typing import Any

from evaluator_host import languages
from evaluator_host.errors import SandboxError
from evaluator_host.languages import RUNTIMES_DIR
from evaluator_host.sandbox.base import SANDBOX_ENV, ExitInfo, RawOutput, RuntimeKey, memory_exhausted
from evaluator_host.sandbox.process.isolation import Isolation, probe
from evaluator_host.sandbox.process.runtimes import RuntimeBuilder
from evaluator_host.settings import Settings

__all__ = ["ProcessBackend", "ProcessWorker"]

_BOOTSTRAP = RUNTIMES_DIR / "sandbox_init.py"
_CPU_SECONDS = 3600  # a backstop per worker lifetime; the wall timeout is the real bound


class ProcessWorker:
    """A harness subprocess; raw fd-level output is drained into a capped buffer."""

    def __init__(self, proc: asyncio.subprocess.Process, workdir: Path, cgroup: Path | None, release: Any) -> None:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self.proc = proc
        self.reader: asyncio.StreamReader = proc.stdout
        self.writer: asyncio.StreamWriter = proc.stdin
        self.output_overflow = asyncio.Event()
        self._workdir = workdir
        self._cgroup = cgroup
        self._release = release
        self._raw = RawOutput()
        self._exit: ExitInfo | None = None
        self._drain = asyncio.ensure_future(self._drain_stderr(proc.stderr))

    async def _drain_stderr(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            if self._raw.feed(chunk) and not self.output_overflow.is_set():
                self.output_overflow.set()
                self._signal()

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
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._drain, 2.0)
        with contextlib.suppress(Exception):
            self.writer.close()
        tail = self._raw.tail
        self._exit = ExitInfo(returncode=code, oom_killed=memory_exhausted(tail), raw_output=tail)
        shutil.rmtree(self._workdir, ignore_errors=True)
        for _ in range(50):  # a cgroup can be removed once its last process is gone
            try:
                if self._cgroup is not None:
                    self._cgroup.rmdir()
                break
            except OSError:
                await asyncio.sleep(0.02)
        self._release()
        return self._exit


class ProcessBackend:
    """Starts harnesses as sandboxed subprocesses of the service."""

    name = "process"

    def __init__(self, settings: Settings, isolation: Isolation | None = None) -> None:
        self.settings = settings
        self.builder = RuntimeBuilder(settings)
        self._isolation = isolation or probe()
        self._run_dir = settings.data_dir / "run"
        self._run_dir.mkdir(parents=True, exist_ok=True)
        self._free_slots = list(range(1024))
        self._workers: set[ProcessWorker] = set()
        self._sweep_cgroups()

    @property
    def isolation(self) -> dict[str, Any]:
        """The mode and measures in force."""
        iso = self._isolation
        return {
            "summary": iso.summary,
            "mode": iso.mode,
            "uid_drop": iso.uid_drop,
            "pids_cgroup": iso.pids_cgroup is not None,
            "network": "none (fresh net namespace)" if iso.mode != "rlimits" else "host (not isolated)",
        }

    def _sweep_cgroups(self) -> None:
        if self._isolation.pids_cgroup is None:
            return
        for child in self._isolation.pids_cgroup.iterdir():
            if child.is_dir():
                with contextlib.suppress(OSError):
                    child.rmdir()

    def _config(self, runtime: RuntimeKey, root: Path, slot: int, cgroup: Path | None) -> dict[str, Any]:
        """The bootstrap's config (runtimes/sandbox_init.py) for an unbound worker of ``runtime``."""
        iso = self._isolation
        family = languages.family(runtime.family)
        private_root = iso.mode != "rlimits"
        python = self.settings.python_executable
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
        harness_config: dict[str, Any] = {
            # the harness is pid 1 of its own pid namespace: it may kill the rest
            "reap_strays": private_root,
            "work_dir": "/tmp/.evaluator" if private_root else str(root / ".evaluator"),
            **family.packages_config(packages),
        }
        rlimits = {
            "AS": (runtime.memory_mb + family.address_space_mb) * 1024 * 1024,
            "CPU": _CPU_SECONDS,
            "FSIZE": self.settings.tmpfs_mb * 1024 * 1024,
            "NOFILE": 256,
            "CORE": 0,
        }
        if iso.uid_drop:
            rlimits["NPROC"] = self.settings.pids_max
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
        return {
            "root": str(root) if private_root else None,
            "workdir": None if private_root else str(root),
            "binds": binds,
            "tmpfs_mb": self.settings.tmpfs_mb,
            "uid": self.settings.sandbox_uid_base + slot if iso.uid_drop else None,
            "cgroup_procs": str(cgroup / "cgroup.procs") if cgroup else None,
            "rlimits": rlimits,
            **launch,
        }

    async def start_worker(self, runtime: RuntimeKey) -> ProcessWorker:
        """Start an unbound harness for ``runtime`` in a fresh sandbox."""
        if not self._free_slots:
            raise SandboxError("no free sandbox slots", retry_after_s=1)
        slot = self._free_slots.pop()
        name = f"w-{uuid.uuid4().hex[:12]}"
        root = self._run_dir / name
        root.mkdir(mode=0o700)
        cgroup: Path | None = None
        if self._isolation.pids_cgroup is not None:
            cgroup = self._isolation.pids_cgroup / name
            try:
                cgroup.mkdir()
                (cgroup / "pids.max").write_text(str(self.settings.pids_max))
            except OSError:
                with contextlib.suppress(OSError):
                    cgroup.rmdir()
                cgroup = None
        config = self._config(runtime, root, slot, cgroup)
        python = self.settings.python_executable
        argv = [*self._isolation.unshare_argv, python, "-I", "-S", str(_BOOTSTRAP), json.dumps(config)]

        def release() -> None:
            self._free_slots.append(slot)
            self._workers.discard(worker)

        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=dict(SANDBOX_ENV),
                cwd=str(root),
                start_new_session=True,
                limit=1 << 20,
            )
        except OSError as exc:
            self._free_slots.append(slot)
            for path in (root, cgroup):
                if path is not None:
                    with contextlib.suppress(OSError):
                        path.rmdir()
            raise SandboxError(f"cannot start a worker: {exc}") from exc
        worker = ProcessWorker(proc, root, cgroup, release)
        self._workers.add(worker)
        return worker

    async def close(self) -> None:
        """Kill every worker this backend started."""
        await asyncio.gather(*(w.kill() for w in list(self._workers)), return_exceptions=True)
