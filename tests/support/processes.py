"""Stopping a process a test started: SIGTERM, then SIGKILL when it outlives the grace period."""

from __future__ import annotations

import subprocess
from typing import Any


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
