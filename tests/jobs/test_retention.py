"""Retention: finished jobs past RESULTS_RETENTION_DAYS go (results and inline rows); nothing else does.

The runner and store are the service's on the fake backend (``test_runner.wired``); the clock is
injected, so "forty days later" is a number, not a wait.
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

from fastapi.testclient import TestClient

from evaluator_host.api.app import create_app
from evaluator_host.evaluation.models import EvaluatorCreate
from evaluator_host.jobs.models import JobCreate
from evaluator_host.jobs.results.retention import Retention
from evaluator_host.store.workspaces import WorkspaceStore
from tests.support.aio import aio
from tests.support.runner import CODE, WS, parity, wired
from tests.support.service import make_settings

DAY = 86400.0


@aio
async def test_the_sweep_deletes_finished_jobs_older_than_the_setting_with_their_results_and_inline_rows(
    tmp_path: Path,
) -> None:
    async with wired(tmp_path, parity, results_retention_days=30) as w:
        evaluator = await w.evaluator()
        old, young = await w.job(evaluator, 5), await w.job(evaluator, 5)
        uploaded = await w.runner.datasets.upload_file(
            WS,
            io.BytesIO(b'{"i": 1, "outputs": null}\n'),
            filename="rows.jsonl",
            name=None,
            fmt=None,
            content_type=None,
        )
        shared = (await w.runner.create(WS, JobCreate(evaluator_id=evaluator, dataset_id=uploaded.id))).id
        for job_id in (old, young, shared):
            await w.finished(job_id)
        finished = {j: (await w.runner.get(WS, j)).finished_at for j in (old, young, shared)}
        inline_old = (await w.runner.get(WS, old)).dataset_id
        now = finished[old].timestamp() + 31 * DAY  # type: ignore[union-attr]
        # the young one finished within the period (its finish is moved past the clock)
        await asyncio.to_thread(w.jobs.set_job, young, finished_at=finished[young].replace(year=2999))  # type: ignore[union-attr]

        retention = Retention(w.settings, w.runner, clock=lambda: now)
        deleted = await retention.sweep()
        assert sorted(deleted) == sorted([old, shared])
        listed = [j.id for j in await w.runner.list_all(WS)]
        assert listed == [young]
        assert await asyncio.to_thread(w.jobs.results, old, 0, 100) == []
        assert not list(w.settings.data_dir.glob(f"datasets/{inline_old}*"))  # its inline rows went too
        assert (await w.runner.datasets.get(WS, uploaded.id)).id == uploaded.id  # an upload stays
        assert await retention.sweep() == []  # nothing more to do


@aio
async def test_running_and_queued_jobs_are_never_swept_and_retention_is_off_by_default(tmp_path: Path) -> None:
    gate = asyncio.Event()

    async def held(load: dict, case: dict) -> dict:  # type: ignore[type-arg]
        await gate.wait()
        return parity(load, case)

    async with wired(tmp_path, held, results_retention_days=1) as w:
        job_id = await w.job(await w.evaluator(), 3)
        far = Retention(w.settings, w.runner, clock=lambda: 4_000_000_000.0)
        assert await far.sweep() == []
        assert (await w.runner.get(WS, job_id)).status in ("queued", "running")
        off = Retention(make_settings(tmp_path), w.runner, clock=lambda: 4_000_000_000.0)
        assert off.days is None
        gate.set()
        await w.finished(job_id)
        assert await off.sweep() == []
        assert [j.id for j in await w.runner.list_all(WS)] == [job_id]


@aio
async def test_the_sweep_deletes_every_workspaces_expired_jobs_and_only_those(tmp_path: Path) -> None:
    async with wired(tmp_path, parity, results_retention_days=30) as w:
        other = (await asyncio.to_thread(WorkspaceStore(w.jobs.engine).create, "team-b")).id
        body = EvaluatorCreate(name="b", language="python", code=CODE)
        theirs = (await w.evaluators.create(other, body)).id
        ours = await w.job(await w.evaluator(), 2)
        rows = [{"i": i, "outputs": None} for i in range(2)]
        theirs_old = (await w.runner.create(other, JobCreate(evaluator_id=theirs, rows=rows))).id
        theirs_young = (await w.runner.create(other, JobCreate(evaluator_id=theirs, rows=rows))).id
        for workspace, job_id in ((WS, ours), (other, theirs_old), (other, theirs_young)):
            while (await w.runner.get(workspace, job_id)).status in ("queued", "running"):
                await asyncio.sleep(0.005)
        ended = (await w.runner.get(other, theirs_old)).finished_at
        assert ended is not None
        await asyncio.to_thread(w.jobs.set_job, theirs_young, finished_at=ended.replace(year=2999))
        deleted = await Retention(w.settings, w.runner, clock=lambda: ended.timestamp() + 31 * DAY).sweep()
        assert sorted(deleted) == sorted([ours, theirs_old])
        assert [j.id for j in await w.runner.list_all(other)] == [theirs_young]
        assert await w.runner.list_all(WS) == []


def test_the_service_runs_the_sweep_when_retention_is_on(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, backend="process", results_retention_days=7, retention_sweep_s=3600)
    with TestClient(create_app(settings)) as client:
        services = client.app.state.services  # type: ignore[attr-defined]
        assert services.retention.days == 7 and services.retention._task is not None
    off = make_settings(tmp_path / "off", backend="process")
    with TestClient(create_app(off)) as client:
        assert client.app.state.services.retention._task is None  # type: ignore[attr-defined]
