"""Try before live (``POST /v1/online-rules/test``, issue 50): a rule's body scored now on the latest
matching stored targets, nothing stored.

Contract:

* :func:`find_targets` reads the workspace's stored traces newest first (first seen; any state: an open
  trace is scored with the spans it has so far), at most :data:`SCAN_TRACES` of them and at most
  :data:`SCAN_SPANS` spans in all (by their rows' span counts, read before any span: a trial of a filter
  that matches nothing costs a bounded read), each bounded like the scorer's (``online_max_trace_spans``),
  and keeps the targets :func:`~evaluator_host.online.deciding.router.decide` names for the rule — sampling left
  out (a trial shows how the evaluator scores, not which traces a rate would pick) — until ``limit``
  targets are found. Memory: at most ``limit`` traces kept. At session level the targets are the
  sessions (by the rule's key) one of whose scanned traces matches, newest first, each made of its
  scanned traces in start order (the traces of sessions are kept: at most the scan's bound).
* :func:`run_trial` builds each target's case as the scorer does
  (:func:`~evaluator_host.online.scoring.scorer.build_case`: a mapping path that finds nothing is an ``error``
  result, as online) and runs the cases in ONE call of the stored evaluator through
  :func:`~evaluator_host.evaluation.usecases.evaluate_stored`: the case-count limit and the workspace's
  ``max_evaluations_per_s`` are charged as for any call (``QuotaExceeded``, 429). Nothing is written to
  ``online_scores``.
* Nothing matched is not success: the answer has ``matched: 0``, no results, and a ``message`` saying
  how many traces were looked at.

Blocking reads run in a thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine

from evaluator_host.evaluation.models import Case, ErrorInfo, EvaluationResult
from evaluator_host.evaluation.usecases import Components, evaluate_stored
from evaluator_host.observability.tracing import MARKER
from evaluator_host.online.deciding.router import decide, join_sessions
from evaluator_host.online.levels.cases import Refused, build_case
from evaluator_host.online.levels.sessions import session_case
from evaluator_host.online.levels.traces import LoadedTrace, load_trace
from evaluator_host.online.models import RuleTestAnswer, RuleTestResult
from evaluator_host.store.online.rows import OnlineTraceRow
from evaluator_host.store.online.rules import RuleRecord
from evaluator_host.store.online.scores import SpanRef, TraceRef

__all__ = ["SCAN_SPANS", "SCAN_TRACES", "Target", "draft_rule", "find_targets", "run_trial"]

SCAN_TRACES = 1000  # the newest stored traces a trial looks at
SCAN_SPANS = 100_000  # and the spans it reads in all (the first trace is always read)


@dataclass(frozen=True)
class Target:
    """One matching target: its trace and the evaluated span (a session: its latest trace, and its traces)."""

    loaded: LoadedTrace
    span_id: str | None
    session_id: str | None = None
    session: tuple[LoadedTrace, ...] = ()


def _refs(loaded: LoadedTrace, workspace_id: str) -> TraceRef:
    spans = [
        SpanRef(
            s.span_id,
            s.name,
            None if s.resource.get("service.name") is None else str(s.resource.get("service.name")),
            s.start_ns,
            "",
            dict(s.attributes),
            any(part.get(MARKER) in (True, "true") for part in (s.attributes, s.resource)),
            dict(s.resource),
        )
        for s in loaded.spans
    ]
    return TraceRef(workspace_id, loaded.trace_id, loaded.root_span_id, spans)


def find_targets(
    engine: Engine, workspace_id: str, rule: RuleRecord, limit: int, max_spans: int
) -> tuple[list[Target], int]:
    """Up to ``limit`` targets of ``rule`` among the newest stored traces, and how many traces were read."""
    t = OnlineTraceRow
    query = select(t.trace_id, t.span_count).where(t.workspace_id == workspace_id)
    query = query.order_by(t.first_seen_at.desc(), t.trace_id.desc()).limit(SCAN_TRACES)
    whole = RuleRecord(**{**rule.__dict__, "sampling_rate": 1.0})
    found: list[Target] = []
    sessions: dict[str, list[LoadedTrace]] = {}  # session level: the scanned traces of each session
    matched: list[str] = []  # and the sessions one of whose traces matched, newest first
    scanned = spans = 0
    with engine.connect() as conn:
        for trace_id, span_count in list(conn.execute(query)):
            spans += min(int(span_count), max_spans)
            if scanned and spans > SCAN_SPANS:
                break
            loaded = load_trace(conn, workspace_id, trace_id, max_spans=max_spans)
            if loaded is None:
                continue  # deleted by retention meanwhile
            scanned += 1
            if rule.level == "session":
                for sid, rule_ids in join_sessions(_refs(loaded, workspace_id), [whole]):
                    if rule_ids:
                        sessions.setdefault(sid, []).append(loaded)
                        if sid not in matched:
                            matched.append(sid)
                continue
            for _, span_id in decide(_refs(loaded, workspace_id), [whole]):
                found.append(Target(loaded, span_id))
                if len(found) >= limit:
                    return found, scanned
    for sid in matched[:limit]:  # each session's traces in start order (the scan read newest first)
        traces = tuple(sorted(sessions[sid], key=lambda t: min((s.start_ns for s in t.spans), default=0)))
        found.append(Target(traces[-1], None, sid, traces))
    return found, scanned


def _result(target: Target, case: Case | None, result: EvaluationResult) -> RuleTestResult:
    return RuleTestResult(
        trace_id=target.loaded.trace_id,
        span_id=target.span_id,
        session_id=target.session_id,
        status=result.status,
        score=result.score,
        passed=result.passed,
        label=result.label,
        reason=result.reason if result.error is None else result.error.message,
        inputs=None if case is None else case.inputs,
        outputs=None if case is None else case.outputs,
        duration_ms=result.duration_ms,
    )


async def run_trial(components: Components, engine: Engine, rule: RuleRecord, limit: int) -> RuleTestAnswer:
    """Score ``rule`` (not stored; ``rule.id`` unused) on its latest ``limit`` targets: see the module docstring."""
    max_spans = components.settings.online_max_trace_spans
    targets, scanned = await asyncio.to_thread(find_targets, engine, rule.workspace_id, rule, limit, max_spans)
    if not targets:
        level = rule.level
        return RuleTestAnswer(
            results=[],
            matched=0,
            scanned_traces=scanned,
            message=f"nothing matched: no {level} of the {scanned} newest stored traces matches this rule's filter"
            + ("" if scanned else " (this workspace has no stored traces)"),
        )
    cases: list[tuple[Target, Case | EvaluationResult]] = []
    for target in targets:
        try:
            if target.session_id is not None:
                cases.append((target, session_case(target.session_id, target.session, None, rule.mapping)))
                continue
            cases.append((target, build_case(target.loaded, target.span_id, rule.mapping)))
        except Refused as exc:
            error = ErrorInfo(type=exc.kind, message=str(exc))
            refused = EvaluationResult(
                status="error", error=error, interface="evaluate", runtime={}, evaluator_id=rule.evaluator_id
            )
            cases.append((target, refused))
    runnable = [c for _, c in cases if isinstance(c, Case)]
    got: Iterator[EvaluationResult] = iter([])
    if runnable:
        ran = await evaluate_stored(components, rule.workspace_id, rule.evaluator_id, rule.revision, runnable)
        got = iter(ran.results)
    results = []
    for target, case in cases:
        if isinstance(case, Case):
            results.append(_result(target, case, next(got)))
        else:
            results.append(_result(target, None, case))
    return RuleTestAnswer(results=results, matched=len(targets), scanned_traces=scanned)


def draft_rule(
    workspace_id: str,
    evaluator_id: str,
    revision: int | None,
    flt: dict[str, Any],
    rule_mapping: dict[str, Any] | None,
    target: dict[str, Any] | None,
) -> RuleRecord:
    """The record of a rule body that is not stored (a trial's): sampling left out."""
    now = datetime.now(UTC)
    return RuleRecord(
        id="rule_trial",
        workspace_id=workspace_id,
        name=None,
        evaluator_id=evaluator_id,
        revision=revision,
        filter=flt,
        sampling_rate=1.0,
        mapping=rule_mapping,
        enabled=True,
        created_at=now,
        updated_at=now,
        target=target,
    )
