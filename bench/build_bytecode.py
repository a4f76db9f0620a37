"""Where a new package set's first result went before issue 55 §4: ``python -m bench.build_bytecode [runs]``.

The large set (scikit-learn + nltk) built by the process backend's builder on a fresh data dir (an empty
store), its background compile held back, then timed apart in the same run: the build without the compile,
the compile and its links (as the build ran it before: every core, normal priority), and the first run
(``python -I -S -B``, ``import sklearn`` from the runtime) without and with the ``.pyc``. Run it with an
interpreter the build sandbox can see (in a worktree: main's ``.venv/bin/python``, not the worktree's link).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from evaluator_host.builds import store
from evaluator_host.sandbox.process.backend import ProcessBackend
from evaluator_host.settings import Settings

PINS = {"scikit-learn": "1.5.2", "nltk": "3.9.1"}


def once() -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="build-bytecode-") as scratch:
        settings = Settings(data_dir=Path(scratch), backend="process")
        builder = ProcessBackend(settings).builder
        held: list[tuple[Any, ...]] = []
        builder.bytecode.compile_later = lambda *args: held.append(args)  # type: ignore[method-assign]
        started = time.perf_counter()
        builder.build(builder.runtime_for("python", PINS), "python", PINS)
        build = time.perf_counter() - started
        site, entries, sources, package_store = held[0]
        check = f"import sys; sys.path.insert(0, {str(site)!r}); import sklearn"
        argv = [settings.python_executable, "-I", "-S", "-B", "-c", check]

        def first() -> float:
            began = time.perf_counter()
            subprocess.run(argv, check=True)
            return time.perf_counter() - began

        cold = first()
        began = time.perf_counter()
        store.compile_entries(entries, settings.python_executable, settings.build_timeout_s)
        store.link_bytecode(site, sources, package_store)
        compiled = time.perf_counter() - began
        warm = first()
    return {"load": os.getloadavg()[0], "build": build, "compile": compiled, "cold run": cold, "warm run": warm}


if __name__ == "__main__":
    runs = [once() for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3)]
    for run in runs:
        print(", ".join(f"{k} {v:.2f}" for k, v in run.items()))
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(
        f"medians: build without compile {med['build']:.2f} s, compile {med['compile']:.2f} s, first run without "
        f".pyc {med['cold run']:.2f} s, with {med['warm run']:.2f} s; first result before (build + compile + run "
        f"with) {med['build'] + med['compile'] + med['warm run']:.2f} s, now (build + run without) "
        f"{med['build'] + med['cold run']:.2f} s"
    )
