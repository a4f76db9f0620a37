"""``/v1/online-rules/{id}/shadow`` and ``/promote`` (issue 53): a rule's candidate revision against its live one,
and its promotion. In the caller's workspace: a rule of another workspace is 404, the same as an unknown one."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Query

from evaluator_host.api.deps import ServicesDep, WorkspaceDep
from evaluator_host.api.routes.online import rule_model
from evaluator_host.definitions.models import MAX_REVISION
from evaluator_host.online.candidates.shadow_models import Promotion, ShadowComparison
from evaluator_host.online.candidates.shadow_report import compare_rule, which_revision

router = APIRouter(tags=["online"])

MAX_EXAMPLES = 100


@router.get("/online-rules/{rule_id}/shadow", response_model=ShadowComparison)
async def shadow(
    rule_id: str,
    services: ServicesDep,
    workspace: WorkspaceDep,
    revision: Annotated[
        int | None,
        Query(
            ge=1,
            le=MAX_REVISION,
            description="The candidate revision compared (default: the rule's candidate, else the last one it had).",
        ),
    ] = None,
    examples: Annotated[int, Query(ge=0, le=MAX_EXAMPLES, description="At most this many examples (default 20).")] = 20,
) -> ShadowComparison:
    """The candidate revision against the live one over every target both scored at the same moment: flips of
    ``passed``, the mean score delta, examples, and each side's agreement with the review verdicts on the rule's
    items (docs/online.md, "Try a new revision on live traffic")."""
    rule = await asyncio.to_thread(services.online.rules.get, workspace, rule_id)
    engine = services.store.engine
    compared = await asyncio.to_thread(which_revision, engine, rule, revision)
    reviewed = await asyncio.to_thread(services.review.store.reviewed_of, workspace, rule.evaluator_id)
    return await asyncio.to_thread(compare_rule, engine, rule, compared, reviewed, examples)


@router.post("/online-rules/{rule_id}/promote", response_model=Promotion)
async def promote(rule_id: str, services: ServicesDep, workspace: WorkspaceDep) -> Promotion:
    """Make the rule's candidate revision its live one and clear the candidate, atomically: every target claimed
    from now on is scored by it (targets already queued included: a target is scored once by the live
    revision, whichever it is when the target is claimed); 409 when the rule has no candidate."""
    rule, before = await asyncio.to_thread(services.online.rules.promote, workspace, rule_id)
    assert rule.revision is not None
    return Promotion(rule_id=rule.id, previous_revision=before, revision=rule.revision, rule=rule_model(rule))
