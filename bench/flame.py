"""A flame graph of the service under load: py-spy records the serving process while wrk drives
64 clients at one evaluator by id (the hot path). Written to ``docs/flamegraph-service.svg``.

With ``EVALUATOR_HOST_FAST_PATH=0 EVALUATOR_HOST_COALESCE=0`` in the environment it shows the
service as it was before those two (the "before" graph, ``docs/flamegraph-service-before.svg``).

Run alone: ``.venv/bin/python -m bench.flame [process|docker]``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from bench.common import REPO, serve
from bench.load_bench import Load, _evaluators, wrk

SECONDS = 10


def record(backend: str = "process", out: Path | None = None) -> tuple[Path, Load] | None:
    """Record ``SECONDS`` s of the service under 64 clients; the SVG's path and the load measured."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists() or shutil.which("wrk") is None:
        return None
    before = os.environ.get("EVALUATOR_HOST_FAST_PATH") == "0"
    out = out or REPO / "docs" / ("flamegraph-service-before.svg" if before else "flamegraph-service.svg")
    with serve(backend) as (base, _data, proc):
        paths = _evaluators(base, ["python"])
        argv = [spy, "record", "-p", str(proc.pid), "-d", str(SECONDS), "-r", "199", "-o", str(out)]
        recorder = subprocess.Popen([*argv, "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        load = wrk(f"{backend}: 1 evaluator, under py-spy", base, paths, 64, SECONDS)
        recorder.wait(timeout=SECONDS + 60)
    return out, load


if __name__ == "__main__":
    os.chdir(REPO)
    done = record(*(sys.argv[1:2] or ["process"]))
    print(done if done else "py-spy or wrk is missing: no flame graph")
