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

from evaluator_host.definitions.js_inspect import node_executable
from evaluator_host.errors import SandboxError
from evaluator_host.sandbox.base import (
    RUNTIMES_DIR,
    SANDBOX_ENV,
    ExitInfo,
    RawOutput,
    WorkerSpec,
    memory_exhausted,
    node_command,
)
from evaluator_host.sandbox.process.isolation import Isolation, probe
from evaluator_host.sandbox.process.runtimes import RuntimeBuilder
from evaluator_host.settings import Settings

__all__ = ["ProcessBackend", "ProcessWorker"]

_BOOTSTRAP = RUNTIMES_DIR / "sandbox_init.py"
_PY_HARNESS = RUNTIMES_DIR / "python" / "harness.py"
_NODE_HARNESS = RUNTIMES_DIR / "node" / "harness.mjs"
_ADDRESS_SPACE_OVERHEAD_MB = 64  # interpreter + shared libraries on top of memory_mb
# V8 reserves address space up front (code range, heap cages, WebAssembly guard regions): Node
# does not start under ~1.2 GB of RLIMIT_AS. Its heap is capped by --max-old-space-size instead;
# the address-space limit only bounds off-heap memory (Buffers) to memory_mb + this.
_NODE_ADDRESS_SPACE_MB = 4096
_CPU_SECONDS = 3600  # a backstop per worker lifetime; the wall timeout is the real bound


class ProcessWorker:
    """A harness subprocess; raw fd-level output is drained into a capped buffer."""

    def __init__(
        self, proc: asyncio.subprocess.Process, workdir: Path, cgroup: Path | None, release: Any, cap: int
    ) -> None:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self.proc = proc
        self.reader: asyncio.StreamReader = proc.stdout
        self.writer: asyncio.StreamWriter = proc.stdin
        self.output_overflow = asyncio.Event()
        self._workdir = workdir
        self._cgroup = cgroup
        self._release = release
        self._raw = RawOutput(cap)
        self._exit: ExitInfo | None = None
        self._drain = asyncio.ensure_future(self._drain_stderr(proc.stderr))

    async def _drain_stderr(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            if self._raw.feed(chunk) and not self.output_overflow.is_set():
                self.output_overflow.set()
                self._signal()

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

    def _config(self, spec: WorkerSpec, root: Path, slot: int, cgroup: Path | None) -> dict[str, Any]:
        iso = self._isolation
        prefix = str(Path(self.settings.python_executable).resolve().parents[1])
        code_dir = str(Path(spec.code_path).parent)
        # With a private root, everything of ours is bound read-only under /sandbox.
        mounts = {
            str(RUNTIMES_DIR): "/sandbox/runtimes",
            code_dir: "/sandbox/code",
            **({spec.runtime_location: "/sandbox/runtime"} if spec.runtime_location else {}),
        }

        def inside(path: str, host_dir: str) -> str:
            return path.replace(host_dir, mounts[host_dir], 1) if iso.mode != "rlimits" else path

        reap = iso.mode != "rlimits"  # the harness is pid 1 of its own pid namespace: it may kill the rest
        runtime_dir = inside(spec.runtime_location, spec.runtime_location) if spec.runtime_location else None
        harness_config: dict[str, Any] = {
            "code_path": inside(spec.code_path, code_dir),
            "interface": spec.interface,
            "output_limit": spec.output_limit,
            "result_limit": spec.result_limit,
            "reap_strays": reap,
        }
        rlimits = {
            "AS": (spec.memory_mb + _ADDRESS_SPACE_OVERHEAD_MB) * 1024 * 1024,
            "CPU": _CPU_SECONDS,
            "FSIZE": self.settings.tmpfs_mb * 1024 * 1024,
            "NOFILE": 256,
            "CORE": 0,
        }
        if iso.uid_drop:
            rlimits["NPROC"] = self.settings.pids_max
        binds = [[prefix, prefix], *([src, dst] for src, dst in mounts.items())]
        launch: dict[str, Any]
        if spec.language == "python":
            harness_config["entrypoint"] = spec.entrypoint
            harness_config["site_dirs"] = [f"{runtime_dir}/site"] if runtime_dir else []
            launch = {"run_python": inside(str(_PY_HARNESS), str(RUNTIMES_DIR)), "argv": [json.dumps(harness_config)]}
        else:
            node = node_executable()
            if iso.mode != "rlimits":  # a fixed in-sandbox path, wherever the venv lives on the host
                binds.append([str(Path(node).resolve().parents[1]), "/sandbox/node"])
                node = "/sandbox/node/bin/node"
            harness_config.update(spec.loader)
            harness_config["language"] = spec.language
            harness_config["node_modules"] = f"{runtime_dir}/node_modules" if runtime_dir else None
            rlimits["AS"] = (spec.memory_mb + _NODE_ADDRESS_SPACE_MB) * 1024 * 1024
            harness = inside(str(_NODE_HARNESS), str(RUNTIMES_DIR))
            launch = {"exec": node_command(node, harness, spec.memory_mb, harness_config), "channel_fds": True}
        return {
            "root": str(root) if iso.mode != "rlimits" else None,
            "workdir": None if iso.mode != "rlimits" else str(root),
            "binds": binds,
            "tmpfs_mb": self.settings.tmpfs_mb,
            "uid": self.settings.sandbox_uid_base + slot if iso.uid_drop else None,
            "cgroup_procs": str(cgroup / "cgroup.procs") if cgroup else None,
            "rlimits": rlimits,
            **launch,
        }

    async def start_worker(self, spec: WorkerSpec) -> ProcessWorker:
        """Start a harness for ``spec`` in a fresh sandbox."""
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
        config = self._config(spec, root, slot, cgroup)
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
        worker = ProcessWorker(proc, root, cgroup, release, spec.output_limit)
        self._workers.add(worker)
        return worker

    async def close(self) -> None:
        """Kill every worker this backend started."""
        await asyncio.gather(*(w.kill() for w in list(self._workers)), return_exceptions=True)
