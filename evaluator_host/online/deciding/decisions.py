"""Why each (rule, target) of a trace was or wasn't scored: the ``decisions`` of ``GET /v1/traces/{id}``.

Contract (docs/online.md, "Why wasn't my trace scored?"): :func:`derive` gives one decision per rule
of the trace's workspace — those not deleted, and deleted ones that left a row of this trace — and,
for a span-level rule, one per scored span plus one per other span of the trace, in rule creation
order. Each is ``{"rule_id", "target" (the span id at span level; null: the trace), "decision",
"reason", "at", "until", "attempts"}``:

* a score row (``online_scores``): ``queued``; ``running`` (claimed until ``until``); ``retrying``
  (back in the queue after an infrastructure error: the reason quotes it, ``until`` its next try);
  ``delayed`` (back in the queue by a budget: the reason names it, ``until`` when it resumes);
  ``scored`` (status ok) / ``failed`` (the result's status and error); ``dropped`` (the backlog was
  full when routed, or the rule was deleted before it was scored);
* a routing decision (``online_decisions``): ``not_matched`` (the first failed filter condition),
  ``sampled_out``, ``dropped`` (the rule was paused) — as stored when the trace was routed;
* neither: the trace not routed yet → ``not_ready`` (``until``: the latest it becomes ready, by its
  own readiness wait) or, once ready, waiting for the router; routed before the rule was created →
  ``not_routed`` (the reason names the rule's backfill, which scores it); routed before decisions were stored
  (migration 0015) → recomputed from the rule as it is now, and said so;
* at span level, a span with no row: ``not_matched`` with the first failed condition of the rule's
  filter as it is now, or ``not_routed`` when it matches (it arrived after the trace was routed; the reason
  names the rule's backfill).

Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from evaluator_host.evaluation.trace_shape import SpanData
from evaluator_host.observability.tracing import MARKER
from evaluator_host.online.deciding.explain import first_failure, why_not
from evaluator_host.settings import Settings
from evaluator_host.store.online.decisions import TraceFacts
from evaluator_host.store.online.refs import SpanRef, TraceRef
from evaluator_host.store.online.rules import RuleRecord

__all__ = ["DECISIONS", "derive", "span_refs"]

DECISIONS = (
    "not_matched",
    "sampled_out",
    "not_ready",
    "queued",
    "running",
    "retrying",
    "delayed",
    "scored",
    "failed",
    "dropped",
    "not_routed",
)


def _backfill(rule_id: str, what: str) -> str:
    """A ``not_routed`` reason: why, and the backfill that scores it (a trial, ``rules test``, stores nothing)."""
    return (
        f"{what}; score it with a backfill: POST /v1/online-rules/{rule_id}/backfill "
        f"(`evaluator-host rules backfill {rule_id} --dry-run` first), which scores the stored traces the rule missed"
    )


def span_refs(spans: Sequence[SpanData]) -> list[SpanRef]:
    """Routing's view of loaded spans (start order kept)."""
    out = []
    for s in spans:
        marked = any(part.get(MARKER) in (True, "true") for part in (s.attributes, s.resource))
        out.append(
            SpanRef(
                s.span_id,
                s.name,
                s.resource.get("service.name"),
                s.start_ns,
                "",
                _attributes=dict(s.attributes),
                _evaluation=marked,
            )
        )
    return out


def _iso(at: datetime | None) -> str:
    return "now" if at is None else at.isoformat(timespec="seconds")


def _entry(rule_id: str, target: str | None, decision: str, reason: str, at: datetime, **kw: Any) -> dict[str, Any]:
    return {
        "rule_id": rule_id,
        "target": target,
        "decision": decision,
        "reason": reason,
        "at": at,
        "until": kw.get("until"),
        "attempts": kw.get("attempts", 0),
    }


def _of_score(rule: RuleRecord, row: dict[str, Any], settings: Settings, now: datetime) -> dict[str, Any]:
    target = row["span_id"] if rule.level == "span" else None
    state, attempts, until = row["state"], row["attempts"], row["claimed_until"]
    at, err = row["enqueued_at"], row["last_error"]
    if state == "done":
        result = json.loads(row["result"]) if row["result"] else {}
        if row["status"] == "ok":
            said = f"score {row['score']}, passed {row['passed']}, label {row['label']!r}"
            return _entry(rule.id, target, "scored", said, row["scored_at"] or at, attempts=attempts)
        error = result.get("error") or {}
        said = f"status {row['status']}" + (f": {error.get('type')}: {error.get('message')}" if error else "")
        return _entry(rule.id, target, "failed", said[:500], row["scored_at"] or at, attempts=attempts)
    if state == "dropped":
        if row["status"] == "rule_deleted":
            said = "the rule was deleted before it was scored"
        elif row["status"] == "retention":
            said = "retention deleted the trace's spans (ONLINE_SPAN_RETENTION_S) before it was scored"
        elif row["status"]:
            said = f"dropped: {row['status']}"
        else:
            said = (
                f"the scoring backlog was full (online_backlog_max = {settings.online_backlog_max} scores "
                "queued or running) when the trace was routed"
            )
        return _entry(rule.id, target, "dropped", said, at, attempts=attempts)
    if state == "running":
        said = f"attempt {attempts}, claimed until {_iso(until)}" + (f"; the last one failed: {err}" if err else "")
        return _entry(rule.id, target, "running", said, at, until=until, attempts=attempts)
    ahead = until is not None and until > now
    if row["delayed_by"] and ahead:
        by = row["delayed_by"]
        value = (rule.limits or {}).get(by)
        said = f"over the budget {by}" + ("" if value is None else f" = {value:g}") + f": resumes at {_iso(until)}"
        if by == "rate_limited":
            said = (
                "the judge refused it for its rate (RateLimited, or a 429 the egress proxy saw): the rule slowed "
                f"down; resumes at {_iso(until)}"
            )
        elif by == "concurrency":
            said = f"the rule's concurrency, lowered after a judge's rate limits, is full: resumes at {_iso(until)}"
        return _entry(rule.id, target, "delayed", said, at, until=until, attempts=attempts)
    if err:
        said = f"attempt {attempts} failed: {err}; tried again at {_iso(until if ahead else None)}"
        return _entry(rule.id, target, "retrying", said, at, until=until if ahead else None, attempts=attempts)
    return _entry(rule.id, target, "queued", "waiting for a scoring slot", at, attempts=attempts)


def _not_ready(rule: RuleRecord, facts: TraceFacts, settings: Settings) -> dict[str, Any]:
    if facts.state == "ready":
        said = f"ready since {_iso(facts.ready_at)}; waiting for the router (every {settings.online_poll_s:g} s)"
        return _entry(rule.id, None, "not_ready", said, facts.ready_at or facts.last_span_at)
    timeout = facts.last_span_at + timedelta(seconds=settings.online_trace_timeout_s)
    if facts.root_ended_at is None:
        said = (
            f"waiting for the root span to end; ready at the latest at {_iso(timeout)} "
            f"(ONLINE_TRACE_TIMEOUT_S = {settings.online_trace_timeout_s:g} s after its last span)"
        )
        return _entry(rule.id, None, "not_ready", said, facts.last_span_at, until=timeout)
    quiet = facts.last_span_at + timedelta(seconds=settings.online_quiet_period_s)
    said = (
        f"waiting for the trace to be quiet: ready at {_iso(quiet)} at the latest (ONLINE_QUIET_PERIOD_S = "
        f"{settings.online_quiet_period_s:g} s after its last span; ONLINE_SETTLE_S when every span's parent is in)"
    )
    return _entry(rule.id, None, "not_ready", said, facts.last_span_at, until=quiet)


def _other_spans(rule: RuleRecord, refs: Sequence[SpanRef], done: set[str], at: datetime) -> list[dict[str, Any]]:
    out = []
    for span in refs:
        if span.span_id in done or span.evaluation:
            continue
        failure = first_failure(rule.filter, span)
        if failure is None:
            said = _backfill(rule.id, "the span arrived after the trace was routed")
            out.append(_entry(rule.id, span.span_id, "not_routed", said, at))
        else:
            out.append(_entry(rule.id, span.span_id, "not_matched", failure, at))
    return out


def derive(facts: TraceFacts, trace: TraceRef, settings: Settings, now: datetime) -> list[dict[str, Any]]:
    """The decisions of one trace (see the module docstring); ``trace``'s spans in start order."""
    out: list[dict[str, Any]] = []
    for rule in facts.rules:
        rows = [s for s in facts.scores if s["rule_id"] == rule.id]
        routed = facts.routed_at or facts.last_span_at
        if rows:
            out.extend(_of_score(rule, row, settings, now) for row in rows)
            if rule.level == "span" and facts.state == "routed":
                out.extend(_other_spans(rule, trace.spans, {r["span_id"] for r in rows}, routed))
        elif rule.id in facts.decided:
            decision, reason, at = facts.decided[rule.id]
            out.append(_entry(rule.id, None, decision, reason, at))
        elif facts.state != "routed":
            out.append(_not_ready(rule, facts, settings))
        elif facts.routed_at is not None and rule.created_at > facts.routed_at:
            said = _backfill(rule.id, "the rule was created after the trace was routed")
            out.append(_entry(rule.id, None, "not_routed", said, rule.created_at))
        else:  # routed before migration 0015 stored decisions (or the rule came in during that routing)
            decision, reason = why_not(trace, rule)
            said = f"{reason} (recomputed with the rule as it is now: no decision was kept when the trace was routed)"
            out.append(_entry(rule.id, None, decision, said, facts.last_span_at))
    return out
