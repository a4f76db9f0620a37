"""What process isolation this machine allows, probed once at start-up.

The process backend uses the strongest mode available:

``namespaces``  root: fresh mount/net/pid/ipc/uts namespaces (``unshare``), a pivot_root
                into a minimal read-only root, a private tmpfs ``/tmp`` and ``/dev/shm``,
                a unique unprivileged uid per worker, a pids and a memory cgroup when writable.
``userns``      not root but unprivileged user namespaces work: the same namespaces and
                minimal root inside a user namespace (no uid change, no NPROC limit).
``rlimits``     neither: rlimits, a scrubbed environment and a private working directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Isolation", "probe"]

NAMESPACES = ("mount", "net", "pid", "ipc", "uts")
_CGROUP_NAME = "evaluator-host"


@dataclass(frozen=True)
class Isolation:
    """The isolation mode and its features, as reported by ``/healthz``."""

    mode: str
    unshare_argv: tuple[str, ...]
    uid_drop: bool
    pids_cgroup: Path | None
    memory_cgroup: Path | None = None
    cpu_cgroup: Path | None = None

    @property
    def summary(self) -> str:
        """One line naming every measure in force."""
        parts = [f"process:{self.mode}"]
        if self.mode != "rlimits":
            parts.append("namespaces(" + ",".join(NAMESPACES) + ")")
            parts.append("pivot_root(minimal read-only root, private /tmp and /dev/shm)")
        if self.uid_drop:
            parts.append("unprivileged uid per worker")
        if self.pids_cgroup:
            parts.append("pids cgroup")
        if self.memory_cgroup:
            parts.append("memory cgroup (the whole worker, no swap)")
        if self.cpu_cgroup:
            parts.append("cpu cgroup (the cpus setting)")
        parts.append("rlimits(AS,CPU," + ("NPROC," if self.uid_drop else "") + "FSIZE,NOFILE,CORE)")
        parts += ["no_new_privs", "scrubbed env"]
        if os.uname().machine == "x86_64":
            parts.append("seccomp (keyrings, namespaces, mounts, bpf, ptrace, modules, clocks refused)")
        return " + ".join(parts)


def _works(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv + ["true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _cgroup(controller: str, limit_files: tuple[str, ...]) -> Path | None:
    """A writable ``evaluator-host`` cgroup directory with ``controller`` (v1 or v2) whose children
    get one of ``limit_files``, or None."""
    candidates = [Path("/sys/fs/cgroup") / controller]
    v2 = Path("/sys/fs/cgroup")
    try:
        if controller in (v2 / "cgroup.controllers").read_text().split():
            candidates.append(v2)
    except OSError:
        pass
    for base in candidates:
        if not (base / "cgroup.procs").exists():
            continue
        path = base / _CGROUP_NAME
        try:
            path.mkdir(exist_ok=True)
            if base == v2:
                (base / "cgroup.subtree_control").write_text(f"+{controller}")
                (path / "cgroup.subtree_control").write_text(f"+{controller}")
            probe_dir = path / "probe"
            probe_dir.mkdir(exist_ok=True)
            ok = any((probe_dir / name).exists() for name in limit_files)
            probe_dir.rmdir()
            if ok:
                return path
        except OSError:
            continue
    return None


def probe() -> Isolation:
    """Find the strongest isolation mode this process can use."""
    unshare = shutil.which("unshare")
    base = [unshare, *(f"--{ns}" for ns in NAMESPACES), "--fork", "--kill-child", "--"] if unshare else []
    if unshare and os.geteuid() == 0 and _works(base):
        pids = _cgroup("pids", ("pids.max",))
        memory = _cgroup("memory", ("memory.max", "memory.limit_in_bytes"))
        cpu = _cgroup("cpu", ("cpu.max", "cpu.cfs_quota_us"))
        return Isolation("namespaces", tuple(base), True, pids_cgroup=pids, memory_cgroup=memory, cpu_cgroup=cpu)
    if unshare:
        user = [unshare, "--user", "--map-root-user", *base[1:]]
        if _works(user):
            return Isolation("userns", tuple(user), uid_drop=False, pids_cgroup=None)
    return Isolation("rlimits", (), uid_drop=False, pids_cgroup=None)
