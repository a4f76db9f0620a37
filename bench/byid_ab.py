"""Warm evaluation by id, before/after in one run: the bare endpoint and one service per source tree, side by side.

``python -m bench.byid_ab TREE [TREE ...]`` starts the bare FastAPI + pydantic endpoint of
:data:`bench.load_bench.BARE_APP` and, for each ``TREE`` (a checkout of this repository, e.g. ``git archive
main | tar -x -C /tmp/before``), the service from that tree (``PYTHONPATH=TREE``, process backend, one warm
Python evaluator). Then ``BYID_ROUNDS`` rounds of ``BYID_SECONDS`` s: wrk with one keep-alive connection
measures the bare endpoint, then each tree (in reverse order every other round, so no tree always runs
right after the bare endpoint), so a neighbour's burst on this shared machine lands on all alike. Besides
p50, the CPU each request cost: the serving process's main thread, its other threads (the background
loops' database work), and its children (the harnesses), from ``/proc`` before and after each run.
Medians of the rounds at the end. What ``docs/benchmarks.md``'s by-id section quotes for a before/after.
"""

from __future__ import annotations

import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bench.common import free_port, wait_healthy
from bench.load_bench import _evaluators, bare_server, wrk

ROUNDS = int(os.environ.get("BYID_ROUNDS", "6"))
SECONDS = int(os.environ.get("BYID_SECONDS", "4"))
_TICK = os.sysconf("SC_CLK_TCK")


def _ticks(stat: Path) -> int:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            found += [int(child), *_children(int(child))]
    return found


def cpu(pid: int) -> tuple[int, int, int]:
    """Clock ticks of ``pid``'s main thread, of its other threads, and of its descendants alive now."""
    tasks = Path(f"/proc/{pid}/task")
    main = _ticks(tasks / str(pid) / "stat")
    other = sum(_ticks(t / "stat") for t in tasks.iterdir() if t.name != str(pid))
    kids = 0
    for child in _children(pid):
        with contextlib.suppress(OSError):
            kids += _ticks(Path(f"/proc/{child}/stat"))
    return main, other, kids


@contextlib.contextmanager
def service(tree: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The service of source tree ``tree`` on a fresh data dir, once healthy: (base URL, process)."""
    with tempfile.TemporaryDirectory(prefix="evaluator-host-ab-") as data_dir:
        port = free_port()
        env = {
            **os.environ,
            "PYTHONPATH": tree,
            "EVALUATOR_HOST_DATA_DIR": data_dir,
            "EVALUATOR_HOST_BACKEND": "process",
        }
        argv = [sys.executable, "-m", "evaluator_host.cli", "serve", "--port", str(port), "--log-level", "warning"]
        proc = subprocess.Popen(argv, cwd=tree, env=env)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(base, proc, tree)
            yield base, proc
        finally:
            proc.terminate()
            proc.wait(timeout=60)


def _pid_of(base: str) -> int:
    port = base.rsplit(":", 1)[1]
    out = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True, text=True, check=False).stdout
    found = re.search(r"pid=(\d+)", out)
    assert found is not None, out
    return int(found.group(1))


def main(trees: list[str]) -> None:
    with contextlib.ExitStack() as stack:
        bare_base, bare_path = stack.enter_context(bare_server())
        servers = []
        for tree in trees:
            base, proc = stack.enter_context(service(tree))
            servers.append((Path(tree).name, base, proc.pid, _evaluators(base, ["python"])))
        bare = ("bare", bare_base, _pid_of(bare_base), [bare_path])
        print(f"load (1, 5, 15 min) at the start: {os.getloadavg()}")
        for _name, base, _pid, paths in [bare, *servers]:
            wrk("warm-up", base, paths, 1, 2)
        p50: dict[str, list[float]] = {name: [] for name, *_ in [bare, *servers]}
        per_request: dict[str, list[list[float]]] = {name: [] for name, *_ in [bare, *servers]}
        for n in range(ROUNDS):
            line = []
            for name, base, pid, paths in [bare, *(servers if n % 2 == 0 else servers[::-1])]:
                before = cpu(pid)
                load = wrk(name, base, paths, 1, SECONDS)
                spent = [
                    1e6 * (b - a) / _TICK / (load.requests_s * SECONDS) for a, b in zip(before, cpu(pid), strict=True)
                ]
                p50[name].append(load.p50_ms)
                per_request[name].append(spent)
                ratio = "" if name == "bare" else f" = {load.p50_ms / p50['bare'][-1]:.2f}x"
                line.append(
                    f"{name} {load.p50_ms:.3f} ms{ratio} (CPU µs/req {spent[0]:.0f}/{spent[1]:.0f}/{spent[2]:.0f})"
                )
            print(f"round {n + 1}, load {os.getloadavg()[0]:.1f}: " + " | ".join(line), flush=True)
        bare50 = statistics.median(p50["bare"])
        for name in p50:
            m = statistics.median(p50[name])
            c = [statistics.median(r[i] for r in per_request[name]) for i in range(3)]
            print(
                f"median {name}: p50 {m:.3f} ms = {m / bare50:.2f}x the bare endpoint; CPU µs a request: main thread "
                f"{c[0]:.0f}, other threads {c[1]:.0f}, children {c[2]:.0f}"
            )
        print(f"load at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main(sys.argv[1:])
