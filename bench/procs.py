"""Process helpers of the benches: a process's CPU seconds, its descendants, py-spy recording them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["cpu_s", "descendants", "spy"]


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descendants(root: int) -> list[int]:
    """``root`` and every process under it (the service and its sandboxes' processes)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    children.setdefault(int(fh.read().rsplit(")", 1)[1].split()[1]), []).append(int(name))
            except OSError:
                pass
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def tree_cpu_s(root: int) -> float:
    """CPU seconds (user + sys) of ``root`` and every process under it now; a process that ended meanwhile
    counts nothing."""
    total = 0.0
    for pid in descendants(root):
        try:
            total += cpu_s(pid)
        except OSError:
            pass  # ended meanwhile
    return total


def spy(pids: list[int]) -> list[subprocess.Popen[bytes]]:
    """py-spy (the venv's) recording ``pids`` for 5 s, raw stacks in /tmp/async-spy-PID.txt
    (``ASYNC_BENCH_SPY=1``: how the section's profile was taken)."""
    spy = str(Path(sys.executable).with_name("py-spy"))
    return [
        subprocess.Popen(
            [
                spy,
                "record",
                "-p",
                str(pid),
                "-d",
                "5",
                "-r",
                "250",
                "-f",
                "raw",
                "-o",
                f"/tmp/async-bench-spy-{pid}.txt",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for pid in pids
    ]
