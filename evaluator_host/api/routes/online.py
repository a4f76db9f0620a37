"""``/v1/online-rules`` (rules, their scores and stats) and the read side of ``/v1/traces``.

Every route acts in the caller's workspace: a rule or trace of another workspace is 404, the same
as an unknown one. A rule's evaluator must exist in the workspace (422 otherwise). Lists are paged
like every list (``api/paging.py``). The stats are computed in the database, at most
:data:`MAX_BUCKETS` buckets per call (422 past it).
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status

from evaluator_host.api.deps import ServicesDep, WorkspaceDep
from evaluator_host.api.paging import MAX_LIMIT, window
from evaluator_host.errors import BadRequest, DefinitionError, LimitError, NotFoundError
from evaluator_host.online.candidates.trial import draft_rule, run_trial
from evaluator_host.online.deciding.decisions import derive, span_refs
from evaluator_host.online.levels.traces import load_trace
from evaluator_host.online.models import (
    Decision,
    Rule,
    RuleCreate,
    RuleLimits,
    RuleList,
    RulePatch,
    RuleStats,
    RuleTarget,
    RuleTest,
    RuleTestAnswer,
    Score,
    ScoreList,
    StatsBucket,
    TraceDetail,
    TraceList,
    TraceSummary,
)
from evaluator_host.online.reading import mapping
from evaluator_host.services import Services
from evaluator_host.store.online.budgets import usage
from evaluator_host.store.online.refs import TraceRef
from evaluator_host.store.online.rules import CHANGEABLE, RuleRecord

router = APIRouter(tags=["online"])

MAX_BUCKETS = 1000
_HEX = re.compile(r"[0-9a-fA-F]{32}")
Limit = Annotated[int | None, Query(ge=1, le=MAX_LIMIT, description="At most this many (default: all).")]
Cursor = Annotated[str | None, Query(description="next_cursor of the previous page.")]


def rule_model(record: RuleRecord) -> Rule:
    """The API's shape of a stored rule."""
    return Rule(
        id=record.id,
        name=record.name,
        evaluator_id=record.evaluator_id,
        revision=record.revision,
        filter=record.filter,
        sampling_rate=record.sampling_rate,
        mapping=record.mapping,
        limits=RuleLimits(**record.limits) if record.limits else None,
        target=RuleTarget(**(record.target or {})),
        sinks=record.sinks or [],
        candidate_revision=record.candidate_revision,
        enabled=record.enabled,
        created_at=record.created_at,
        updated_at=record.updated_at,
    )


async def _check_evaluator(services: Services, workspace: str, evaluator_id: str, revision: int | None) -> None:
    try:
        await services.evaluators.get(workspace, evaluator_id, revision)
    except NotFoundError:
        which = f"evaluator {evaluator_id!r}" + ("" if revision is None else f" revision {revision}")
        raise DefinitionError(f"{which} does not exist in this workspace") from None


async def _check_candidate(
    services: Services, workspace: str, evaluator_id: str, live: int | None, candidate: int | None
) -> None:
    """A candidate must differ from the revision the rule scores live (``live``; null: the evaluator's latest),
    else its comparison is a revision with itself, every target the same: 422 ``DefinitionError``."""
    if candidate is None:
        return
    if live is not None:
        if candidate == live:
            raise DefinitionError(
                f"candidate_revision {candidate} is the revision this rule scores live (revision: {live}): a "
                "candidate must be another revision, or the comparison is a revision with itself"
            )
        return
    latest = (await services.evaluators.get(workspace, evaluator_id, None)).revision
    if candidate == latest:
        raise DefinitionError(
            f"candidate_revision {candidate} is the evaluator's latest revision, which this rule (revision: null, "
            "the latest) already scores live: the comparison would be a revision with itself. Pin the revision "
            f'that scored until now with the candidate, e.g. {{"revision": {max(candidate - 1, 1)}, '
            f'"candidate_revision": {candidate}}} (docs/online.md, "Try a new revision on live traffic")'
        )


def _stored(body: RuleCreate | RulePatch, names: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in names:
        value = getattr(body, name)
        if name == "filter":
            value = value.model_dump(exclude_none=True, exclude_defaults=True)
        elif name in ("mapping", "limits"):
            value = None if value is None else (value.model_dump(exclude_none=True) or None)
        elif name == "sinks":
            value = [sink.model_dump(exclude_none=True) for sink in value or []] or None
        out[name] = value
    return out


async def _with_sinks(services: Services, scores: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``scores`` (dicts) each with its ``sinks``: the deliveries to its rule's sinks (issue 52)."""
    pairs = [(s["rule_id"], s.get("target_id") or s["trace_id"]) for s in scores]
    states = await asyncio.to_thread(services.sink_delivery.store.states, pairs)
    for score, pair in zip(scores, pairs, strict=True):
        score["sinks"] = states.get(pair, [])
    return scores


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


@router.post("/online-rules", status_code=status.HTTP_201_CREATED, response_model=Rule)
async def create_rule(body: RuleCreate, services: ServicesDep, workspace: WorkspaceDep) -> Rule:
    """A rule: which finished traces its evaluator scores, once each (docs/online.md)."""
    await _check_evaluator(services, workspace, body.evaluator_id, body.revision)
    if body.candidate_revision is not None:
        await _check_evaluator(services, workspace, body.evaluator_id, body.candidate_revision)
        await _check_candidate(services, workspace, body.evaluator_id, body.revision, body.candidate_revision)
    fields = _stored(body, set(CHANGEABLE))
    fields["target"] = body.target.model_dump()
    record = await asyncio.to_thread(services.online.rules.create, workspace, body.evaluator_id, fields)
    return rule_model(record)


@router.post("/online-rules/test", response_model=RuleTestAnswer)
async def test_rule(body: RuleTest, services: ServicesDep, workspace: WorkspaceDep) -> RuleTestAnswer:
    """Try a rule before it goes live: its body scored now on the latest matching stored targets (traces,
    or spans at span level; at most ``limit``), charged to the workspace's evaluation rate like any call;
    nothing stored. Nothing matched: ``matched: 0`` and a ``message`` (never an empty success)."""
    await _check_evaluator(services, workspace, body.evaluator_id, body.revision)
    fields = _stored(body, {"filter", "mapping"})
    rule = draft_rule(
        workspace, body.evaluator_id, body.revision, fields["filter"], fields["mapping"], body.target.model_dump()
    )
    return await run_trial(services, services.store.engine, rule, body.limit)


@router.get("/online-rules", response_model=RuleList)
async def list_rules(
    services: ServicesDep, workspace: WorkspaceDep, limit: Limit = None, cursor: Cursor = None
) -> RuleList:
    """The workspace's rules, newest first (paged with ``limit`` and ``cursor``)."""
    asked = window(limit, cursor)
    found = await asyncio.to_thread(
        services.online.rules.list, workspace, limit=asked.fetch, before=asked.created_before()
    )
    data, after = asked.answer([rule_model(r) for r in found], lambda r: (r.created_at.isoformat(), r.id))
    return RuleList(data=data, count=len(data), next_cursor=after)


@router.get("/online-rules/{rule_id}", response_model=Rule)
async def get_rule(rule_id: str, services: ServicesDep, workspace: WorkspaceDep) -> Rule:
    """One rule."""
    return rule_model(await asyncio.to_thread(services.online.rules.get, workspace, rule_id))


@router.patch("/online-rules/{rule_id}", response_model=Rule)
async def patch_rule(rule_id: str, body: RulePatch, services: ServicesDep, workspace: WorkspaceDep) -> Rule:
    """Change the fields given (``enabled: false`` pauses; ``revision: null`` scores with the latest)."""
    current = await asyncio.to_thread(services.online.rules.get, workspace, rule_id)
    for name in ("revision", "candidate_revision"):  # a candidate is a revision of the rule's evaluator too
        if name in body.model_fields_set and getattr(body, name) is not None:
            await _check_evaluator(services, workspace, current.evaluator_id, getattr(body, name))
    given = body.model_fields_set
    if given & {"revision", "candidate_revision"}:  # the pair as it will be: a candidate is never the live one
        live = body.revision if "revision" in given else current.revision
        candidate = body.candidate_revision if "candidate_revision" in given else current.candidate_revision
        await _check_candidate(services, workspace, current.evaluator_id, live, candidate)
    changes = _stored(body, set(body.model_fields_set))
    return rule_model(await asyncio.to_thread(services.online.rules.update, workspace, rule_id, changes))


@router.delete("/online-rules/{rule_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_rule(rule_id: str, services: ServicesDep, workspace: WorkspaceDep) -> Response:
    """Delete a rule (its stored scores stay readable through ``/v1/traces``; queued ones are dropped)."""
    await asyncio.to_thread(services.online.rules.delete, workspace, rule_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/online-rules/{rule_id}/scores", response_model=ScoreList)
async def rule_scores(
    rule_id: str,
    services: ServicesDep,
    workspace: WorkspaceDep,
    since: Annotated[datetime | None, Query(description="Enqueued at or after (ISO 8601).")] = None,
    until: Annotated[datetime | None, Query(description="Enqueued before (ISO 8601).")] = None,
    limit: Limit = None,
    cursor: Cursor = None,
) -> ScoreList:
    """The rule's scores (every state), enqueued newest first."""
    await asyncio.to_thread(services.online.rules.get, workspace, rule_id)
    asked = window(limit, cursor)
    found = await asyncio.to_thread(
        services.online.views.of_rule,
        rule_id,
        since=_utc(since),
        until=_utc(until),
        limit=asked.fetch,
        before=asked.created_before(),
    )
    found = await _with_sinks(services, list(found))
    data, after = asked.answer(
        [Score(**s) for s in found], lambda s: (s.enqueued_at.isoformat(), s.target_id or s.trace_id)
    )
    return ScoreList(data=data, count=len(data), next_cursor=after)


@router.get("/online-rules/{rule_id}/stats", response_model=RuleStats)
async def rule_stats(
    rule_id: str,
    services: ServicesDep,
    workspace: WorkspaceDep,
    bucket: Annotated[int, Query(ge=1, le=30 * 86400, description="Bucket width, seconds.")] = 60,
    since: Annotated[datetime | None, Query(description="Start (ISO 8601); default: until - 60 buckets.")] = None,
    until: Annotated[datetime | None, Query(description="End, exclusive (ISO 8601); default: now.")] = None,
) -> RuleStats:
    """Per bucket of ``scored_at``: count, ok/errors, mean score, pass rate, label counts."""
    await asyncio.to_thread(services.online.rules.get, workspace, rule_id)
    end = _utc(until) or datetime.now(UTC)
    start = _utc(since) or end - timedelta(seconds=bucket * 60)
    if start >= end:
        raise LimitError("since must be before until")
    n = -(-int((end - start).total_seconds()) // bucket)
    if n > MAX_BUCKETS:
        raise LimitError(f"{n} buckets asked; at most {MAX_BUCKETS} (a wider bucket, or a shorter range)")
    views = services.online.views
    rows = await asyncio.to_thread(views.stats, rule_id, start, end, bucket)
    queued, dropped = await asyncio.to_thread(views.counted, rule_id, start, end)
    decided = await asyncio.to_thread(services.online.decisions.counts, rule_id, start, end, bucket)
    pending = await asyncio.to_thread(services.online.decisions.pending, rule_id)
    limits = (await asyncio.to_thread(services.online.rules.get, workspace, rule_id)).limits or {}
    minute = timedelta(seconds=services.settings.online_budget_minute_s)  # the scorer's minute
    use = await asyncio.to_thread(usage, services.store.engine, rule_id, datetime.now(UTC), hour=True, minute=minute)
    pace = {
        "scores_last_minute": use.scores_last_minute,
        "sandbox_seconds_last_hour": round(use.sandbox_seconds_last_hour, 3),
        "model_calls_last_minute": use.model_calls_last_minute,  # the egress proxy's count (deciding/model_calls)
        "running": use.running,
        "concurrency": services.online.scorer.windows.size(rule_id),  # this service's AIMD window (429s)
        "concurrency_ceiling": services.online.scorer.windows.ceiling,  # the window when not slowed down
        "limits": limits,
    }
    totals: dict[str, int] = {}
    for per in decided.values():
        for name, k in per.items():
            totals[name] = totals.get(name, 0) + k
    by_index = {r.index: r for r in rows}
    buckets = []
    for i in range(max(n, 1)):
        r = by_index.get(i)
        buckets.append(
            StatsBucket(
                start=start + timedelta(seconds=i * bucket),
                count=r.count if r else 0,
                ok=r.ok if r else 0,
                errors=(r.count - r.ok) if r else 0,
                mean_score=r.mean_score if r else None,
                pass_rate=r.pass_rate if r else None,
                labels=r.labels if r else {},
                decisions=decided.get(i, {}),
            )
        )
    return RuleStats(
        rule_id=rule_id,
        since=start,
        until=end,
        bucket_s=bucket,
        buckets=buckets,
        queued=queued,
        dropped=dropped,
        pending=pending,
        decisions=totals,
        pace=pace,
    )


@router.get("/traces", response_model=TraceList)
async def list_traces(
    services: ServicesDep, workspace: WorkspaceDep, limit: Limit = None, cursor: Cursor = None
) -> TraceList:
    """The workspace's latest traces (first seen newest first) with their scores: the live feed."""
    asked = window(limit or 50, cursor)
    views = services.online.views
    found = await asyncio.to_thread(views.traces, workspace, limit=asked.fetch, before=asked.created_before())
    page, after = asked.answer(found, lambda t: (t.first_seen_at.isoformat(), t.trace_id))
    scores = await asyncio.to_thread(views.of_traces, workspace, [t.trace_id for t in page])
    await _with_sinks(services, [s for listed in scores.values() for s in listed])
    data = [TraceSummary(**t.__dict__, scores=[Score(**s) for s in scores.get(t.trace_id, [])]) for t in page]
    return TraceList(data=data, count=len(data), next_cursor=after)


@router.get("/traces/{trace_id}", response_model=TraceDetail)
async def get_trace(trace_id: str, services: ServicesDep, workspace: WorkspaceDep) -> TraceDetail:
    """One trace: the dict evaluators get, its inputs/outputs, every rule's score of it, and each rule's
    decision — why it was or wasn't scored (docs/online.md, "Why wasn't my trace scored?")."""
    if not _HEX.fullmatch(trace_id):
        raise BadRequest(f"{trace_id[:64]!r} is not a trace id (32 hex digits)")
    trace_id = trace_id.lower()
    engine = services.store.engine

    def read() -> Any:
        with engine.connect() as conn:
            return load_trace(conn, workspace, trace_id, max_spans=services.settings.online_max_trace_spans)

    loaded = await asyncio.to_thread(read)
    if loaded is None:
        raise NotFoundError(f"trace {trace_id!r} does not exist")
    inputs, outputs, _ = mapping.trace_inputs_outputs(loaded.trace)
    scores = await asyncio.to_thread(services.online.views.of_traces, workspace, [trace_id])
    facts = await asyncio.to_thread(services.online.decisions.facts, workspace, trace_id)
    decided: list[Decision] = []
    if facts is not None:
        ref = TraceRef(workspace, trace_id, loaded.root_span_id, span_refs(loaded.spans))
        decided = [Decision(**d) for d in derive(facts, ref, services.settings, datetime.now(UTC))]
    await _with_sinks(services, scores[trace_id])
    return TraceDetail(
        trace_id=trace_id,
        state=loaded.state,
        service_name=loaded.service_name,
        root_span_id=loaded.root_span_id,
        trace=loaded.trace,
        inputs=inputs,
        outputs=outputs,
        scores=[Score(**s) for s in scores[trace_id]],
        decisions=decided,
    )
