"""Processes a test started: stopping one (SIGTERM, then SIGKILL when it outlives the grace period); whether
one is blocked reading its stdin."""

from __future__ import annotations

import os
import subprocess
from typing import Any

_READ = {"x86_64": 0, "aarch64": 63}  # the read(2) syscall's number


def reading_stdin(pid: int) -> bool:
    """Whether process ``pid`` is blocked in ``read(0, …)`` now (``/proc/PID/syscall``: the syscall's number and
    first argument): e.g. a janitor that has started and waits for its service's end, not one still importing."""
    number = _READ.get(os.uname().machine)
    if number is None:
        return True  # another architecture: read(2)'s number unknown here, so no wait (as before this check)
    try:
        with open(f"/proc/{pid}/syscall") as f:
            fields = f.read().split()
    except OSError:
        return False
    return len(fields) > 1 and fields[0] == str(number) and fields[1] == "0x0"


def stop_process(proc: subprocess.Popen[Any] | None, grace_s: float = 30.0) -> None:
    """Terminate ``proc`` when it still runs and reap it; killed after ``grace_s`` seconds."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
