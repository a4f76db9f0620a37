"""Helpers shared by the benchmark sections."""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
INPUTS = {"question": "2+2?", "correct_answer": "4"}


def tree_parser(doc: str | None) -> argparse.ArgumentParser:
    """The argument parser of a bench that compares source trees: described by ``doc``'s first line, with the
    repeatable ``--tree LABEL=PATH`` (read by :func:`trees_of`)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else "")
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=PATH")
    return parser


def trees_of(options: list[str]) -> dict[str, str]:
    """The ``--tree LABEL=PATH`` options as {label: path}; none given: this checkout."""
    return dict(t.split("=", 1) for t in options) or {"this tree": str(REPO)}


def pct(values: list[float], p: float) -> float:
    """The p-th percentile, linear interpolation between closest ranks."""
    xs = sorted(values)
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def status_mb(pid: int, key: str = "VmRSS") -> float | None:
    """A memory figure (``VmRSS``, ``VmHWM``) of ``/proc/<pid>/status`` in MB; None when the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def row(name: str, xs: list[float]) -> str:
    figures = " | ".join(f"{v:.2f}" for v in (pct(xs, 50), pct(xs, 90), pct(xs, 99), statistics.fmean(xs)))
    return f"| {name} | {len(xs)} | {figures} |"


@contextlib.contextmanager
def serve(backend: str) -> Iterator[tuple[str, str, subprocess.Popen[bytes]]]:
    """Start the real service on ``backend`` with a fresh data dir; yield (base URL, data dir, process)."""
    with tempfile.TemporaryDirectory(prefix="evaluator-host-bench-") as data_dir:
        with serving(data_dir, {"EVALUATOR_HOST_BACKEND": backend}) as (base, proc):
            yield base, data_dir, proc


def wait_healthy(
    base: str, proc: subprocess.Popen[bytes], what: str, timeout_s: float = 120, every_s: float = 0.1
) -> None:
    """Return once ``base``/healthz answers 200; RuntimeError naming ``what`` when ``proc`` exits first or
    ``timeout_s`` passes (the caller stops ``proc``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with code {proc.returncode}")
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not become healthy")
        time.sleep(every_s)


@contextlib.contextmanager
def serving(
    data_dir: str, env: dict[str, str], cwd: str | Path = REPO
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The real service (``evaluator-host serve``, started in ``cwd``: another source tree with its
    ``PYTHONPATH`` in ``env``) on ``data_dir`` with ``env`` added, once healthy; yield (base URL, process);
    terminated afterwards."""
    port = free_port()
    full = {**os.environ, **env, "EVALUATOR_HOST_DATA_DIR": data_dir}
    argv = [sys.executable, "-m", "evaluator_host.cli", "serve", "--port", str(port), "--log-level", "warning"]
    proc = subprocess.Popen(argv, cwd=cwd, env=full)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc, "the service")
        yield base, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Pace:
    """``ticks`` ticks of ``tick`` seconds from the first: iterating yields each tick's number, then sleeps until the
    next one is due (a feed at a fixed rate). ``start`` is when it began (``time.monotonic``); ``behind`` the most
    seconds a tick ended past its due time (a feed that could not keep up)."""

    def __init__(self, ticks: int, tick: float) -> None:
        self.ticks, self.tick = ticks, tick
        self.start, self.behind = time.monotonic(), 0.0

    def __iter__(self) -> Iterator[int]:
        self.start = time.monotonic()
        for n in range(self.ticks):
            yield n
            wait = self.start + (n + 1) * self.tick - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            else:
                self.behind = max(self.behind, -wait)
