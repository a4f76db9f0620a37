"""Control groups seen from the host: a worker's memory limit and how many of its processes were OOM-killed.

Works on cgroup v1 (``memory.limit_in_bytes``, ``memory.oom_control``) and v2 (``memory.max``,
``memory.events``). On v2 the whole worker is killed when it runs out of memory
(``memory.oom.group``); on v1 the kernel kills one process, so the pool also compares a
worker's OOM-kill counter before and after each batch: a batch during which any process of the
worker was killed for memory answers ``memory_limit``, even if the harness itself survived.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

__all__ = ["limit_memory", "memory_cgroup_of", "oom_kills"]

_ROOT = Path("/sys/fs/cgroup")


def limit_memory(cgroup: Path, memory_mb: int) -> None:
    """Cap ``cgroup`` (a fresh directory) at ``memory_mb`` MiB, swap included; OSError when refused."""
    limit = str(memory_mb * 1024 * 1024)
    if (cgroup / "memory.max").exists():  # v2
        (cgroup / "memory.max").write_text(limit)
        with contextlib.suppress(OSError):
            (cgroup / "memory.swap.max").write_text("0")
        with contextlib.suppress(OSError):
            (cgroup / "memory.oom.group").write_text("1")
        return
    (cgroup / "memory.limit_in_bytes").write_text(limit)
    with contextlib.suppress(OSError):  # without swap accounting there is no memsw file
        (cgroup / "memory.memsw.limit_in_bytes").write_text(limit)


def oom_kills(cgroup: Path | None) -> int:
    """How many processes of ``cgroup`` the kernel killed for memory so far (0 when unknown)."""
    if cgroup is None:
        return 0
    for name in ("memory.events", "memory.oom_control"):
        try:
            text = (cgroup / name).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    return 0


def memory_cgroup_of(pid: int | None) -> Path | None:
    """The memory cgroup directory of host process ``pid`` (e.g. a container's init), or None."""
    if pid is None:
        return None
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            found = _ROOT / "memory" / path.lstrip("/")
            return found if found.is_dir() else None
    for line in lines:
        if line.startswith("0::"):
            found = _ROOT / line[3:].lstrip("/")
            return found if (found / "memory.events").exists() else None
    return None
