"""The CPU an idle service burns (issue 49): ``serve`` with nothing to do, on SQLite and on PostgreSQL.

Every background loop of a service (assembly, routing, scoring, backfill planning, sink delivery, job adoption,
leases, workspace sync, retention) looks for work on a timer; a service nobody uses still pays each look. The
test suite keeps dozens of services alive at once, and replicas pay it too. Measured here: a fresh service
(process backend) is started, left ``--settle`` seconds (its start-up done and its loops backed off to their
idle pace), then its CPU (user + sys of the service and every process under it, ``/proc``) is read over
``--seconds`` seconds of nothing; figures are CPU milliseconds per wall second (10 ms/s = 1 % of a core),
medians of ``--runs``, the trees compared taking turns.

    PYTHONPATH=. .venv/bin/python -m bench.idle_cpu [--runs 3] [--seconds 20] [--tree LABEL=PATH ...]

Each ``--tree`` is a checkout whose package the service imports (``PYTHONPATH``, ``cwd``); none: this one.
PostgreSQL is a throwaway server (``tests/support/pg.py``); without one the section has SQLite only.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from typing import Any

from bench.common import REPO, serving, tree_parser, trees_of
from bench.procs import tree_cpu_s

HEADING = "## An idle service's CPU"


def idle_ms_per_s(tree: str, database_url: str | None, settle_s: float, seconds: float) -> float:
    """CPU ms per second of one fresh idle service of ``tree`` (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="evaluator-host-idle-") as data_dir:
        env = {"PYTHONPATH": tree, "EVALUATOR_HOST_BACKEND": "process"}
        if database_url:
            env["EVALUATOR_HOST_DATABASE_URL"] = database_url
        with serving(data_dir, env, cwd=tree) as (_base, proc):
            time.sleep(settle_s)
            cpu0, t0 = tree_cpu_s(proc.pid), time.monotonic()
            time.sleep(seconds)
            cpu1, t1 = tree_cpu_s(proc.pid), time.monotonic()
    return (cpu1 - cpu0) * 1000 / (t1 - t0)


def _postgres() -> tuple[Any, Any] | tuple[None, None]:
    """A throwaway PostgreSQL server (tests/support/pg.py) and a factory of fresh databases' URLs."""
    sys.path.insert(0, str(REPO))
    try:
        from tests.support.pg import Cluster

        cluster = Cluster()
    except Exception as exc:  # no PostgreSQL binaries here: SQLite only
        print(f"idle_cpu: no PostgreSQL ({exc})", file=sys.stderr)
        return None, None
    return cluster, cluster.database


def measure(
    trees: dict[str, str] | None = None, runs: int = 3, seconds: float = 20.0, settle_s: float = 5.0
) -> dict[str, dict[str, list[float]]]:
    """{database: {tree label: [ms per s, one per run]}}, the trees taking turns."""
    trees = trees or trees_of([])
    figures: dict[str, dict[str, list[float]]] = {"SQLite": {t: [] for t in trees}}
    cluster, fresh = _postgres()
    if cluster is not None:
        figures["PostgreSQL"] = {t: [] for t in trees}
    try:
        for _ in range(runs):
            for label, tree in trees.items():
                figures["SQLite"][label].append(idle_ms_per_s(tree, None, settle_s, seconds))
                if cluster is not None:
                    figures["PostgreSQL"][label].append(idle_ms_per_s(tree, fresh(), settle_s, seconds))
    finally:
        if cluster is not None:
            cluster.stop()
    return figures


def table(figures: dict[str, dict[str, list[float]]]) -> str:
    trees = list(next(iter(figures.values())))
    lines = ["| idle CPU ms per s, median (min-max) | " + " | ".join(trees) + " |", "|---|" + "---|" * len(trees)]
    for db, per_tree in figures.items():
        cells = [f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})" for xs in per_tree.values()]
        lines.append(f"| {db} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render(figures: dict[str, dict[str, list[float]]], load: float) -> str:
    """The docs/benchmarks.md section."""
    return (
        f"\n{HEADING}\n\n"
        "`bench/idle_cpu.py`: a fresh `serve` (process backend) with nothing to do, left 5 s to settle, then its "
        "CPU (the service and its children, user + sys) over 20 s, in CPU milliseconds per second (10 = 1 % of a "
        "core). Its background loops back off while they find nothing (docs/architecture.md, *idle loops back "
        f"off*). Load average at the start: {load:.1f}.\n\n" + table(figures) + "\n"
    )


def main() -> None:
    parser = tree_parser(__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--settle", type=float, default=5.0)
    args = parser.parse_args()
    trees = trees_of(args.tree)
    load = os.getloadavg()
    figures = measure(trees, args.runs, args.seconds, args.settle)
    after = os.getloadavg()[0]
    print(f"load average (1, 5, 15 min) before: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; after: {after:.1f} (1 min)")
    print(table(figures))


if __name__ == "__main__":
    main()
