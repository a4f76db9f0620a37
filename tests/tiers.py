"""``make test``'s runner: the parallel tier, then the serial one, each timed; fails when either fails.

* **parallel**: every test not marked ``serial``, on ``--workers`` pytest-xdist processes (``make test`` passes
  ``TEST_WORKERS``, 2 by default, one a core of the 2-core machine; 1 is one process without xdist; see
  docs/architecture.md), whole files per worker (``--dist loadfile``: a module's started service is made once),
  the heaviest files handed out first (both in ``tests/support/schedule.py``). Each worker is a test session
  of its own: its own PostgreSQL, its own data dirs, its own container label (``tests/support/backends.py``).
* **serial**: the tests marked ``serial`` (they change what every test on the machine shares: the Docker
  engine restarted, both cores loaded), alone, after the parallel tier.

Arguments after ``--`` go to both pytest runs (``make test PYTEST_ARGS=...``; ``PYTEST_ARGS="-p randomly"``
runs each tier in a random order, pytest-randomly, which ``pyproject.toml`` leaves off otherwise; the seed is
printed at the top, ``-p randomly --randomly-seed=N`` repeats an order). A tier that selects no test
(pytest's exit 5, e.g. ``PYTEST_ARGS=tests/unit``) is not a failure — unless neither tier ran a test:
a run that compared nothing is not a success. Each tier's wall time is printed at the end (the figures
docs/benchmarks.md quotes per tier), each failed test under it with its error in a line (a long
traceback pushes that out of a log's visible end), after the files that took longest in it (their tests' setup, call and
teardown summed, from the tier's JUnit XML, kept in ``TEST_TIMINGS_DIR`` when set) and the files that cost
most CPU (``tests/support/cpu.py``: each pytest process writes its own, every xdist worker too): where the
time goes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tests.support.cpu import CPU_DIR, file_cpu
from tests.support.schedule import shuffled_with_a_seed, worker_args
from tests.support.timings import failures, file_seconds

NO_TESTS = 5  # pytest's exit status when nothing was collected or selected


SLOWEST_FILES = 15


def run(name: str, args: list[str], timings: Path) -> tuple[int, float, list[tuple[str, str]]]:
    """Run one tier's pytest; its exit status, wall seconds and failures (test, error); then print its slowest
    files, when it ran any."""
    print(f"== tier {name}: pytest {' '.join(args)}", flush=True)
    report = timings / f"{name}.xml"
    cpu = timings / f"{name}-cpu"
    shutil.rmtree(cpu, ignore_errors=True)  # a kept folder's earlier run
    env = {**os.environ, CPU_DIR: str(cpu)}
    started = time.monotonic()
    argv = [sys.executable, "-m", "pytest", "-p", "tests.support.cpu", f"--junitxml={report}", *args]
    status = subprocess.run(argv, check=False, env=env).returncode
    seconds = time.monotonic() - started
    failed: list[tuple[str, str]] = []
    if report.is_file():
        junit = report.read_text()
        failed = failures(junit)
        slowest = file_seconds(junit).most_common(SLOWEST_FILES)
        if slowest:
            print(f"== tier {name}: its {len(slowest)} slowest files (seconds of test time)", flush=True)
            for path, spent in slowest:
                print(f"{spent:9.1f}  {path}", flush=True)
    spent_cpu = file_cpu(cpu) if cpu.is_dir() else Counter[str]()
    if spent_cpu:
        costliest = spent_cpu.most_common(SLOWEST_FILES)
        total = sum(spent_cpu.values())
        print(
            f"== tier {name}: {total:.0f} s of CPU in its test processes (containers not counted); "
            f"the {len(costliest)} costliest files (seconds of CPU)",
            flush=True,
        )
        for path, spent in costliest:
            print(f"{spent:9.1f}  {path}", flush=True)
    return status, seconds, failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=int(os.environ.get("TEST_WORKERS", "1")))
    parser.add_argument("pytest_args", nargs="*", help="arguments given to both tiers' pytest")
    options = parser.parse_args(argv)
    workers = worker_args(options.workers)
    pytest_args = shuffled_with_a_seed(options.pytest_args)
    tiers = [
        ("parallel", [*workers, "-m", "not serial", *pytest_args]),
        ("serial", ["-m", "serial", *pytest_args]),
    ]
    kept = os.environ.get("TEST_TIMINGS_DIR")
    timings = Path(kept) if kept else Path(tempfile.mkdtemp(prefix="evaluator-host-tiers-"))
    timings.mkdir(parents=True, exist_ok=True)
    results = [(name, *run(name, args, timings)) for name, args in tiers]
    ran = [status for _, status, _, _ in results if status != NO_TESTS]
    for name, status, seconds, failed in results:
        said = "no test selected" if status == NO_TESTS else ("passed" if status == 0 else f"FAILED (exit {status})")
        print(f"== tier {name}: {said} in {seconds:.0f} s", flush=True)
        for test, error in failed:  # last: the end of a long log is what its reader sees
            print(f"   failed: {test}\n     {error}", flush=True)
    if not ran:
        print("== no test ran in any tier: nothing was checked", flush=True)
        return NO_TESTS
    return next((status for status in ran if status != 0), 0)


if __name__ == "__main__":
    sys.exit(main())
