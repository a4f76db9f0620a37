"""The process backend: each worker is a harness in a sandboxed subprocess.

The embedded default when no Docker engine answers. Isolation is whatever
:func:`evaluator_host.sandbox.process.isolation.probe` found (namespaces + pivot_root +
unprivileged uid as root); rlimits, a scrubbed environment and a private ``/tmp``
always. User code never runs as root: a root service in the rlimits-only mode drops every
worker to an unprivileged uid, and refuses to start (``BackendUnavailable``, naming the cause
and the fix) when it cannot, or when that uid could not read the interpreter, the harnesses or
the runtimes. See docs/security.md for what this does and does not protect against.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from evaluator_host.definitions import languages
from evaluator_host.definitions.languages import RUNTIMES_DIR
from evaluator_host.errors import BackendUnavailable, SandboxError
from evaluator_host.sandbox.base import SANDBOX_ENV, RuntimeKey
from evaluator_host.sandbox.cgroups import limit_cpu, limit_memory
from evaluator_host.sandbox.egress.proxy import (
    EgressGate,
    EgressProxy,
    proxy_env,
)
from evaluator_host.sandbox.process.isolation import AFTER_MAPS, Isolation, probe, wait_for_userns, write_id_maps
from evaluator_host.sandbox.process.raw_pipe import RawPipe
from evaluator_host.sandbox.process.runtimes import RuntimeBuilder
from evaluator_host.sandbox.process.uid_claims import SLOTS, claim, claimed_uid
from evaluator_host.sandbox.process.worker import ProcessWorker, worker_config
from evaluator_host.sandbox.protocol import encode_frame
from evaluator_host.settings import Settings

__all__ = ["ProcessBackend", "ProcessWorker"]

_BOOTSTRAP = RUNTIMES_DIR / "sandbox_init.py"
log = logging.getLogger(__name__)
_CGROUP_GRACE_S = 60.0  # an empty worker cgroup younger than this may be a live service's, about to be joined


class ProcessBackend:
    """Starts harnesses as sandboxed subprocesses of the service."""

    name = "process"

    def __init__(self, settings: Settings, isolation: Isolation | None = None) -> None:
        self.settings = settings
        self.builder = RuntimeBuilder(settings)
        self._isolation = iso = isolation or probe(settings.process_isolation, settings.sandbox_uid_base)
        if iso.user_code_as_root:
            raise BackendUnavailable(
                f"the process backend would run user code as root ({iso.mode} mode): it cannot drop workers to "
                "an unprivileged uid ("
                + (iso.uid_drop_error or "no uid drop")
                + "). Fix: give the service CAP_SETUID and CAP_SETGID (it then runs each worker as "
                "sandbox_uid_base + n), or run it as an unprivileged user, or allow namespaces (CAP_SYS_ADMIN "
                "or a seccomp profile that permits unshare), or use the docker backend"
            )
        # rlimits as root: the worker's uid sees the host's file system, so its private directory lives
        # outside the (private, 0700) data dir, in a directory others may traverse but not list
        self._rlimits_uid = iso.mode == "rlimits" and iso.uid_drop
        if iso.mode == "rlimits" and iso.landlock_abi < 1:
            log.warning("process backend, rlimits mode: %s", iso.landlock)
        if self._rlimits_uid:
            self._check_sandbox_uid_reaches()
            self._run_dir = Path(tempfile.mkdtemp(prefix="evaluator-host-rlimits-"))
            self._run_dir.chmod(0o711)
        else:
            self._run_dir = settings.data_dir / "run"
            self._run_dir.mkdir(parents=True, exist_ok=True)
        # uids are handed out oldest-freed first, and only once every process of the last holder is gone
        self._free_slots = collections.deque(range(SLOTS))
        self._workers: set[ProcessWorker] = set()
        self._closed = False
        # network for evaluators that declare it: only in a network namespace of the worker's own
        namespaced = self._isolation.mode != "rlimits"
        self.egress: EgressProxy | None = (
            EgressProxy(settings.egress_hosts, ca_bundle=settings.ca_bundle) if namespaced else None
        )
        self._sweep_cgroups()
        self.builder.use_isolation(self._isolation)  # Python installs run in a build sandbox of this kind

    @property
    def run_dir(self) -> Path:
        """Where each worker's private directory is made."""
        return self._run_dir

    def _private_env(self, root: Path) -> dict[str, str]:
        """rlimits: ``HOME`` and ``TMPDIR`` are the worker's own directory (there is no private ``/tmp``, and
        Landlock leaves the host's unwritable); other modes keep the sandbox's private ``/tmp``."""
        return {"HOME": str(root), "TMPDIR": str(root)} if self._isolation.mode == "rlimits" else {}

    def _check_sandbox_uid_reaches(self) -> None:
        """In the rlimits-only mode as root, the sandbox uid reads everything a worker needs from the
        host's own paths: check, as that uid, that it can (``BackendUnavailable`` naming what not)."""
        base = self.settings.sandbox_uid_base
        paths = [str(RUNTIMES_DIR), str(self.builder.root)]
        for family in languages.families():
            paths.append(str(family.harness_path))
            with contextlib.suppress(Exception):  # a family whose host packages are missing fails later
                paths += [src for src, _name in family.vendor_dirs()]
                paths.append(family.host_executable(self.settings.python_executable))
        check = (
            "import json, os, sys\n"
            "bad = [p for p in json.loads(sys.argv[1]) if not os.access(p, os.R_OK | (os.X_OK if os.path.isdir(p) "
            "else 0))]\nprint(json.dumps(bad))"
        )
        try:
            with claimed_uid(base) as uid:  # a uid no live worker has, which no other service reaps meanwhile
                done = subprocess.run(
                    [self.settings.python_executable, "-I", "-S", "-c", check, json.dumps(paths)],
                    user=uid,
                    group=uid,
                    extra_groups=[],
                    capture_output=True,
                    timeout=30,
                    cwd="/",
                )
            code = done.returncode
            ended = f"killed by signal {-code}" if code < 0 else f"exit {code}"
            bad = json.loads(done.stdout) if code == 0 else [f"{self.settings.python_executable} (the check: {ended})"]
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            bad = [f"{self.settings.python_executable} (the check: {type(exc).__name__}: {exc})"]
        if bad:
            raise BackendUnavailable(
                f"the process backend runs user code as uids from {base} (rlimits-only mode as root), which cannot "
                f"read {', '.join(bad)}. Fix: make these paths and their parent directories readable by other "
                "users (e.g. install the service under /opt, set EVALUATOR_HOST_PYTHON_EXECUTABLE to an interpreter "
                "others can run and EVALUATOR_HOST_CACHE_DIR to a directory "
                "outside the private data dir), or allow namespaces, or use the docker backend"
            )

    @property
    def isolation(self) -> dict[str, Any]:
        """The mode and measures in force."""
        iso = self._isolation
        return {
            "summary": iso.summary,
            "mode": iso.mode,
            "uid_drop": iso.uid_drop,
            "user": iso.user,
            "user_code_as_root": iso.user_code_as_root,
            "pids_cgroup": iso.pids_cgroup is not None,
            "memory_cgroup": iso.memory_cgroup is not None,
            "cpu_cgroup": iso.cpu_cgroup is not None,
            "network": (
                "none (fresh net namespace); evaluators declaring `network` reach only the egress proxy"
                if iso.mode != "rlimits"
                else "none: socket() refused by seccomp"
                + (", TCP by landlock" if iso.landlock_abi >= 4 else "")
                + "; no egress for evaluators"
            ),
            "landlock": {
                "abi": iso.landlock_abi,
                "enforced": iso.mode == "rlimits" and iso.landlock_abi > 0,
                "detail": iso.landlock,
            },
        }

    def _sweep_cgroups(self) -> None:
        """Remove empty worker cgroups a crashed service left (ones still in use refuse rmdir). The
        cgroups are machine-wide: one made in the last minute may be another live service's worker
        that has not joined it yet, so it is left alone."""
        old = time.time() - _CGROUP_GRACE_S
        for base in (self._isolation.pids_cgroup, self._isolation.memory_cgroup, self._isolation.cpu_cgroup):
            for child in base.iterdir() if base is not None else ():
                with contextlib.suppress(OSError):
                    if child.is_dir() and child.stat().st_mtime < old:
                        child.rmdir()

    def _make_cgroups(self, name: str, memory_mb: int) -> tuple[list[Path], Path | None]:
        """The worker's cgroups (its pids limit, its memory limit) and which one counts OOM kills."""
        made: list[Path] = []
        memory: Path | None = None
        for base, limit in (
            (self._isolation.pids_cgroup, lambda d: (d / "pids.max").write_text(str(self.settings.pids_max))),
            (self._isolation.memory_cgroup, lambda d: limit_memory(d, memory_mb)),
            (self._isolation.cpu_cgroup, lambda d: limit_cpu(d, self.settings.cpus)),
        ):
            if base is None:
                continue
            cgroup = base / name
            try:
                cgroup.mkdir(exist_ok=True)  # v2: one directory holds both controllers
                limit(cgroup)
            except OSError:
                with contextlib.suppress(OSError):
                    cgroup.rmdir()
                continue
            if cgroup not in made:
                made.append(cgroup)
            if base is self._isolation.memory_cgroup:
                memory = cgroup
        return made, memory

    async def start_worker(self, runtime: RuntimeKey) -> ProcessWorker:
        """Start an unbound harness for ``runtime`` in a fresh sandbox."""
        if self._closed:
            raise SandboxError("the service is shutting down")
        if runtime.egress and self.egress is None:
            raise SandboxError("this process sandbox has no network namespace: it cannot give workers egress")
        lease = self._lease(runtime)
        gate: EgressGate | None = None
        try:
            gate = await self.egress.open() if runtime.egress and self.egress is not None else None
            slot, claim = self._claim_slot()
        except BaseException:
            _close(lease)
            if gate is not None:
                await gate.close()
            raise
        name = f"w-{uuid.uuid4().hex[:12]}"
        root = self._run_dir / name
        root.mkdir(mode=0o700)
        if self._rlimits_uid:  # no private root: the worker's own uid owns its working directory
            uid = self.settings.sandbox_uid_base + slot
            os.chown(root, uid, uid)
        cgroups, memory_cgroup = self._make_cgroups(name, runtime.memory_mb)
        config = worker_config(self.settings, self._isolation, runtime, root, slot, cgroups, gate)
        python = self.settings.python_executable
        # the config goes in as the first frame on stdin, not in argv: /proc/<pid>/cmdline is readable
        # inside the sandbox, and the config names host paths
        argv = [*self._isolation.unshare_argv, python, "-I", "-S", str(_BOOTSTRAP)]
        if self._isolation.host_maps:  # run again once its id maps are written (isolation.AFTER_MAPS)
            argv = [*self._isolation.unshare_argv, python, "-I", "-S", "-c", AFTER_MAPS, *argv[-3:]]

        def release() -> None:
            self._release_slot(slot, claim)
            _close(lease)
            self._workers.discard(worker)

        raw: RawPipe | None = None  # its fd 1/2: read apart from the replies (process/raw_pipe.py)
        try:
            raw = RawPipe.create()
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=raw.write_end,
                env={
                    **SANDBOX_ENV,
                    **self._private_env(root),
                    **(proxy_env(gate.proxy.sandbox_ca_dir is not None) if gate is not None else {}),
                },
                cwd=str(root),
                start_new_session=True,
                limit=1 << 20,
            )
        except OSError as exc:
            if raw is not None:
                raw.close()
            if gate is not None:
                await gate.close()
            self._release_slot(slot, claim)
            _close(lease)
            for path in (root, *cgroups):
                with contextlib.suppress(OSError):
                    path.rmdir()
            raise SandboxError(f"cannot start a worker: {exc}") from exc
        except BaseException:  # cancelled: nothing was started
            if raw is not None:
                raw.close()
            raise
        raw.close_write_end()  # the worker's processes hold theirs: EOF once they are all gone
        assert proc.stdin is not None
        if self._isolation.host_maps:  # userns as root: the worker's ids there are written from here
            try:
                if not await asyncio.to_thread(wait_for_userns, proc.pid):
                    raise OSError("unshare did not enter a user namespace")
                write_id_maps(proc.pid, self.settings.sandbox_uid_base + slot)
                proc.stdin.write(b".")  # AFTER_MAPS: run the bootstrap now
            except OSError as exc:
                raw.close()
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
                if gate is not None:
                    await gate.close()
                self._release_slot(slot, claim)
                _close(lease)
                shutil.rmtree(root, ignore_errors=True)
                raise SandboxError(f"cannot start a worker: its user namespace's id maps: {exc}") from exc
            except BaseException:  # cancelled: the process is not left running, nor its pipe open
                raw.close()
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                raise
        proc.stdin.write(encode_frame(config))
        namespaced = self._isolation.mode != "rlimits"
        reap_uid = self.settings.sandbox_uid_base + slot if self._rlimits_uid else None
        worker = ProcessWorker(proc, root, cgroups, release, namespaced, memory_cgroup, raw, gate, reap_uid)
        self._workers.add(worker)
        return worker

    def _lease(self, runtime: RuntimeKey) -> int | None:
        """Hold the worker's runtime for as long as the worker lives (a prune keeps it meanwhile);
        ``SandboxError`` (retryable) when a prune removed it since this service last looked."""
        if runtime.location is None:
            return None
        rid = Path(runtime.location).name
        fd = self.builder.lease(rid)
        if not os.path.isdir(runtime.location):
            os.close(fd)
            self.builder.forget(rid)
            raise SandboxError(f"runtime {rid} was removed (pruned) meanwhile: retry to rebuild it", retry_after_s=1)
        return fd

    def _claim_slot(self) -> tuple[int, int | None]:
        """A free uid slot, claimed host-wide (a lock file per uid) when workers get uids of their own:
        two services on one machine never hand the same uid to live workers. Returns the slot and the
        claim's descriptor (kept until the slot's last process is gone)."""
        for _ in range(len(self._free_slots)):
            slot = self._free_slots.popleft()
            if not self._isolation.uid_drop:
                return slot, None
            fd = claim(self.settings.sandbox_uid_base + slot)
            if fd is None:  # another service's live worker (or a probe) has it
                self._free_slots.append(slot)
                continue
            return slot, fd
        raise SandboxError("no free sandbox uid", retry_after_s=1)

    def _release_slot(self, slot: int, claim: int | None) -> None:
        if claim is not None:
            os.close(claim)
        self._free_slots.append(slot)

    async def close(self) -> None:
        """Kill every worker this backend started; start no more."""
        self._closed = True
        await asyncio.gather(*(w.kill() for w in list(self._workers)), return_exceptions=True)
        self.builder.close()  # (a background bytecode compile: stopped, left for the next start)
        if self.egress is not None:
            self.egress.close()
        if self._rlimits_uid:  # with whatever the workers' uids left in their directories
            shutil.rmtree(self._run_dir, ignore_errors=True)


def _close(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)
