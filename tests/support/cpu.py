"""Where a test run's CPU went: seconds of CPU per test file, written by each pytest process (each xdist worker
too) when ``TEST_CPU_DIR`` names a folder and this module is loaded as a plugin (``tests/tiers.py`` runs
``pytest -p tests.support.cpu`` with the tier's own folder, then prints the files that cost most).

A file's CPU is what its tests' setup, call and teardown cost this process (its threads: the in-process
services the tests start) plus the children reaped meanwhile (``RUSAGE_CHILDREN``: a started ``serve`` process
and the sandbox workers it reaped, a CLI run, a PostgreSQL server stopped by a module fixture). Not counted:
containers (their CPU is the engine's), and children still running when the file ends (a session's services:
charged to the file after which they are reaped). Portable: ``getrusage`` only, no cgroup, no root.
"""

from __future__ import annotations

import json
import os
import resource
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

CPU_DIR = "TEST_CPU_DIR"


def _spent() -> float:
    """CPU seconds (user + system) of this process and its reaped children so far (the commands its zygote
    forked and this process waited for too: ``tests/support/zygote.py``)."""
    from tests.support import zygote

    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime + zygote.reaped_cpu


class FileCpu:
    """The pytest plugin: CPU per test file, written as ``cpu-<worker>.json`` (``{"file": seconds}``) into
    ``folder`` when the session ends."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.seconds: Counter[str] = Counter()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        before = _spent()
        try:
            return (yield)
        finally:
            self.seconds[item.nodeid.split("::", 1)[0]] += _spent() - before

    def pytest_sessionfinish(self) -> None:
        if not self.seconds:
            return  # ran no test here (pytest-xdist's controller): nothing to write
        self.folder.mkdir(parents=True, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        totals = {path: round(spent, 3) for path, spent in self.seconds.most_common()}
        (self.folder / f"cpu-{worker}.json").write_text(json.dumps(totals, indent=0))


def pytest_configure(config: pytest.Config) -> None:
    """This module is a pytest plugin (the tiers run ``pytest -p tests.support.cpu``): add :class:`FileCpu` to
    this pytest process when ``TEST_CPU_DIR`` is set (the tiers set it too)."""
    folder = os.environ.get(CPU_DIR)
    if folder and not config.pluginmanager.has_plugin("evaluator-host-file-cpu"):
        config.pluginmanager.register(FileCpu(Path(folder)), "evaluator-host-file-cpu")


def file_cpu(folder: Path) -> Counter[str]:
    """CPU seconds per test file summed over every ``cpu-*.json`` in ``folder`` (every worker of a tier)."""
    totals: Counter[str] = Counter()
    for report in sorted(folder.glob("cpu-*.json")):
        totals.update({path: float(spent) for path, spent in json.loads(report.read_text()).items()})
    return totals
