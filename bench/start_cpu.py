"""The CPU a start costs (issue 49): the package's import, a service's start, a CLI command's.

Every test that starts the real service or runs the CLI as a subprocess pays these, so they are a floor of
``make test``'s CPU. Measured in fresh processes, CPU seconds (user + sys of the process and the children it
reaped, ``os.wait4``), medians of ``--runs`` each, the trees compared taking turns (a burst of load shifts them
alike):

- ``import``: ``python -c "import evaluator_host.api.app"``;
- ``serve to healthy``: ``python -m evaluator_host.cli serve`` (process backend, a fresh data dir) from its exec
  until ``/healthz`` answers 200 (the process's own CPU then, ``/proc``); ``serve start+stop``: until it has
  exited on SIGTERM (``os.wait4``: its reaped children included);
- ``cli --help``: ``python -m evaluator_host.cli --help``;
- ``cli rules list``: ``python -m evaluator_host.cli rules list --server URL`` against one running service.

    PYTHONPATH=. .venv/bin/python -m bench.start_cpu [--runs 5] [--tree LABEL=PATH ...]

Each ``--tree`` is a checkout whose package the processes import (``PYTHONPATH``, ``cwd``); none: this one.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile

from bench.common import free_port, serving, tree_parser, trees_of, wait_healthy
from bench.procs import cpu_s

WHAT = ("import evaluator_host.api.app", "serve to healthy", "serve start+stop", "cli --help", "cli rules list")


def _env(tree: str, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": tree, **extra}


def _cpu_of(argv: list[str], tree: str) -> float:
    """User + sys CPU seconds of ``argv`` run to its end (its reaped children included)."""
    proc = subprocess.Popen(argv, cwd=tree, env=_env(tree), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv} exited with {proc.returncode}")
    return usage.ru_utime + usage.ru_stime


def _serve_once(tree: str) -> tuple[float, float]:
    """(CPU until /healthz answers 200, CPU until exited on SIGTERM) of one fresh service of ``tree``."""
    with tempfile.TemporaryDirectory(prefix="evaluator-host-startcpu-") as data_dir:
        port = free_port()
        env = _env(tree, EVALUATOR_HOST_DATA_DIR=data_dir, EVALUATOR_HOST_BACKEND="process")
        argv = [sys.executable, "-m", "evaluator_host.cli", "serve", "--port", str(port), "--log-level", "warning"]
        proc = subprocess.Popen(argv, cwd=tree, env=env)
        try:
            wait_healthy(f"http://127.0.0.1:{port}", proc, "the service", every_s=0.02)
        except RuntimeError:
            proc.kill()
            raise
        healthy = cpu_s(proc.pid)
        proc.send_signal(signal.SIGTERM)
        _, _, usage = os.wait4(proc.pid, 0)
        proc.returncode = 0
        return healthy, usage.ru_utime + usage.ru_stime


def measure(trees: dict[str, str], runs: int) -> dict[str, dict[str, list[float]]]:
    """Every figure of :data:`WHAT` for each tree, ``runs`` times, the trees taking turns."""
    py = sys.executable
    figures = {label: {what: [] for what in WHAT} for label in trees}
    with tempfile.TemporaryDirectory(prefix="evaluator-host-startcpu-") as data_dir:
        with serving(data_dir, {"EVALUATOR_HOST_BACKEND": "process"}) as (base, _):
            for _ in range(runs):
                for label, tree in trees.items():
                    row = figures[label]
                    row[WHAT[0]].append(_cpu_of([py, "-c", "import evaluator_host.api.app"], tree))
                    healthy, stopped = _serve_once(tree)
                    row[WHAT[1]].append(healthy)
                    row[WHAT[2]].append(stopped)
                    row[WHAT[3]].append(_cpu_of([py, "-m", "evaluator_host.cli", "--help"], tree))
                    rules = [py, "-m", "evaluator_host.cli", "rules", "list", "--server", base]
                    row[WHAT[4]].append(_cpu_of(rules, tree))
    return figures


def main() -> None:
    parser = tree_parser(__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    trees = trees_of(args.tree)
    load = os.getloadavg()
    figures = measure(trees, args.runs)
    after = os.getloadavg()[0]
    print(f"load average (1, 5, 15 min) before: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; after: {after:.1f} (1 min)")
    print(f"| CPU s, median of {args.runs} (min-max) | " + " | ".join(trees) + " |")
    print("|---|" + "---|" * len(trees))
    for what in WHAT:
        cells = [
            f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})" for xs in (figures[t][what] for t in trees)
        ]
        print(f"| {what} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
