"""How much memory the pool may hand its workers: admission against the machine's memory.

Each worker may use up to its ``memory_mb`` (a memory cgroup per worker, or the container's limit),
so the workers alive at once (bound, starting and spare) may use the sum of theirs. Without a
bound, ``max_workers`` × a large ``memory_mb`` exceeds the machine and the kernel's OOM killer
picks among the service, the database and every tenant. The pool therefore admits a new worker only
while that sum stays within a budget: ``EVALUATOR_HOST_MAX_WORKER_MEMORY_MB``, by default
:data:`DEFAULT_FRACTION` of the machine's memory — the smaller of ``MemTotal`` and the memory limit
of the service's own cgroup (in a container, the container's). See ``Leasing._admit``.
"""

from __future__ import annotations

from pathlib import Path

from evaluator_host.settings import Settings

__all__ = ["DEFAULT_FRACTION", "budget_mb", "machine_memory_mb"]

DEFAULT_FRACTION = 0.75  # the rest: the service itself, the database, the page cache, the OS
_CGROUP = Path("/sys/fs/cgroup")


def _mem_total_mb() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_limit_mb() -> int | None:
    """The tightest memory limit on the way from this process's cgroup to the root (v2 or v1), if any."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    limits: list[int] = []
    for line in lines:
        _id, controllers, path = line.split(":", 2)
        if controllers == "":
            base, name = _CGROUP, "memory.max"
        elif "memory" in controllers.split(","):
            base, name = _CGROUP / "memory", "memory.limit_in_bytes"
        else:
            continue
        here = base / path.lstrip("/")
        while True:
            try:
                value = (here / name).read_text().strip()
                if value != "max":
                    limits.append(int(value) // (1024 * 1024))
            except (OSError, ValueError):
                pass
            if here == base or base not in here.parents:
                break
            here = here.parent
    return min(limits) if limits else None


def machine_memory_mb() -> int | None:
    """The machine's memory as this service sees it: the smaller of ``MemTotal`` and its cgroup's limit."""
    found = [m for m in (_mem_total_mb(), _cgroup_limit_mb()) if m is not None]
    return min(found) if found else None


def budget_mb(settings: Settings) -> int | None:
    """The total ``memory_mb`` of live workers admitted at once (None: unknown, no bound)."""
    if settings.max_worker_memory_mb is not None:
        return settings.max_worker_memory_mb
    machine = machine_memory_mb()
    return int(machine * DEFAULT_FRACTION) if machine else None
