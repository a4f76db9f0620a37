"""How much memory the pool may hand its workers: admission against the machine's memory.

Each worker may use up to its ``memory_mb`` (a memory cgroup per worker, or the container's limit),
so the workers alive at once (bound, starting and spare) may use the sum of theirs. Without a
bound, ``max_workers`` × a large ``memory_mb`` exceeds the machine and the kernel's OOM killer
picks among the service, the database and every tenant. The pool therefore admits a new worker only
while that sum stays within a budget: ``EVALUATOR_HOST_MAX_WORKER_MEMORY_MB``, by default
:data:`DEFAULT_FRACTION` of the machine's memory — the smaller of ``MemTotal`` and the memory limit
at the root of the cgroup hierarchy it sees (in a container, the container's). See ``Leasing._admit``.
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
    """The memory limit at the root of the cgroup hierarchy this service sees (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``), if any: in a container, the container's limit. Only the root counts: the
    process backend makes its workers' cgroups there (``evaluator-host/…``), and docker's containers
    live under the engine's, so a limit on the service's own cgroup (a systemd unit, a tool's per-command
    cgroup) does not bound their memory."""
    limits: list[int] = []
    for name in (_CGROUP / "memory.max", _CGROUP / "memory" / "memory.limit_in_bytes"):
        try:
            value = name.read_text().strip()
            if value != "max":
                limits.append(int(value) // (1024 * 1024))
        except (OSError, ValueError):
            pass
    return min(limits) if limits else None


def machine_memory_mb() -> int | None:
    """The machine's memory as this service sees it: the smaller of ``MemTotal`` and the limit at its
    cgroup hierarchy's root (:func:`_cgroup_limit_mb`)."""
    found = [m for m in (_mem_total_mb(), _cgroup_limit_mb()) if m is not None]
    return min(found) if found else None


def budget_mb(settings: Settings) -> int | None:
    """The total ``memory_mb`` of live workers admitted at once (None: unknown, no bound)."""
    if settings.max_worker_memory_mb is not None:
        return settings.max_worker_memory_mb
    machine = machine_memory_mb()
    return int(machine * DEFAULT_FRACTION) if machine else None
