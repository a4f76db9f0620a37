"""Control groups seen from the host: a worker's memory limit and how many of its processes were OOM-killed.

Works on cgroup v1 (``memory.limit_in_bytes``, ``memory.oom_control``) and v2 (``memory.max``,
``memory.events``). On v2 the whole worker is killed when it runs out of memory
(``memory.oom.group``); on v1 the kernel kills one process, so the pool also compares a
worker's OOM-kill counter before and after each batch: a batch during which any process of the
worker was killed for memory answers ``memory_limit``, even if the harness itself survived.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from pathlib import Path

__all__ = ["Counter", "OomWatch", "cgroup_of", "limit_cpu", "limit_memory", "memory_cgroup_of", "oom_counter"]

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


class Counter:
    """A number read from one kernel file, kept open (one ``pread`` a read: the pool reads a worker's
    counters after every batch). ``key`` picks a ``key value`` line, ``field`` a field after the
    ``)`` of a ``/proc/<pid>/stat``; without either the file is the number. Reads 0 when the file
    is missing or gone."""

    def __init__(self, path: Path | None, key: str | None = None, field: int | None = None) -> None:
        self.key = key
        self.field = field
        self._fd: int | None = None
        if path is not None:
            with contextlib.suppress(OSError):
                self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        # closed by close(), or when collected (a counter whose owner never ended: a worker start cancelled)
        self._closer = weakref.finalize(self, _close_fds, [] if self._fd is None else [self._fd])

    def read(self) -> int:
        if self._fd is None:
            return 0
        try:
            text = os.pread(self._fd, 4096, 0).decode()
        except OSError:
            return 0
        if self.field is not None:
            fields = text.rsplit(")", 1)[-1].split()
            return int(fields[self.field]) if len(fields) > self.field else 0
        if self.key is None:
            return int(text.strip() or 0) if text.strip().isdigit() else 0
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name == self.key:
                return int(value)
        return 0

    def close(self) -> None:
        """Close the file now (idempotent)."""
        self._closer()
        self._fd = None


def limit_cpu(cgroup: Path, cpus: float) -> None:
    """Cap ``cgroup`` (a fresh directory) at ``cpus`` cores; OSError when refused."""
    period = 100_000
    quota = max(1000, int(cpus * period))
    if (cgroup / "cpu.max").exists():  # v2
        (cgroup / "cpu.max").write_text(f"{quota} {period}")
        return
    (cgroup / "cpu.cfs_period_us").write_text(str(period))
    (cgroup / "cpu.cfs_quota_us").write_text(str(quota))


def oom_counter(cgroup: Path | None) -> Counter:
    """A :class:`Counter` of the OOM kills in ``cgroup`` (v2 ``memory.events``, v1 ``memory.oom_control``)."""
    if cgroup is None:
        return Counter(None)
    for name in ("memory.events", "memory.oom_control"):
        if (cgroup / name).exists():
            return Counter(cgroup / name, "oom_kill")
    return Counter(None)


def cgroup_of(pid: int | None, controller: str, probe: str) -> Path | None:
    """The ``controller`` cgroup directory (v1, else v2 holding ``probe``) of host process ``pid``, or None."""
    if pid is None:
        return None
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            found = _ROOT / controller / path.lstrip("/")
            return found if found.is_dir() else None
    for line in lines:
        if line.startswith("0::"):
            found = _ROOT / line[3:].lstrip("/")
            return found if (found / probe).exists() else None
    return None


def memory_cgroup_of(pid: int | None) -> Path | None:
    """The memory cgroup directory of host process ``pid`` (e.g. a container's init), or None."""
    return cgroup_of(pid, "memory", "memory.events")


_NEVER_CROSSED = 1 << 60  # bytes: a usage threshold no cgroup reaches (its event only says the cgroup went)


class OomWatch:
    """OOM notices of a v1 memory cgroup that can still be told after the cgroup is gone.

    A container that exits on its own has its cgroup — and the kernel's ``oom_kill`` count in it — removed by
    its engine, often before the service reads it. Two eventfds registered through ``cgroup.event_control``
    outlive it: ``removal`` on a usage threshold never crossed (signalled once, when the cgroup goes), then
    ``notices`` on ``memory.oom_control`` (signalled once when the cgroup goes, and at each OOM of the cgroup or
    of an ancestor that won the OOM lock — before the kill; the engine's own flag counts the same). At removal
    the kernel queues the events' removal work newest first on the per-CPU system work queue, and ``notices``'
    removal takes no sleeping lock while ``removal``'s does: once ``removal`` fired, ``notices`` holds its own
    removal signal, so its count less one is the OOMs. That order is the kernel's implementation (memcg v1's
    event removal), not its promise: were it to change, an OOM would be told False, never a clean exit True —
    and the caller still waits for the engine's flag after a False (docker/engine.py, ``oom_flag_settled``); measured in
    docs/benchmarks.md (stop 78). A count of ``oom_kill`` already past 0 at registration is an OOM too. v1 only
    (v2 has no event control): elsewhere :meth:`register` returns None."""

    def __init__(self, removal: int, notices: int, before: bool = False) -> None:
        self._removal = removal
        self._notices = notices
        self._before = before  # an OOM kill counted before the watch began
        self._removed = 0
        self._counted = 0
        # closed by close(), or when collected (a watch whose worker never came to be: a start cancelled)
        self._closer = weakref.finalize(self, _close_fds, [removal, notices])

    @classmethod
    def register(cls, cgroup: Path | None) -> OomWatch | None:
        """Watch v1 memory ``cgroup`` (registered now, while it exists; blocking: a usage threshold's registration
        waits for an RCU grace period, so never on an event loop); None when it cannot be watched."""
        if cgroup is None or not (cgroup / "cgroup.event_control").exists():
            return None
        fds: list[int] = []
        try:
            for name, extra in (("memory.usage_in_bytes", f" {_NEVER_CROSSED}"), ("memory.oom_control", "")):
                event = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
                fds.append(event)
                target = os.open(cgroup / name, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    (cgroup / "cgroup.event_control").write_text(f"{event} {target}{extra}")
                finally:
                    os.close(target)
        except OSError:
            _close_fds(fds)
            return None
        before = oom_counter(cgroup)
        try:
            return cls(fds[0], fds[1], before.read() > 0)
        finally:
            before.close()

    def verdict(self) -> bool | None:
        """Whether the cgroup had an OOM: True as soon as that is certain, False once the cgroup is gone
        without one, None while it cannot be told yet (the cgroup exists, or its removal is on its way)."""
        self._removed += self._drain(self._removal)
        self._counted += self._drain(self._notices)
        if self._before or self._counted > 1:
            return True
        return False if self._removed else None

    @staticmethod
    def _drain(fd: int) -> int:
        try:
            return os.eventfd_read(fd)
        except OSError:  # nothing signalled since the last read (EAGAIN), or closed
            return 0

    def close(self) -> None:
        """Close both eventfds (the kernel drops its events with the cgroup); idempotent."""
        self._closer()
        self._removal = self._notices = -1


def _close_fds(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
