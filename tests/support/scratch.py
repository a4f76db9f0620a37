"""Where a ``make test`` run writes its scratch files: the folder its tiers get as ``TMPDIR``.

Every test's ``tmp_path`` (pytest's base folder is under ``TMPDIR``), the data dirs, package stores and
runtimes of the services the tests start, their throwaway PostgreSQL clusters and Redis servers, the
browsers' profiles: a run creates and removes hundreds of thousands of files. On a disk whose metadata
is slow (this 2-core machine's ext4: creating a file or a folder costs 25–90 µs at best and ~1 ms for
minutes at a time, where a tmpfs costs 9–31 µs: docs/benchmarks.md) that is time the tests spend
waiting on the disk, not testing. So by default the run's scratch is a fresh folder on the machine's
memory file system (``/dev/shm``), removed when the run ends — where that is a tmpfs that allows
executables (a runtime's native libraries are mapped executable from it), is writable, and has room
(:data:`NEEDED_FREE`, with as much memory available: a tmpfs' pages are memory).

``TEST_TMPDIR`` decides instead: a folder (the run's scratch is a fresh folder in it, removed at the
end), or ``disk`` (the environment's own ``TMPDIR``, as before). Nothing else changes: each test
still makes its own folders below it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["NEEDED_FREE", "SETTING", "memory_tmpfs", "run_scratch"]

SETTING = "TEST_TMPDIR"
SHM = Path("/dev/shm")
# what a whole run's scratch took at its peak, with room to spare (docs/architecture.md, "How make test runs")
NEEDED_FREE = 8 << 30


def _mount_options(path: Path) -> tuple[str, set[str]] | None:
    """(file system type, mount options) of the mount point ``path`` is (None: not one)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    found = None
    for line in lines:  # the last mount at a point is the one seen there
        fields = line.split(" ")
        if len(fields) > 9 and fields[4] == str(path):
            dash = fields.index("-")
            found = (fields[dash + 1], set(fields[5].split(",")))
    return found


def _available_memory() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def memory_tmpfs(path: Path = SHM, needed: int = NEEDED_FREE) -> Path | None:
    """``path`` when it is a writable tmpfs mount that allows executables, with ``needed`` bytes free and as
    many of memory available; None otherwise."""
    mount = _mount_options(path)
    if mount is None or mount[0] != "tmpfs" or "noexec" in mount[1] or "ro" in mount[1]:
        return None
    if not os.access(path, os.W_OK | os.X_OK):
        return None
    try:
        free = shutil.disk_usage(path).free
    except OSError:
        return None
    return path if free >= needed and _available_memory() >= needed else None


@contextmanager
def run_scratch(environ: dict[str, str] | None = None) -> Iterator[Path | None]:
    """The folder a run's tiers get as ``TMPDIR`` (see the module docstring), removed when the block ends;
    None: the environment's own ``TMPDIR`` (``TEST_TMPDIR=disk``, or no memory file system with room)."""
    env = os.environ if environ is None else environ
    chosen = env.get(SETTING, "")
    if chosen == "disk":
        parent = None
    elif chosen:
        parent = Path(chosen)
        parent.mkdir(parents=True, exist_ok=True)
    else:
        parent = memory_tmpfs()
    if parent is None:
        yield None
        return
    folder = Path(tempfile.mkdtemp(prefix="evh-", dir=parent))
    folder.chmod(0o1777)  # as /tmp: anyone may make a folder of their own in it, none remove another's
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
