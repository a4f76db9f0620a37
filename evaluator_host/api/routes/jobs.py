"""``/v1/jobs``: batch evaluation of a dataset (or inline rows) with a stored evaluator revision."""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.responses import StreamingResponse

from evaluator_host.api.deps import ServicesDep, WorkspaceDep
from evaluator_host.api.middleware.idempotent import idempotent
from evaluator_host.api.paging import MAX_LIMIT, window
from evaluator_host.errors import ErrorBody
from evaluator_host.jobs.models import Job, JobCreate, JobList, JobResultPage, JobStatus

router = APIRouter(prefix="/jobs", tags=["jobs"])


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=Job,
    responses={
        409: {"model": ErrorBody, "description": "Conflict: a request with this Idempotency-Key is still running."}
    },
)
async def create(body: JobCreate, services: ServicesDep, request: Request, workspace: WorkspaceDep) -> Job | Response:
    """Start a job over ``dataset_id`` or inline ``rows``; poll ``GET /v1/jobs/{id}`` for progress. With an
    ``Idempotency-Key`` header, a retry of the same request answers the first answer (no second job)."""
    run = lambda: services.runner.create(workspace, body)  # noqa: E731
    return await idempotent(request, services, workspace, "POST /v1/jobs", body, run, 202)


@router.get("", response_model=JobList)
async def list_jobs(
    services: ServicesDep,
    workspace: WorkspaceDep,
    status: JobStatus | None = None,
    evaluator_id: str | None = None,
    limit: Annotated[int | None, Query(ge=1, le=MAX_LIMIT, description="At most this many (default: all).")] = None,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page.")] = None,
) -> JobList:
    """Jobs, newest first (filter by ``status`` or ``evaluator_id``; paged with ``limit`` and ``cursor``)."""
    asked = window(limit, cursor)  # a page is read from the database, never every job
    found = await services.runner.list_all(
        workspace, status, evaluator_id, limit=asked.fetch, before=asked.created_before()
    )
    data, after = asked.answer(found, lambda j: (j.created_at.isoformat(), j.id))
    return JobList(data=data, count=len(data), next_cursor=after)


MAX_WAIT_S = 60.0


@router.get("/{job_id}", response_model=Job)
async def get(
    job_id: str,
    services: ServicesDep,
    workspace: WorkspaceDep,
    request: Request,
    wait_s: Annotated[
        float,
        Query(
            ge=0,
            le=MAX_WAIT_S,
            description="Answer once the job is finished, or after this many seconds, whichever comes first "
            "(0: at once).",
        ),
    ] = 0.0,
) -> Job | Response:
    """Status, progress, rows/s and the aggregate so far; with ``wait_s``, a long poll for the job's end."""
    if not wait_s:
        return await read(job_id, services, workspace)
    waiting = asyncio.ensure_future(services.runner.wait(workspace, job_id, wait_s))
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait([waiting, gone], return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not waiting.done():
            waiting.cancel()  # the client went away (or this request was cancelled): stop waiting for it
    if not waiting.done() or waiting.cancelled():
        return Response(status_code=499)  # nobody reads it
    return waiting.result()


async def read(job_id: str, services: ServicesDep, workspace: WorkspaceDep) -> Job:
    """``GET /v1/jobs/{id}`` without a wait (the fast path answers it with the same ``JobRunner.get``)."""
    return await services.runner.get(workspace, job_id)


async def _disconnected(request: Request) -> None:
    """Return when the client of ``request`` (a GET: no body to read) has gone away."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


@router.delete("/{job_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete(job_id: str, services: ServicesDep, workspace: WorkspaceDep) -> Response:
    """Delete a job and its results (a queued or running job is cancelled first); its inline rows too."""
    await services.runner.delete(workspace, job_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{job_id}/cancel", response_model=Job)
async def cancel(job_id: str, services: ServicesDep, workspace: WorkspaceDep) -> Job:
    """Stop a queued or running job; rows already scored are kept."""
    return await services.runner.cancel(workspace, job_id)


@router.get("/{job_id}/results", response_model=JobResultPage)
async def results(
    job_id: str,
    services: ServicesDep,
    workspace: WorkspaceDep,
    offset: int = Query(0, ge=0, le=2**53, description="First row index."),
    limit: int = Query(100, ge=1, le=1000),
    format: Literal["json", "ndjson", "csv"] = Query("json", description="json page, or stream every row."),
) -> JobResultPage | StreamingResponse:
    """Rows in input order as ``{index, row, result}``: a JSON page, or all of them as NDJSON or CSV."""
    job, revision = await services.runner.job_and_revision(workspace, job_id)
    reader = services.results
    if format == "ndjson":
        return StreamingResponse(reader.ndjson(job, revision), media_type="application/x-ndjson")
    if format == "csv":
        dataset = await services.datasets.get(workspace, job.dataset_id)
        aggregate = services.runner.view(job).aggregate
        outputs = sorted(aggregate.outputs) if aggregate else []
        headers = {"content-disposition": f'attachment; filename="{job.id}.csv"'}
        return StreamingResponse(
            reader.csv(job, dataset.columns, outputs), media_type="text/csv; charset=utf-8", headers=headers
        )
    return await asyncio.to_thread(reader.page, job, revision, offset, limit)
