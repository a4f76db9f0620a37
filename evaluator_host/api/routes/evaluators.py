"""``/v1/evaluators``: CRUD with immutable revisions (fixtures run on save: a failing set stores a
draft and answers 409 ``FixturesFailed``), evaluation by id, a revision's fixtures run again (``/test``),
and two revisions compared on the same rows (``/compare``)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.exceptions import RequestValidationError

from evaluator_host.api.calls import answer, cases_of
from evaluator_host.api.deps import ServicesDep, WorkspaceDep
from evaluator_host.api.fields import unknown_field
from evaluator_host.api.middleware.idempotent import idempotent
from evaluator_host.api.paging import MAX_LIMIT, page, window
from evaluator_host.errors import ErrorBody
from evaluator_host.evaluation.models import (
    BatchResponse,
    EvaluationResult,
    Evaluator,
    EvaluatorCreate,
    EvaluatorEvaluateRequest,
    EvaluatorList,
    EvaluatorPatch,
    EvaluatorSettings,
    RevisionList,
)
from evaluator_host.evaluation.usecases import evaluate_stored
from evaluator_host.jobs.datasets.samples import compare
from evaluator_host.jobs.models import CompareRequest, CompareResponse, EvaluatorTestRequest, EvaluatorTestResponse
from evaluator_host.services import Services

router = APIRouter(prefix="/evaluators", tags=["evaluators"])

_DRAFT: dict[int | str, dict[str, Any]] = {
    409: {
        "model": ErrorBody,
        "description": "FixturesFailed: some fixtures failed; the revision is stored as a draft (never the latest), "
        "error.evaluator is the draft with its fixture_report. Save with force: true to make it the latest. "
        "(Also: a request with this Idempotency-Key still runs.)",
    }
}


async def _named(services: Services, workspace: str, saving: Awaitable[Evaluator]) -> Evaluator:
    """The saved evaluator, with ``same_name``: the ids of the workspace's other evaluators with its name
    (compared case-blind, spaces trimmed). Names may repeat — ids tell evaluators apart, and a database
    may already hold repeats — but a repeat is usually a second save meant as a revision."""
    saved = await saving
    wanted = saved.name.strip().casefold()
    others = await services.evaluators.list_all(workspace)
    saved.same_name = [e.id for e in others if e.id != saved.id and e.name.strip().casefold() == wanted]
    return saved


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=Evaluator,
    responses=_DRAFT,
)
async def create(
    body: EvaluatorCreate, services: ServicesDep, request: Request, workspace: WorkspaceDep
) -> Evaluator | Response:
    """Create an evaluator at revision 1 (its runtime is built now; a failing install is 422; its
    ``fixtures`` run now: any failing stores revision 1 as a draft and answers 409). With an
    ``Idempotency-Key`` header, a retry of the same request answers the first answer again."""
    return await idempotent(
        request,
        services,
        workspace,
        "POST /v1/evaluators",
        body,
        lambda: _named(services, workspace, services.evaluators.create(workspace, body)),
        201,
    )


@router.get("", response_model=EvaluatorList)
async def list_evaluators(
    services: ServicesDep,
    workspace: WorkspaceDep,
    limit: Annotated[int | None, Query(ge=1, le=MAX_LIMIT, description="At most this many (default: all).")] = None,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page.")] = None,
) -> EvaluatorList:
    """Every evaluator at its latest revision, newest first (paged with ``limit`` and ``cursor``)."""
    asked = window(limit, cursor)  # a page is read from the database, never every evaluator
    found = await services.evaluators.list_all(workspace, limit=asked.fetch, before=asked.created_before())
    data, after = asked.answer(found, lambda e: (e.created_at.isoformat(), e.id))
    return EvaluatorList(data=data, count=len(data), next_cursor=after)


@router.get("/{evaluator_id}", response_model=Evaluator)
async def get(evaluator_id: str, services: ServicesDep, workspace: WorkspaceDep) -> Evaluator:
    """The latest revision (the newest draft, ``draft: true``, when every revision is a draft)."""
    return await services.evaluators.get(workspace, evaluator_id, or_draft=True)


@router.put("/{evaluator_id}", response_model=Evaluator, responses=_DRAFT)
async def update(evaluator_id: str, body: EvaluatorCreate, services: ServicesDep, workspace: WorkspaceDep) -> Evaluator:
    """Store a new revision (revision + 1; a draft, 409, when its fixtures fail unless ``force``); old
    revisions stay runnable."""
    return await _named(services, workspace, services.evaluators.update(workspace, evaluator_id, body))


@router.patch("/{evaluator_id}", response_model=Evaluator, responses=_DRAFT)
async def patch(evaluator_id: str, body: EvaluatorPatch, services: ServicesDep, workspace: WorkspaceDep) -> Evaluator:
    """Store a new revision changing only the fields given (``settings`` merged key by key)."""
    unknown = [key for key in body.settings or {} if key not in EvaluatorSettings.model_fields]
    if unknown:  # merged key by key, so a dict: the same 422 as a misspelled key in a POST's settings
        raise RequestValidationError(
            [
                {"type": "extra_forbidden", "loc": ("body", "settings", key), **unknown_field(EvaluatorSettings, [key])}
                for key in unknown
            ]
        )
    saved = services.evaluators.patch(workspace, evaluator_id, body)
    return await (_named(services, workspace, saved) if body.name is not None else saved)


@router.get("/{evaluator_id}/revisions", response_model=RevisionList)
async def revisions(
    evaluator_id: str,
    services: ServicesDep,
    workspace: WorkspaceDep,
    limit: Annotated[int | None, Query(ge=1, le=MAX_LIMIT, description="At most this many (default: all).")] = None,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page.")] = None,
) -> RevisionList:
    """Every revision, oldest first (paged with ``limit`` and ``cursor``)."""
    every = await services.evaluators.revisions(workspace, evaluator_id)
    data, after = page(every, lambda r: (r.revision,), descending=False, limit=limit, cursor=cursor)
    return RevisionList(data=data, count=len(data), next_cursor=after)


@router.delete("/{evaluator_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete(evaluator_id: str, services: ServicesDep, workspace: WorkspaceDep) -> Response:
    """Delete the evaluator (its revisions are kept for history)."""
    await services.evaluators.delete(workspace, evaluator_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{evaluator_id}/evaluate", response_model=EvaluationResult | BatchResponse)
async def evaluate(
    evaluator_id: str, body: EvaluatorEvaluateRequest, services: ServicesDep, workspace: WorkspaceDep
) -> EvaluationResult | BatchResponse:
    """Evaluate one case or ``cases`` with a stored evaluator (``revision`` defaults to latest)."""
    cases, batch = cases_of(body)
    evaluated = await evaluate_stored(services, workspace, evaluator_id, body.revision, cases)
    return answer(evaluated, batch, services.backend.name)


@router.post("/{evaluator_id}/test", response_model=EvaluatorTestResponse)
async def test(
    evaluator_id: str, body: EvaluatorTestRequest, services: ServicesDep, workspace: WorkspaceDep
) -> EvaluatorTestResponse:
    """Run a revision's stored fixtures now and judge them as on save (``revision`` defaults to the latest,
    or the newest draft when every revision is one). Failing fixtures are a 200 answer: ``failed`` > 0."""
    evaluator, report = await services.evaluators.test(workspace, evaluator_id, body.revision)
    return EvaluatorTestResponse(
        evaluator_id=evaluator.id, revision=evaluator.revision, draft=evaluator.draft, **report.model_dump()
    )


@router.post("/{evaluator_id}/compare", response_model=CompareResponse)
async def compare_revisions(
    evaluator_id: str, body: CompareRequest, services: ServicesDep, workspace: WorkspaceDep
) -> CompareResponse:
    """Run two revisions on the same rows (inline ``cases`` or a dataset's first ``sample`` rows) and
    report the rows that flipped (status, passed, label, |Δscore| > ``tolerance``), the aggregates and
    their deltas, and a page of the per-row table."""
    return await compare(services, services.datasets, workspace, evaluator_id, body)
