"""This machine's price of waking another process: a pipe round trip to a forked echo process after an idle gap.

A warm call by id crosses from the service to its worker's process and back (a pipe each way): two wake-ups of a
sleeping process that a bare endpoint never pays. On a virtual machine a wake-up of a process whose CPU went idle
costs an inter-processor interrupt through the hypervisor, and that price moves with the host's load, not with
this service's code: :func:`round_trip` measures it in the same run as the figures it explains
(``bench/byid_bench.py``). The gap before each round trip (``gap_us``, about a call by id's HTTP turn-around) lets
both processes go idle first, as they do between one client's calls; each process may run on either CPU, as the
service and its workers do.

Run alone: ``.venv/bin/python -m bench.wakeups [N] [GAP_US]``.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class RoundTrip:
    """Percentiles (µs) of ``n`` round trips after ``gap_us`` of idleness each."""

    n: int
    gap_us: int
    p50_us: float
    p90_us: float


def round_trip(n: int = 3000, gap_us: int = 300) -> RoundTrip:
    """``n`` one-byte round trips through two pipes to a forked echo process, each after ``gap_us`` of sleep."""
    to_child, from_parent = os.pipe()
    from_child, to_parent = os.pipe()
    pid = os.fork()
    if pid == 0:  # the echo: read a byte, write it back; end on EOF
        try:
            os.close(from_parent)
            os.close(from_child)
            while message := os.read(to_child, 64):
                os.write(to_parent, message)
        finally:
            os._exit(0)
    os.close(to_child)
    os.close(to_parent)
    took: list[int] = []
    try:
        for _ in range(n):
            time.sleep(gap_us / 1e6)
            start = time.perf_counter_ns()
            os.write(from_parent, b"x")
            os.read(from_child, 64)
            took.append(time.perf_counter_ns() - start)
    finally:
        os.close(from_parent)  # the echo's EOF
        os.waitpid(pid, 0)
        os.close(from_child)
    took.sort()
    return RoundTrip(n, gap_us, took[len(took) // 2] / 1000, took[int(len(took) * 0.9)] / 1000)


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    measured = round_trip(*args)
    print(f"pipe round trip to another process after {measured.gap_us} µs idle: p50 {measured.p50_us:.1f} µs, "
          f"p90 {measured.p90_us:.1f} µs ({measured.n} round trips)")  # fmt: skip
