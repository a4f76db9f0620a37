"""``/v1/review-queues`` (queues, items, verdicts, exports, verdicts as fixtures) and
``GET /v1/evaluators/{id}/agreement`` (issue 53).

Every route acts in the caller's workspace: a queue of another workspace is 404, the same as an unknown
one; a source (rule, job) of another workspace is 422, the same as an unknown one. Items are paged like
every list, 50 a page by default (each carries its trace).
"""

from __future__ import annotations

import csv
import io
import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response, status

from evaluator_host.api.deps import ServicesDep, WorkspaceDep, principal
from evaluator_host.api.paging import MAX_LIMIT, page
from evaluator_host.definitions.models import MAX_REVISION
from evaluator_host.review.agreement import agreement_of
from evaluator_host.review.fixtures import verdicts_to_fixtures
from evaluator_host.review.models import (
    Agreement,
    FixturesAdded,
    FixturesRequest,
    ItemList,
    Queue,
    QueueCreate,
    QueueList,
    QueuePatch,
    Verdict,
    VerdictCreate,
    VerdictList,
)
from evaluator_host.review.queues import EXPORT_COLUMNS

router = APIRouter(tags=["review"])

State = Annotated[Literal["pending", "reviewed"] | None, Query(description="pending or reviewed (default: all).")]


@router.post("/review-queues", status_code=status.HTTP_201_CREATED, response_model=Queue)
async def create(body: QueueCreate, services: ServicesDep, workspace: WorkspaceDep) -> Queue:
    """Create a queue on a rule's scores or a job's results and fill it now (a rule's also as scores arrive)."""
    return await services.review.create(workspace, body)


@router.get("/review-queues", response_model=QueueList)
async def list_queues(
    services: ServicesDep,
    workspace: WorkspaceDep,
    limit: Annotated[int | None, Query(ge=1, le=MAX_LIMIT, description="At most this many (default: all).")] = None,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page.")] = None,
) -> QueueList:
    """The workspace's queues with their progress, newest first."""
    every = await services.review.list_all(workspace)
    data, after = page(every, lambda q: (q.created_at.isoformat(), q.id), descending=True, limit=limit, cursor=cursor)
    return QueueList(data=data, count=len(data), next_cursor=after)


@router.get("/review-queues/{queue_id}", response_model=Queue)
async def get(queue_id: str, services: ServicesDep, workspace: WorkspaceDep) -> Queue:
    """One queue with its progress (items, reviewed)."""
    return await services.review.get(workspace, queue_id)


@router.patch("/review-queues/{queue_id}", response_model=Queue)
async def rename(queue_id: str, body: QueuePatch, services: ServicesDep, workspace: WorkspaceDep) -> Queue:
    """Rename a queue."""
    return await services.review.rename(workspace, queue_id, body.name)


@router.delete("/review-queues/{queue_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete(queue_id: str, services: ServicesDep, workspace: WorkspaceDep) -> Response:
    """Delete a queue (it fills no more; its verdicts stop counting in agreement)."""
    await services.review.delete(workspace, queue_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/review-queues/{queue_id}/refill", response_model=Queue)
async def refill(queue_id: str, services: ServicesDep, workspace: WorkspaceDep) -> Queue:
    """Take what the source holds now that the queue takes (the same items every time), up to its limit."""
    return await services.review.refill(workspace, queue_id)


@router.get("/review-queues/{queue_id}/items", response_model=ItemList)
async def items(
    queue_id: str,
    services: ServicesDep,
    workspace: WorkspaceDep,
    state: State = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="At most this many (default 50).")] = 50,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page.")] = None,
) -> ItemList:
    """A queue's items in the order they were added, each with the evaluator's answer, what it judged (the
    trace, or the job row's inputs/outputs) and its current verdict."""
    every = await services.review.items(workspace, queue_id, state)
    chosen, after = page(every, lambda i: (i.added_at.isoformat(), i.id), descending=False, limit=limit, cursor=cursor)
    data = await services.review.shown(workspace, chosen)
    return ItemList(data=data, count=len(data), next_cursor=after)


@router.post(
    "/review-queues/{queue_id}/items/{item_id}/verdict", status_code=status.HTTP_201_CREATED, response_model=Verdict
)
async def verdict(
    queue_id: str, item_id: str, body: VerdictCreate, services: ServicesDep, workspace: WorkspaceDep, request: Request
) -> Verdict:
    """Give a verdict: it becomes the item's current one (the one before stays in its history)."""
    who = await principal(request)
    return await services.review.verdict(workspace, queue_id, item_id, body, who.key_id)


@router.get("/review-queues/{queue_id}/items/{item_id}/verdict", response_model=VerdictList)
async def history(queue_id: str, item_id: str, services: ServicesDep, workspace: WorkspaceDep) -> VerdictList:
    """Every verdict on an item, newest first (``current``: the one that counts)."""
    found = await services.review.history(workspace, queue_id, item_id)
    return VerdictList(data=found, count=len(found))


def _cell(value: Any) -> Any:
    return json.dumps(value) if isinstance(value, dict | list) else value


@router.get(
    "/review-queues/{queue_id}/export",
    responses={
        200: {
            "content": {
                "application/x-ndjson": {"schema": {"type": "string"}},
                "text/csv": {"schema": {"type": "string"}},
            },
            "description": "One line per item: the evaluator's answer beside the human verdict.",
        }
    },
    response_class=Response,
)
async def export(
    queue_id: str,
    services: ServicesDep,
    workspace: WorkspaceDep,
    format: Annotated[Literal["jsonl", "csv"], Query(description="jsonl (default) or csv.")] = "jsonl",
    state: Annotated[
        Literal["pending", "reviewed", "all"], Query(description="Which items (default: reviewed).")
    ] = "reviewed",
) -> Response:
    """The queue's items with the evaluator's answer (revision, status, score, passed, label, reason) beside
    the human verdict (passed, score, label, note) and whether they agree on passed."""
    rows = await services.review.export(workspace, queue_id, None if state == "all" else state)
    if format == "jsonl":
        body = "".join(json.dumps(row, separators=(",", ":")) + "\n" for row in rows)
        return Response(body, media_type="application/x-ndjson")
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=EXPORT_COLUMNS)
    writer.writeheader()
    writer.writerows({k: _cell(v) for k, v in row.items()} for row in rows)
    return Response(out.getvalue(), media_type="text/csv")


@router.post("/review-queues/{queue_id}/fixtures", response_model=FixturesAdded)
async def fixtures(
    queue_id: str, body: FixturesRequest, services: ServicesDep, workspace: WorkspaceDep
) -> FixturesAdded:
    """Turn reviewed items into fixtures of the queue's evaluator: a new revision (same code) holding them, so a
    later revision that disagrees with the verdicts is refused at save (409 ``FixturesFailed``) unless forced."""
    return await verdicts_to_fixtures(services, services.review, workspace, queue_id, body)


@router.get("/evaluators/{evaluator_id}/agreement", response_model=Agreement)
async def agreement(
    evaluator_id: str,
    services: ServicesDep,
    workspace: WorkspaceDep,
    revision: Annotated[int | None, Query(ge=1, le=MAX_REVISION, description="The revision (default: latest).")] = None,
) -> Agreement:
    """How a revision agrees with people's verdicts on the evaluator's reviewed items (the verdict is the truth,
    ``passed`` the positive class); items another revision scored are run on this one now (cached)."""
    return await agreement_of(services, services.review, workspace, evaluator_id, revision)
