"""The disk one package build may write (``build_max_disk_mb``), on both backends.

A build runs package code (an sdist's ``setup.py`` or build backend), which may write as much as it
likes where it may write at all: the partial runtime, its scratch folder, a build box's writable layer,
its own output (the live log on the host). Unbounded, one build filled the host's disk (issue 47, 8:
1 GiB in 5 s, kept in the runtime). Three things hold it to ``build_max_disk_mb``:

* **a file size limit** (``RLIMIT_FSIZE``; a build box's ``fsize`` ulimit) of the bound on every
  process of the build: no single file passes it, however fast it is written;
* **a watch while it runs**: the build's trees are measured (:func:`tree_usage`, bytes allocated,
  each inode once) at :class:`Pacer`'s pace — at least every :data:`MIN_INTERVAL_S`, never more
  than a tenth of the time with a large tree — and a build past the bound is killed (its whole process
  group, or every process of the build uid in its box) at once;
* **a check once it ended**, before anything of it is kept: what it wrote between two looks counts too.

Past the bound the build fails with :func:`exceeded` (a ``BuildError`` naming the bound and its
setting) and its partial folder, scratch and box are removed like any failed build's: nothing stays.
What a wheels-only build adds to the shared package store is not counted (no package code runs
there: the store holds the index's archives, unpacked); a file of it still meets the file size limit.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterable
from pathlib import Path

from evaluator_host.errors import BuildError

__all__ = ["MIN_INTERVAL_S", "Pacer", "exceeded", "tree_usage"]

MIN_INTERVAL_S = 0.25  # how often a small build's trees are measured
_SHARE = 10  # a large tree's measure takes at most 1/_SHARE of the time


def tree_usage(paths: Iterable[Path | str]) -> int:
    """Bytes on disk of everything under ``paths`` (files and folders; links themselves, never what
    they point to; each inode once, so hard links are not counted twice). What vanishes or cannot be
    read while it is walked is skipped: a build is changing the tree."""
    seen: set[tuple[int, int]] = set()
    total = 0
    todo = [str(path) for path in paths]
    while todo:
        path = todo.pop()
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if (info.st_dev, info.st_ino) in seen:
            continue
        seen.add((info.st_dev, info.st_ino))
        total += max(info.st_blocks * 512, 0)
        if stat.S_ISDIR(info.st_mode):
            try:
                with os.scandir(path) as listing:
                    todo.extend(entry.path for entry in listing)
            except OSError:
                continue
    return total


class Pacer:
    """When to measure next: every :data:`MIN_INTERVAL_S`, or — when one measure took long (a tree of
    many files) — ten times as long as it took, so watching costs a build at most a tenth of a core."""

    def __init__(self) -> None:
        self._next = 0.0

    def due(self) -> bool:
        """Whether a measure is due now."""
        return time.monotonic() >= self._next

    def measured(self, took_s: float) -> None:
        """Note that a measure just took ``took_s``."""
        self._next = time.monotonic() + max(MIN_INTERVAL_S, took_s * _SHARE)

    def wait_s(self, cap_s: float) -> float:
        """How long to wait for the next measure (at most ``cap_s``)."""
        return max(0.0, min(cap_s, self._next - time.monotonic()))


def exceeded(shown: str, runtime_id: str, limit_mb: int, used: int | None = None) -> BuildError:
    """The error of a build that passed the bound (``shown``: its pins as a user writes them)."""
    wrote = f"{used / (1 << 20):.0f} MiB, " if used is not None else ""
    reason = (
        f"the build wrote more to disk ({wrote}its files, output and scratch) than a build may: "
        f"{limit_mb} MiB (the build_max_disk_mb setting, EVALUATOR_HOST_BUILD_MAX_DISK_MB). It was stopped "
        "and nothing of it was kept."
    )
    return BuildError(f"installing {shown} failed:\n{reason}", runtime_id=runtime_id, output=reason)
