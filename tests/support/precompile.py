"""The suite's bytecode compiled once, before ``make test``'s pytest processes start (``python -m
tests.support.precompile``, the Makefile's ``test`` target), on every core.

With ``PYTHONDONTWRITEBYTECODE`` set (as on this machine and CI's) no Python process writes a ``.pyc``, so each
pytest process of the tiers (two xdist workers, then the serial tier's) compiled again everything it imports
that has none: every test module and ``conftest.py`` rewritten by pytest's assertion rewriting, the pytest
plugins' packages (pytest rewrites them too: hypothesis, schemathesis, anyio, ...), ``tests/support``; and each
service and CLI process the suite starts compiled the package. Measured on this machine: a whole collection
(``pytest --collect-only tests``) took 37 s of CPU without those files and 14 s with them, in each of the
three processes, the two workers' at the same time at the start of the parallel tier.

What is written, each file where its reader looks (nothing else changes):

* the package and ``tests/support`` (plain ``.pyc`` in ``__pycache__``, as ``compileall``);
* what pytest rewrites — ``tests/**/test_*.py``, ``tests/**/conftest.py`` and every ``.py`` of a distribution
  with a ``pytest11`` entry point — as pytest's own cache of rewritten modules (``*-pytest-<version>.pyc``
  beside them, hash-checked: pytest reads it whether or not it may write, and rewrites again any whose source
  changed). Rewriting uses pytest's own functions with no configuration, as pytest does with this project's
  (no ``enable_assertion_pass_hook``).
"""

from __future__ import annotations

import compileall
import importlib.metadata
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc, _rewrite_test, _write_pyc, get_cache_dir

from tests.support import REPO


def rewritten(repo: Path = REPO) -> list[Path]:
    """The files pytest rewrites on import: the test modules, the conftests, the plugins' distributions."""
    tests = repo / "tests"
    found = sorted(p for p in tests.rglob("*.py") if p.name.startswith("test_") or p.name == "conftest.py")
    for dist in importlib.metadata.distributions():
        if any(ep.group == "pytest11" for ep in dist.entry_points):
            found += [Path(str(dist.locate_file(f))) for f in dist.files or () if str(f).endswith(".py")]
    return found


def cached(path: Path) -> Path:
    """Where pytest keeps ``path``'s rewritten code (``sys.pycache_prefix`` respected, as pytest does)."""
    return get_cache_dir(path) / (path.name[:-3] + PYC_TAIL)


def _rewrite(paths: list[Path]) -> int:
    """Rewrite and cache each of ``paths`` whose cache is missing or stale (pytest's own check: its source's
    hash); how many were written."""
    state: Any = SimpleNamespace(trace=lambda _message: None)  # all _write_pyc reads of pytest's state
    written = 0
    for path in paths:
        pyc = cached(path)
        if not path.is_file() or _read_pyc(path, pyc) is not None:
            continue  # current: what pytest would read
        try:
            pyc.parent.mkdir(exist_ok=True)
            source_hash, code = _rewrite_test(path, None)  # type: ignore[arg-type]
        except (OSError, SyntaxError):
            continue  # pytest reports it when (if) it imports the file
        written += _write_pyc(state, code, source_hash, pyc)
    return written


def main() -> int:
    """Compile and rewrite on every core; 1 when ``compileall`` found a file that does not compile."""
    workers = os.cpu_count() or 1
    ok = compileall.compile_dir(REPO / "evaluator_host", quiet=1, workers=workers)
    ok &= compileall.compile_dir(REPO / "tests" / "support", quiet=1, workers=workers)
    paths = rewritten()
    with ProcessPoolExecutor(workers) as pool:
        written = sum(pool.map(_rewrite, [paths[i::workers] for i in range(workers)]))
    print(f"precompiled: the package, tests/support, {written} of {len(paths)} rewritten modules", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
