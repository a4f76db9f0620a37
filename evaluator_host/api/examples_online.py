"""Examples of the online schemas (rules, scores, traces, decisions, budgets, sinks) for the OpenAPI document:
merged into :data:`evaluator_host.api.examples.EXAMPLES`, checked by ``tests/api/test_openapi.py``."""

from __future__ import annotations

from typing import Any

__all__ = ["ONLINE"]

_WHEN = "2026-11-22T12:00:00Z"
_T = "4bf92f3577b34da6a3ce929d0e0e4736"
_FILTER = {
    "service_name": "chat-api",
    "span_name": "chat",
    "attributes": [{"key": "deployment.environment", "equals": "prod"}],
}
_MAPPING = {"inputs": "root.attributes.ag.data.inputs", "outputs": "span[name=llm].outputs"}
_RULE = {
    "id": "rule_3f9a2c", "name": "prod-chats", "evaluator_id": "ev_8c1f2d", "revision": None, "filter": _FILTER,
    "sampling_rate": 0.5, "mapping": _MAPPING, "target": {"level": "trace"}, "enabled": True,
    "created_at": _WHEN, "updated_at": _WHEN,
}  # fmt: skip
_SCORE = {
    "rule_id": _RULE["id"], "trace_id": _T, "span_id": "00f067aa0ba902b7", "target_id": _T, "state": "done",
    "status": "ok",
    "score": 1.0, "passed": True, "label": None, "evaluator_id": "ev_8c1f2d", "revision": 1,
    "runtime_id": "python-ab541290a9a78bc6d9bf", "attempts": 1, "enqueued_at": _WHEN, "scored_at": _WHEN,
    "duration_ms": 1.9, "result": {"status": "ok", "score": 1.0, "passed": True},
}  # fmt: skip
_SESSION_SUMMARY = {
    "session_id": "conv-42",
    "num_traces": 3,
    "first_seen_at": "2026-11-25T12:00:00Z",
    "last_span_at": "2026-11-25T12:00:05Z",
}
_TRIAL = {
    "trace_id": _T, "span_id": "00f067aa0ba902b7", "session_id": None, "status": "ok", "score": 1.0,
    "passed": True, "label": None, "reason": "the answer is right", "inputs": "2+2?", "outputs": "4",
    "duration_ms": 1.9,
}  # fmt: skip
_BUCKET = {"start": _WHEN, "count": 20, "ok": 20, "errors": 0, "mean_score": 0.65, "pass_rate": 0.65, "labels": {}}
_SUMMARY = {
    "trace_id": _T, "state": "routed", "service_name": "chat-api", "root_name": "chat", "span_count": 2,
    "first_seen_at": _WHEN, "last_span_at": _WHEN, "scores": [_SCORE],
}  # fmt: skip
ONLINE: dict[str, list[Any]] = {
    "AttributeCondition": [{"key": "deployment.environment", "equals": "prod"}, {"key": "user.id", "exists": True}],
    "RuleFilter": [_FILTER],
    "RuleMapping": [_MAPPING],
    "RuleCreate": [
        {"evaluator_id": "ev_8c1f2d", "sampling_rate": 1.0},
        {"evaluator_id": "ev_8c1f2d", "revision": 3, "candidate_revision": 4},
        {k: v for k, v in _RULE.items() if "_at" not in k and k != "id"},
    ],
    "RulePatch": [
        {"enabled": False},
        {"sampling_rate": 0.1, "revision": 2},
        {"candidate_revision": 4},  # issue 53: scored beside the live revision (shadow); null clears it
    ],
    "RuleTarget": [{"level": "trace"}, {"level": "span"}, {"level": "session", "quiet_s": 300}],
    "SessionSummary": [_SESSION_SUMMARY],
    "SessionList": [{"data": [_SESSION_SUMMARY], "count": 1, "next_cursor": None}],
    "SessionDetail": [
        {
            **_SESSION_SUMMARY,
            "traces": [],
            "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"}],
            "duration_ms": 5230.0,
            "truncated": False,
            "inputs": {"messages": [{"role": "user", "content": "hi"}], "prompt": "hi"},
            "outputs": "Hello!",
            "scores": [],
        }
    ],
    "BackfillCreate": [
        {"since": "2026-11-01T00:00:00Z", "dry_run": True},
        {"since": "2026-11-01T00:00:00Z", "limit": 5000},
    ],
    "BackfillDryRun": [{"traces": 1200, "targets": 1200, "already_scored": 200, "estimate_s": 3.1, "revision": 2}],
    "Backfill": [
        {
            "id": "bf_3e1a9c",
            "rule_id": "rule_5b2e",
            "status": "running",
            "total": 1000,
            "done": 250,
            "skipped": 200,
            "cached": 120,
            "failed": 0,
            "reason": None,
            "queued": 750,
            "cancelled": 0,
            "since": "2026-11-01T00:00:00Z",
            "until": "2026-11-25T12:00:00Z",
            "limit": 100000,
            "revision": 2,
            "created_at": "2026-11-25T12:00:00Z",
        }
    ],
    "Sink": [
        {"type": "phoenix", "url": "http://phoenix:6006"},
        {
            "type": "langfuse",
            "url": "https://cloud.langfuse.com",
            "public_key": "pk-lf-1",
            "secret_key": "{{secret:LF_SK}}",
        },
    ],
    "Redeliver": [{"states": ["failed"]}],
    "Redelivered": [
        {"requeued": 3},
        {"requeued": 0, "message": "nothing to send again: no delivery of this rule is failed"},
    ],
    "SinkState": [{"type": "langfuse", "state": "pending", "attempts": 2, "error": "HTTP 503: unavailable"}],
    "RuleTest": [
        {
            "evaluator_id": "ev_8c1f2d",
            "filter": {"attributes": [{"key": "openinference.span.kind", "equals": "LLM"}]},
            "target": {"level": "span"},
            "limit": 20,
        }
    ],
    "RuleTestResult": [_TRIAL],
    "RuleTestAnswer": [
        {"results": [_TRIAL], "matched": 1, "scanned_traces": 12, "message": None},
        {
            "results": [],
            "matched": 0,
            "scanned_traces": 12,
            "message": "nothing matched: no span of the 12 newest stored traces matches this rule's filter",
        },
    ],
    "Rule": [_RULE],
    "RuleLimits": [{"scores_per_minute": 600}, {"scores_per_minute": 120, "sandbox_seconds_per_hour": 900.0}],
    "Decision": [
        {
            "rule_id": _RULE["id"],
            "target": None,
            "decision": "scored",
            "reason": "scored: ok (score 1.0)",
            "at": _WHEN,
            "until": None,
            "attempts": 1,
        },
        {
            "rule_id": "rule_2c7e5a1f9b3d8e6c4a0f",
            "target": None,
            "decision": "not_matched",
            "reason": 'service_name is "billing", not "chat-api"',
            "at": _WHEN,
            "until": None,
            "attempts": 0,
        },
    ],
    "RuleList": [{"data": [_RULE], "count": 1, "next_cursor": None}],
    "Score": [_SCORE],
    "ScoreList": [{"data": [_SCORE], "count": 1, "next_cursor": None}],
    "StatsBucket": [_BUCKET],
    "RuleStats": [
        {
            "rule_id": _RULE["id"],
            "since": _WHEN,
            "until": _WHEN,
            "bucket_s": 60,
            "buckets": [_BUCKET],
            "queued": 0,
            "dropped": 0,
        }
    ],
    "TraceSummary": [_SUMMARY],
    "TraceList": [{"data": [_SUMMARY], "count": 1, "next_cursor": None}],
    "TraceDetail": [
        {
            "trace_id": _T,
            "state": "routed",
            "service_name": "chat-api",
            "root_span_id": "00f067aa0ba902b7",
            "trace": {"trace_id": _T, "spans": {}},
            "inputs": {"prompt": "2+2?"},
            "outputs": "4",
            "scores": [_SCORE],
        }
    ],  # fmt: skip
}
