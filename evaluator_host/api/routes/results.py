"""``/v1/results``: a stored result run again (``POST /v1/results/replay``,
:mod:`evaluator_host.jobs.results.replay`)."""

from __future__ import annotations

from fastapi import APIRouter

from evaluator_host.api.deps import ServicesDep, WorkspaceDep
from evaluator_host.jobs.models import Replay, ReplayRequest
from evaluator_host.jobs.results.replay import replay as replay_row

router = APIRouter(prefix="/results", tags=["jobs"])


@router.post("/replay", response_model=Replay)
async def replay(body: ReplayRequest, services: ServicesDep, workspace: WorkspaceDep) -> Replay:
    """Run a job's stored row result again — the job's revision, on the runtime the row ran on, the row's case
    as the job mapped it, never from the result cache — and say whether the answer is identical (status,
    score, passed, outputs, details, label, reason, error; not timings). 404: no such job or stored row."""
    return await replay_row(services.runner, workspace, body.job_id, body.index)
