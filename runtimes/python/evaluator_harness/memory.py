"""The worker's own memory limit, below the sandbox's, so that a runaway allocation raises ``MemoryError``
(answered ``memory_limit``) and the worker stays, instead of the sandbox's OOM kill ending it.

* :func:`limit_address_space`: at start, the harness lowers ``RLIMIT_AS`` (soft and hard: user code cannot
  raise it back) to the config's ``address_space_mb`` (the evaluator's ``memory_mb`` plus the family's
  ``address_space_mb`` slack, set by the host: the process backend's ``sandbox_init`` sets the same limit,
  a container gets it only from here). A limit already lower is kept. The cgroup (the container's memory
  limit) stays the backstop for memory an address-space limit does not see (shared mappings).
* :func:`crowded`: after a ``MemoryError``, whether the worker still holds more than half its ``memory_mb``
  once garbage is collected (user code kept what it allocated, e.g. in a module global): then its reply
  carries ``retire`` and the host starts a fresh worker rather than one a step away from the OOM kill.
"""

from __future__ import annotations

import gc
import os
import resource

MIB = 1024 * 1024


def limit_address_space(mb: int) -> None:
    """Lower ``RLIMIT_AS`` to ``mb`` MiB (0: leave it)."""
    if mb <= 0:
        return
    wanted = mb * MIB
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft <= wanted:
        return
    resource.setrlimit(resource.RLIMIT_AS, (wanted, wanted))


def resident_bytes() -> int:
    """This process's resident set, in bytes (0 when ``/proc`` cannot say)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def crowded(memory_mb: int) -> bool:
    """After a ``MemoryError``: does the worker still hold over half of ``memory_mb`` (0: no bound known)?"""
    if memory_mb <= 0:
        return False
    gc.collect()
    return resident_bytes() > memory_mb * MIB // 2
