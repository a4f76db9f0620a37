"""The process backend in each isolation mode this machine can run."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from evaluator_host.evaluation.models import Case, EvaluatorSettings
from evaluator_host.evaluation.path import Evaluation
from evaluator_host.sandbox.pool.workers import WorkerPool
from evaluator_host.sandbox.process.backend import ProcessBackend
from evaluator_host.sandbox.process.isolation import Isolation, probe
from evaluator_host.sandbox.process.runtimes import RuntimeBuilder
from evaluator_host.tenancy.models import DEFAULT_WORKSPACE
from evaluator_host.tenancy.quotas import job_chunks  # unmetered: this test measures the backend, not the rate
from tests.support.service import make_settings

run_dirs: list[Path] = []  # each backend's run dir, as _run made them

CODE = (
    "import os, time\n\ndef evaluate(inputs, outputs, trace):\n"
    "    time.sleep(inputs.get('sleep', 0))\n    return {'score': 1, 'cwd': os.getcwd()}\n"
)


def _run(
    tmp_path: Path, isolation: Isolation, cases: list[Case], timeout_s: float = 5, **overrides: object
) -> list[dict[str, object]]:
    settings = make_settings(tmp_path, **overrides)

    async def go() -> list[dict[str, object]]:
        backend = ProcessBackend(settings, isolation)
        run_dirs.append(backend.run_dir)
        pool = WorkerPool(backend, settings)
        service = Evaluation(settings, pool, RuntimeBuilder(settings))
        try:
            prepared = await service.validate("python", CODE, None, EvaluatorSettings(timeout_s=timeout_s))
            charged = job_chunks(DEFAULT_WORKSPACE)
            return [r.model_dump() for r in await service.evaluate(prepared, cases, charged=charged)]
        finally:
            await pool.close()

    return asyncio.run(go())


def test_rlimits_fallback_still_evaluates_and_times_out(tmp_path: Path) -> None:
    from tests.support.rlimits import rlimits_overrides  # as root: a sandbox uid (test_process_root.py)

    overrides = rlimits_overrides()
    bare = probe("rlimits")
    results = _run(tmp_path, bare, [Case(), Case(inputs={"sleep": 5}), Case()], timeout_s=0.5, **overrides)
    assert [r["status"] for r in results] == ["ok", "timeout", "ok"]
    cwd = str(results[0]["details"]["cwd"])  # type: ignore[index]
    assert cwd.startswith(str(run_dirs[-1]) + "/")  # a private working directory, removed afterwards
    assert not Path(cwd).exists()


def test_probe_reports_the_strongest_mode() -> None:
    iso = probe()
    assert iso.mode in ("namespaces", "userns", "rlimits")
    assert iso.summary.startswith(f"process:{iso.mode}")
    if iso.mode == "namespaces":
        assert iso.uid_drop and "NPROC" in iso.summary


@pytest.mark.skipif(probe().mode == "rlimits", reason="no namespaces on this machine")
def test_namespaced_worker_runs_in_a_private_root(tmp_path: Path) -> None:
    results = _run(tmp_path, probe(), [Case()])
    assert results[0]["status"] == "ok" and results[0]["details"]["cwd"] == "/tmp"  # type: ignore[index]


def test_a_new_service_leaves_another_live_services_fresh_cgroups_alone(tmp_path: Path) -> None:
    """Worker cgroups are machine-wide: a service starting up sweeps only stale empty ones, never one
    another service just made for a worker that has not joined it yet."""
    iso = probe()
    if iso.pids_cgroup is None:
        pytest.skip("no pids cgroup here")
    first = ProcessBackend(make_settings(tmp_path / "a", backend="process"), iso)
    made, _memory = first._make_cgroups("w-fresh-test", 256)
    stale = iso.pids_cgroup / "w-stale-test"
    stale.mkdir()
    try:
        os.utime(stale, (0, 0))  # empty, and as old as a crashed service's leftover
        ProcessBackend(make_settings(tmp_path / "b", backend="process"), iso)  # sweeps at start
        assert all(c.is_dir() for c in made)
        assert not stale.exists()
    finally:
        for path in (*made, stale):
            if path.exists():
                path.rmdir()
