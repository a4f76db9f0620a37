"""Processes an evaluation leaves behind, found and killed from the host — not from inside the sandbox.

A worker lives in a pid namespace of its own under an init (the process backend's
``runtimes/sandbox_init.py`` as pid 1, docker's ``--init``); the harness is the init's first
child. Anything else in the namespace was started by user code. The harnesses kill such
strays themselves after each case, but that code runs where user code can patch it (a
replaced method, a ``ChildProcess`` that bypasses the wrapped functions), so the pool also
asks the host after every batch: the host walks the process tree under the init through
``/proc`` (which user code cannot reach), kills every process but the init and the harness,
and waits until they are gone before the worker serves anyone again.

A pid found by the walk may exit and be reused by an unrelated process before the signal is sent
(start times cannot tell them apart: they tick at 10 ms). So the walk takes a pidfd for each
stray while it verifies it (:func:`member`: the pidfd first, then the pid's parent is checked to
be in the tree, then the pidfd is checked to still reach a process, so the check was about the
process the pidfd names), and the stray is signalled through that pidfd only (:func:`kill`): a
process that has exited meanwhile answers ``ProcessLookupError``; a pid reused meanwhile is
never signalled.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from evaluator_host.sandbox.cgroups import Counter

__all__ = ["StrayReaper", "children", "kill", "member", "of_uid", "reap_uid"]

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


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, start time, parent pid) of ``pid``, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[19]), int(fields[1])


def member(pid: int, parents: set[int]) -> int | None:
    """A pidfd for ``pid``, taken while ``pid`` is verified to be a live child of one of ``parents``
    (the caller closes it); None when it is not (gone, a zombie, or another process's child)."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    try:
        stat = _stat(pid)
        if stat is not None and stat[0] not in ("Z", "X") and stat[2] in parents:
            signal.pidfd_send_signal(fd, 0)  # the pidfd's process still lives: the check was about it
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def kill(pidfd: int, sig: int = signal.SIGKILL) -> bool:
    """Signal the process behind ``pidfd``; False when it has exited (never another process).
    ``PermissionError`` propagates."""
    try:
        signal.pidfd_send_signal(pidfd, sig)
    except ProcessLookupError:
        return False
    return True


def _uids(pid: int) -> tuple[set[int], str] | None:
    """(real, effective, saved and file-system uids, state) of ``pid``; None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in lines if ":" in line)
    try:
        return {int(u) for u in fields["Uid"].split()}, fields["State"].split()[0]
    except (KeyError, ValueError, IndexError):
        return None


def of_uid(uid: int, but: int | None = None) -> list[int]:
    """Pidfds (the caller closes them) of the live processes running with ``uid`` (any of their uids),
    ``but`` excepted; each verified as such after its pidfd was taken, as :func:`member` does. A worker of
    the rlimits-only mode has no pid namespace: its uid, its own, is what tells its processes apart."""
    found: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == but:
            continue
        seen = _uids(int(name))  # a first look without a pidfd: most processes are someone else's
        if seen is None or uid not in seen[0]:
            continue
        try:
            fd = os.pidfd_open(int(name))
        except OSError:
            continue
        try:
            seen = _uids(int(name))
            if seen is not None and uid in seen[0] and seen[1] not in ("Z", "X"):
                signal.pidfd_send_signal(fd, 0)
                found.append(fd)
                continue
        except OSError:
            pass
        os.close(fd)
    return found


async def reap_uid(uid: int, but: int | None = None) -> bool:
    """Kill every process of ``uid`` (``but`` excepted) through pidfds and wait until they are gone;
    False when some outlived the wait or could not be signalled."""
    return await _kill_until_gone(lambda: of_uid(uid, but), pause=0.005)


async def _kill_until_gone(find: Callable[[], list[int]], pause: float) -> bool:
    """SIGKILL every pidfd ``find`` returns, again until it returns none (True) or for at most
    :data:`_GONE_WITHIN_S` (False); False at once when one cannot be signalled. After the first
    look, ``find`` raising ``OSError`` counts as finding none. Every pidfd taken is closed."""
    deadline = time.monotonic() + _GONE_WITHIN_S
    pidfds = find()
    try:
        while pidfds:
            for fd in pidfds:
                try:
                    kill(fd)
                except PermissionError:
                    return False
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(pause)
            _close(pidfds)
            pidfds = []
            with contextlib.suppress(OSError):
                pidfds = find()
        return True
    finally:
        _close(pidfds)


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
        """Pidfds (the caller closes them) of the live processes under the init other than the harness
        (its oldest child), each verified as a member of the tree when taken."""
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
        tree = {self.init_pid, self._harness}
        found, todo = [], [p for p in top if p != self._harness] + children(self._harness)
        while todo:
            pid = todo.pop()
            if (fd := member(pid, tree)) is not None:
                found.append(fd)
                tree.add(pid)
            todo += children(pid)
        return found

    async def reap(self) -> bool:
        """Kill every stray and wait until they are gone; False when some outlived the wait
        (the caller then discards the worker) or could not be signalled."""
        if self.init_pid is None:
            return True
        if self._pids is not None and self._harness is not None:
            tasks = self._pids.read()
            if 0 < tasks <= 2:  # the init and the harness (a thread each, at least): nothing else
                return True
            if self._harness_stat is None:
                self._harness_stat = Counter(Path(f"/proc/{self._harness}/stat"), field=17)
            threads = self._harness_stat.read()
            if tasks and threads and tasks <= 1 + threads:  # the init and the harness's threads: nothing else
                return True
        return await _kill_until_gone(self.strays, pause=0.002)

    def close(self) -> None:
        """Close the harness's stat file, if it was opened (idempotent)."""
        if self._harness_stat is not None:
            self._harness_stat.close()
            self._harness_stat = None


def _close(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
