"""Processes an evaluation leaves behind, found and killed from the host — not from inside the sandbox.

A worker lives in a pid namespace of its own under an init (the process backend's
``runtimes/sandbox_init.py`` as pid 1, docker's ``--init``); the harness is the init's first
child. Anything else in the namespace was started by user code. The harnesses kill such
strays themselves after each case, but that code runs where user code can patch it (a
replaced method, a ``ChildProcess`` that bypasses the wrapped functions), so the pool also
asks the host after every batch: the host walks the process tree under the init through
``/proc`` (which user code cannot reach), kills every process but the init and the harness,
and waits until they are gone before the worker serves anyone again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

from evaluator_host.sandbox.cgroups import Counter

__all__ = ["StrayReaper", "children"]

_GONE_WITHIN_S = 2.0


def children(pid: int) -> list[int]:
    """Host pids of ``pid``'s children (every thread's)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                found += [int(p) for p in fh.read().split()]
        except OSError:
            continue
    return found


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time) of ``pid``, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[19])


def _alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


class StrayReaper:
    """Kills what runs in a worker's namespace besides its init and harness (host pids).

    With ``pids`` (the worker's ``pids.current``: every task of its processes), the common case
    costs two reads, not a walk of ``/proc``: when the tasks are exactly the init's one and the
    harness's threads, nothing else runs.
    """

    def __init__(self, init_pid: int | None, pids: Counter | None = None) -> None:
        self.init_pid = init_pid if init_pid and _stat(init_pid) is not None else None
        self._harness: int | None = None
        self._pids = pids
        self._harness_stat: Counter | None = None  # /proc/<harness>/stat, kept open

    def strays(self) -> list[int]:
        """Host pids of the live processes under the init other than the harness (its oldest child)."""
        if self.init_pid is None:
            return []
        top = children(self.init_pid)
        if not top:
            return []
        if self._harness is None or self._harness not in top:
            started = {pid: stat[1] for pid in top if (stat := _stat(pid)) is not None}
            if not started:
                return []
            self._harness = min(started, key=lambda p: started[p])
        found, todo = [], [p for p in top if p != self._harness] + children(self._harness)
        while todo:
            pid = todo.pop()
            if _alive(pid):
                found.append(pid)
            todo += children(pid)
        return found

    async def reap(self) -> bool:
        """Kill every stray and wait until they are gone; False when some outlived the wait
        (the caller then discards the worker) or could not be signalled."""
        if self.init_pid is None:
            return True
        if self._pids is not None and self._harness is not None:
            if self._harness_stat is None:
                self._harness_stat = Counter(Path(f"/proc/{self._harness}/stat"), field=17)
            tasks = self._pids.read()
            threads = self._harness_stat.read()
            if tasks and threads and tasks <= 1 + threads:  # the init and the harness's threads: nothing else
                return True
        pids = self.strays()
        if not pids:
            return True
        deadline = time.monotonic() + _GONE_WITHIN_S
        while pids:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                except PermissionError:
                    return False
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.002)
            with contextlib.suppress(OSError):
                pids = self.strays()
        return True
