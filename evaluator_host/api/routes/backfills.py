"""``/v1/online-rules/{id}/backfill`` and ``/backfills/{backfill_id}``: a rule's stored traces scored on demand
(issue 50; docs/online.md, "Backfill").

``dry_run`` answers at once and stores nothing; otherwise 202 with the backfill, which a service then
plans page by page (``online/backfill/runs.py``) and the scorer scores; ``GET`` follows it, ``DELETE`` cancels
it (its rows still queued are dropped). A backfill that ended with every target it scored failed is
``failed`` with a ``reason`` (``online/backfill/runs.py``'s :func:`outcome`), never ``done``. A rule of another
workspace is 404; ``limit`` past ``online_backfill_max_targets`` is 422. A session-level rule's targets are the
sessions stored in the range.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from fastapi import APIRouter, Response, status

from evaluator_host.api.deps import ServicesDep, WorkspaceDep
from evaluator_host.errors import LimitError
from evaluator_host.online.backfill.runs import dry_run, estimate_s, outcome
from evaluator_host.online.models import Backfill, BackfillCreate, BackfillDryRun
from evaluator_host.services import Services
from evaluator_host.store.online.backfills import Backfill as BackfillRecord
from evaluator_host.store.online.backfills import BackfillStore
from evaluator_host.store.online.rules import RuleRecord

__all__ = ["router"]

router = APIRouter(tags=["online"])


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _model(store: BackfillStore, record: BackfillRecord) -> Backfill:
    states = store.progress(record.id)
    pending = states.get("queued", 0) + states.get("running", 0)
    done = states.get("done", 0)
    failed = store.failures(record.id)[0] if done else 0
    ended = record.status not in ("cancelled", "planning") and not pending
    shown, reason = outcome(record.status, states, store.failure(record.id) if ended else None)
    return Backfill(
        id=record.id,
        rule_id=record.rule_id,
        status=shown,
        total=max(record.total, record.queued),
        done=done,
        skipped=record.skipped,
        cached=record.cached,
        failed=failed,
        reason=reason,
        queued=pending,
        cancelled=states.get("dropped", 0),
        since=record.since,
        until=record.until,
        limit=record.max_targets,
        revision=record.revision,
        created_at=record.created_at,
    )


async def _revision(services: Services, workspace: str, rule: RuleRecord) -> int | None:
    if rule.revision is not None:
        return rule.revision
    return (await services.evaluators.get(workspace, rule.evaluator_id)).revision


@router.post(
    "/online-rules/{rule_id}/backfill",
    response_model=Backfill | BackfillDryRun,
    status_code=status.HTTP_202_ACCEPTED,
    responses={200: {"model": BackfillDryRun, "description": "dry_run: what it would do, nothing stored."}},
)
async def create_backfill(
    rule_id: str, body: BackfillCreate, services: ServicesDep, workspace: WorkspaceDep, response: Response
) -> Backfill | BackfillDryRun:
    """Score the rule's stored traces first seen in ``[since, until)`` — what it missed, or everything
    again with a new revision: a (rule, target, revision) already scored is skipped."""
    rule = await asyncio.to_thread(services.online.rules.get, workspace, rule_id)
    cap = services.settings.online_backfill_max_targets
    if body.limit is not None and body.limit > cap:
        raise LimitError(f"limit {body.limit} is over online_backfill_max_targets={cap}")
    limit = body.limit or cap
    since, until = _utc(body.since), _utc(body.until) or datetime.now(UTC)
    if since is not None and since >= until:
        raise LimitError("since must be before until")
    revision = await _revision(services, workspace, rule)
    queue = services.online.queue
    traces, targets, scored = await asyncio.to_thread(dry_run, queue, rule, revision, (since, until), limit)
    to_score = min(max(targets - scored, 0), limit)
    store = BackfillStore(services.store.engine)
    if body.dry_run:
        rate = services.workspaces.get(workspace).quotas.get("max_evaluations_per_s")
        concurrency = services.settings.online_scoring_concurrency
        seconds = await asyncio.to_thread(
            estimate_s, services.store.engine, rule, to_score, concurrency, None if rate is None else float(rate)
        )
        response.status_code = status.HTTP_200_OK
        return BackfillDryRun(
            traces=traces, targets=targets, already_scored=scored, estimate_s=seconds, revision=revision
        )
    record = await asyncio.to_thread(store.create, rule, (since, until), limit, revision, to_score, 0)
    services.online.backfiller.wake()
    return await asyncio.to_thread(_model, store, record)


@router.get("/online-rules/{rule_id}/backfills/{backfill_id}", response_model=Backfill)
async def get_backfill(rule_id: str, backfill_id: str, services: ServicesDep, workspace: WorkspaceDep) -> Backfill:
    """A backfill's progress: ``running`` until every target it queued is scored, then ``done``."""
    await asyncio.to_thread(services.online.rules.get, workspace, rule_id)  # another workspace's rule: 404
    store = BackfillStore(services.store.engine)
    record = await asyncio.to_thread(store.get, workspace, rule_id, backfill_id)
    return await asyncio.to_thread(_model, store, record)


@router.delete("/online-rules/{rule_id}/backfills/{backfill_id}", response_model=Backfill)
async def cancel_backfill(rule_id: str, backfill_id: str, services: ServicesDep, workspace: WorkspaceDep) -> Backfill:
    """Cancel: nothing more is queued, its targets still waiting are dropped (those running finish)."""
    await asyncio.to_thread(services.online.rules.get, workspace, rule_id)  # another workspace's rule: 404
    store = BackfillStore(services.store.engine)
    record = await asyncio.to_thread(store.cancel, workspace, rule_id, backfill_id)
    return await asyncio.to_thread(_model, store, record)
