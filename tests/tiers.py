"""``make test``'s runner: the parallel tier, then the serial one, each timed; fails when either fails.

* **parallel**: every test not marked ``serial``, on ``--workers`` pytest-xdist processes (default 1: one
  process; on the 2-core machine 4 took as long and overloaded it, see docs/architecture.md), whole
  files per worker (``--dist loadgroup``, a group a file: a module's started service is made once; the tests
  of a few heavy files that share nothing are handed out one by one), the heaviest files
  handed out first (``tests/support/schedule.py``). Each worker is a test session of its own: its own
  PostgreSQL, its own data dirs, its own container label (``tests/support/backends.py``).
* **serial**: the tests marked ``serial`` (they change what every test on the machine shares: the Docker
  engine restarted, both cores loaded), alone, after the parallel tier.

Arguments after ``--`` go to both pytest runs (``make test PYTEST_ARGS=...``). A tier that selects no test
(pytest's exit 5, e.g. ``PYTEST_ARGS=tests/unit``) is not a failure — unless neither tier ran a test:
a run that compared nothing is not a success. Each tier's wall time is printed at the end (the figures
docs/benchmarks.md quotes per tier).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

NO_TESTS = 5  # pytest's exit status when nothing was collected or selected


def run(name: str, args: list[str]) -> tuple[int, float]:
    """Run one tier's pytest; its exit status and wall seconds."""
    print(f"== tier {name}: pytest {' '.join(args)}", flush=True)
    started = time.monotonic()
    status = subprocess.run([sys.executable, "-m", "pytest", *args], check=False).returncode
    return status, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=int(os.environ.get("TEST_WORKERS", "1")))
    parser.add_argument("pytest_args", nargs="*", help="arguments given to both tiers' pytest")
    options = parser.parse_args(argv)
    workers = ["-n", str(options.workers), "--dist", "loadgroup"] if options.workers > 1 else []
    tiers = [
        ("parallel", [*workers, "-m", "not serial", *options.pytest_args]),
        ("serial", ["-m", "serial", *options.pytest_args]),
    ]
    results = [(name, *run(name, args)) for name, args in tiers]
    ran = [status for _, status, _ in results if status != NO_TESTS]
    for name, status, seconds in results:
        said = "no test selected" if status == NO_TESTS else ("passed" if status == 0 else f"FAILED (exit {status})")
        print(f"== tier {name}: {said} in {seconds:.0f} s", flush=True)
    if not ran:
        print("== no test ran in any tier: nothing was checked", flush=True)
        return NO_TESTS
    return next((status for status in ran if status != 0), 0)


if __name__ == "__main__":
    sys.exit(main())
