"""Examples of every public schema, for the OpenAPI document (``/openapi.json``, ``/docs``).

Kept apart from the models (they would double ``models.py``) and put into the document's
``components.schemas`` by :func:`with_examples` when the app builds it; a schema that already
has examples (its model declares them) keeps its own. ``tests/api/test_openapi.py`` checks that
every schema has one and that each validates against its schema.
"""

from __future__ import annotations

from typing import Any

from evaluator_host.api.examples_online import ONLINE as _ONLINE
from evaluator_host.api.examples_review import REVIEW as _REVIEW
from evaluator_host.api.examples_shadow import SHADOW as _SHADOW
from evaluator_host.definitions import languages

__all__ = ["EXAMPLES", "with_examples"]

_LANGUAGE = languages.DEFAULT
_RUNTIME_ID = f"{languages.get(_LANGUAGE).family.name}-5f0c2e8a9d1b3c4e7f60"
_CODE = 'def evaluate(inputs, outputs, trace):\n    return outputs == inputs["correct_answer"]\n'
_LEGACY = "def evaluate(app_params, inputs, output, correct_answer):\n    return output == correct_answer\n"
_WHEN = "2026-11-22T12:00:00Z"
_SETTINGS = {"timeout_s": 10.0, "memory_mb": 256, "threshold": 1.0, "correct_answer_key": "correct_answer",
             "policy": "standard"}  # fmt: skip
_STATS = {"mean": 0.5, "std": 0.7071, "min": 0.0, "max": 1.0, "count": 2, "nan_count": 0}
_AGGREGATE = {"count": 2, "errors": 0, "score": _STATS, "outputs": {}, "pass_rate": 0.5, "labels": {}}
_RUNTIME = {"id": _RUNTIME_ID, "language": _LANGUAGE, "packages": {}, "policy": "standard"}
_RESULT = {
    "status": "ok", "score": 1.0, "passed": True, "outputs": {}, "details": {}, "reason": None, "label": None,
    "error": None, "warnings": [], "stdout": "", "stderr": "", "truncated": False, "duration_ms": 0.8,
    "interface": "evaluate", "runtime": _RUNTIME,
}  # fmt: skip
_ERROR_INFO = {"type": "KeyError", "message": "'correct_answer'", "line": 2,
               "traceback": 'File "evaluator.py", line 2, in evaluate\nKeyError: \'correct_answer\''}  # fmt: skip
_CASE = {"inputs": {"correct_answer": "Paris"}, "outputs": "Paris", "trace": None, "app_params": None}
_EVALUATOR = {
    "id": "ev_3f9a1c2b7d8e4f60", "name": "exact", "description": "", "revision": 1, "language": _LANGUAGE,
    "interface": "evaluate", "code": _CODE, "packages": {}, "settings": _SETTINGS,
    "runtime_id": _RUNTIME_ID, "created_at": _WHEN, "updated_at": _WHEN,
    "capabilities": {}, "warnings": [], "secrets": [], "network": [],
}  # fmt: skip
_DATASET = {"id": "ds_8c1d2e3f4a5b6c7d8e9f", "name": "rows", "row_count": 2,
            "columns": ["q", "correct_answer", "model_expression"], "format": "jsonl", "bytes": 142,
            "created_at": _WHEN}  # fmt: skip
_ROW = {"index": 0, "row": {"q": "2+2", "correct_answer": "4", "model_expression": "4"}}
_HISTOGRAM = {"edges": [i / 10 for i in range(11)], "counts": [1, 0, 0, 0, 0, 0, 0, 0, 0, 1], "below": 0, "above": 0}
_PROBLEM = {"type": "SyntaxError", "message": "expected ':'", "line": 1, "column": 36, "package": None}
_PIN = {"name": "numpy", "version": "2.1.3", "ok": True, "normalized": "numpy", "message": None}
_MAPPING = {"outputs": "model_expression", "trace": None, "inputs": None, "app_params": None}
_JOB = {
    "id": "job_0a1b2c3d4e5f6a7b8c9d", "evaluator_id": _EVALUATOR["id"], "revision": 1, "status": "succeeded",
    "progress": {"total": 2, "done": 2, "failed": 0}, "rows_per_s": 850.0, "created_at": _WHEN,
    "started_at": _WHEN, "finished_at": _WHEN, "aggregate": _AGGREGATE, "error": None,
    "dataset_id": _DATASET["id"], "field_mapping": _MAPPING, "parallelism": 2,
    "runtime_id": _RUNTIME_ID, "warnings": [],
}  # fmt: skip
_TARGET = {"base_url": "http://llm.local:8080/v1", "model": "qwen2.5-7b", "prompt": "Q: {{ q }}",
           "api_key_secret": "LLM_KEY", "concurrency": 32, "max_calls": 1000}  # fmt: skip
_TOKENS = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
_GENERATION = {"messages": [{"role": "user", "content": "Q: 2+2"}], "text": "4", "finish_reason": "stop",
               "usage": _TOKENS, "latency_ms": 212.4, "attempts": 1, "error": None}  # fmt: skip
_MIGRATED = {
    "code": 'def evaluate(inputs, outputs, trace):\n    return outputs == inputs["correct_answer"]\n',
    "changed": True, "interface_before": "legacy", "interface_after": "evaluate",
    "diff": "--- a/evaluator\n+++ b/evaluator\n@@ -1,2 +1,2 @@\n-def evaluate(app_params, inputs, output, "
    "correct_answer):\n-    return output == correct_answer\n+def evaluate(inputs, outputs, trace):\n"
    '+    return outputs == inputs["correct_answer"]\n',
    "notes": [], "rules": ["signature", "correct_answer"],
    "reads": {"output": True, "correct_answer": True, "app_params": []},
}  # fmt: skip
_ERROR = {"type": "NotFound", "message": "evaluator 'ev_nope' does not exist", "line": None, "column": None}
_QUOTAS = {"max_concurrent_jobs": 4, "max_warm_workers": 8, "max_dataset_bytes": 1_000_000_000,
           "max_evaluations_per_s": 200.0}  # fmt: skip
_WORKSPACE = {"id": "ws_6b2f0e9c4d1a8e7f3c50", "name": "team-search", "created_at": _WHEN, "quotas": _QUOTAS,
              "network_allow": ["api.openai.com:443"]}  # fmt: skip
_KEY = {"id": "key_1e4c9a7b2d5f8e3a6c0b", "workspace_id": _WORKSPACE["id"], "name": "ci", "prefix": "evh_Xq3vT9",
        "created_at": _WHEN, "last_used_at": "2026-11-22T12:05:00Z", "revoked_at": None}  # fmt: skip
_SECRET = {"name": "OPENAI_API_KEY", "created_at": _WHEN, "updated_at": _WHEN}
_JUDGE = 'import os\n\ndef evaluate(inputs, outputs, trace):\n    return bool(os.environ["OPENAI_API_KEY"])\n'

# a destination whose requests the egress proxy completes with a workspace secret (the code never has it)
_CALLS_API = (
    "import urllib.request\n\ndef evaluate(inputs, outputs, trace):\n"
    '    return urllib.request.urlopen("https://api.openai.com/v1/models").status == 200\n'
)
_INJECTING = {"host": "api.openai.com:443", "headers": {"Authorization": "Bearer {{secret:OPENAI_API_KEY}}"}}
_FIXTURE = {"name": "paris", "inputs": {"correct_answer": "Paris"}, "outputs": "Paris", "expect": {"passed": True}}
_OUTCOME = {"name": "lyon", "passed": False, "problems": ["passed true, expected false"], "status": "ok",
            "score": 1.0, "result_passed": True, "label": None, "error": None}  # fmt: skip
_FIXTURE_REPORT = {"passed": 1, "failed": 1, "results": [{**_OUTCOME, "name": "paris", "passed": True,
                   "problems": []}, _OUTCOME]}  # fmt: skip
_SIDE = {"status": "ok", "score": 1.0, "passed": True, "label": None, "error": None}
_FLIPPED = {"index": 1, "flipped": True, "fields": ["passed", "score"], "base": _SIDE,
            "head": {**_SIDE, "score": 0.0, "passed": False}, "delta": -1.0}  # fmt: skip
_COMPARISON = {
    "evaluator_id": _EVALUATOR["id"], "base_revision": 1, "head_revision": 2, "compared": 2, "flipped": [1],
    "deltas": {"pass_rate": -0.5, "mean_score": -0.5, "errors": 0,
               "flipped": {"status": 0, "passed": 1, "label": 0, "score": 1}},
    "base": {**_AGGREGATE, "score": {**_STATS, "mean": 1.0, "std": 0.0, "min": 1.0}, "pass_rate": 1.0},
    "head": _AGGREGATE, "rows": [_FLIPPED], "next_offset": None,
}  # fmt: skip
_FIXTURES: dict[str, list[Any]] = {
    "Fixture": [_FIXTURE, {"name": "too long", "outputs": "x" * 20, "expect": {"score": 0.0, "tolerance": 0.01}}],
    "FixtureExpect": [{"passed": True}, {"score": 0.8, "tolerance": 0.05}, {"status": "error"}],
    "FixtureOutcome": [_OUTCOME],
    "FixtureReport": [_FIXTURE_REPORT],
    "EvaluatorTestRequest": [{}, {"revision": 2}],
    "EvaluatorTestResponse": [{**_FIXTURE_REPORT, "evaluator_id": _EVALUATOR["id"], "revision": 2, "draft": True}],
    "CompareRequest": [
        {"base_revision": 1, "head_revision": 2, "cases": [_CASE, {**_CASE, "outputs": "Lyon"}]},
        {
            "base_revision": 1,
            "head_revision": 2,
            "dataset_id": _DATASET["id"],
            "sample": 500,
            "tolerance": 0.05,
            "only_flipped": True,
        },
    ],  # fmt: skip
    "CompareResponse": [_COMPARISON],
}

EXAMPLES: dict[str, list[Any]] = {
    "Stats": [_STATS],
    "Aggregate": [_AGGREGATE],
    "Case": [_CASE],
    "EvaluatorSettings": [{"timeout_s": 5, "memory_mb": 512, "threshold": 0.8}],
    "EvaluateRequest": [
        {"language": _LANGUAGE, "code": _CODE, "inputs": {"correct_answer": "Paris"}, "outputs": "Paris"},
        {
            "language": _LANGUAGE,
            "code": _CODE,
            "packages": {"numpy": "1.26.4"},
            "cases": [_CASE, {**_CASE, "outputs": "Lyon"}],
        },
    ],  # fmt: skip
    "EvaluationResult": [_RESULT, {**_RESULT, "status": "error", "score": None, "passed": None, "error": _ERROR_INFO}],
    "ErrorInfo": [_ERROR_INFO],
    "BatchResponse": [{"results": [_RESULT, {**_RESULT, "score": 0.0, "passed": False}], "aggregate": _AGGREGATE}],
    "ErrorDetail": [_ERROR],
    "ErrorBody": [{"error": _ERROR}],
    "EvaluatorCreate": [
        {"name": "exact", "language": _LANGUAGE, "code": _CODE, "settings": {"threshold": 1}},
        {
            "name": "judge",
            "language": _LANGUAGE,
            "code": _JUDGE,
            "secrets": ["OPENAI_API_KEY"],
            "network": ["api.openai.com:443"],
        },
        {
            "name": "judge (key never in the sandbox)",
            "language": _LANGUAGE,
            "code": _CALLS_API,
            "network": [_INJECTING],
        },
        {"name": "exact", "language": _LANGUAGE, "code": _CODE, "fixtures": [_FIXTURE]},
    ],  # fmt: skip
    "EvaluatorPatch": [
        {"code": _CODE.replace("outputs ==", "outputs.strip() ==")},
        {"code": _CODE, "fixtures": [_FIXTURE], "force": True},
    ],
    "EvaluatorEvaluateRequest": [
        {"inputs": {"correct_answer": "a"}, "outputs": "a"},
        {"revision": 1, "cases": [_CASE]},
    ],
    "Evaluator": [_EVALUATOR],
    "EvaluatorList": [{"data": [_EVALUATOR], "count": 1, "next_cursor": None}],
    "RevisionList": [{"data": [_EVALUATOR], "count": 1, "next_cursor": None}],
    "Dataset": [_DATASET],
    "DatasetList": [{"data": [_DATASET], "count": 1, "next_cursor": None}],
    "FieldMapping": [{"outputs": "model_expression"}, {"outputs": "response.text", "inputs": ["q", "correct_answer"]}],
    "JobCreate": [
        {"evaluator_id": _EVALUATOR["id"], "dataset_id": _DATASET["id"], "field_mapping": {"outputs": "answer"}},
        {"evaluator_id": _EVALUATOR["id"], "rows": [{"correct_answer": "4", "outputs": "4"}]},
        {"evaluator_id": _EVALUATOR["id"], "rows": [{"q": "2+2", "correct_answer": "4"}], "target": _TARGET},
    ],
    "JobProgress": [
        {"total": 2, "done": 1, "failed": 0, "cached": 0},
        {"total": 2, "done": 2, "failed": 0, "cached": 2},
    ],
    "LockedPackage": [{"name": "six", "version": "1.16.0", "sha256": None}],
    "RuntimeLock": [
        {
            "runtime_id": _RUNTIME_ID,
            "language": _LANGUAGE,
            "interpreter": {"name": "python", "version": "3.11.7"},
            "base_image": None,
            "packages": [{"name": "six", "version": "1.16.0", "sha256": None}],
        }
    ],
    "ReplayRequest": [{"job_id": "job_0d1e2f3a4b5c6d7e8f90", "index": 3}],
    "Replay": [
        {
            "job_id": "job_0d1e2f3a4b5c6d7e8f90",
            "index": 3,
            "evaluator_id": _EVALUATOR["id"],
            "revision": 1,
            "runtime_id": _RUNTIME_ID,
            "identical": True,
            "differences": [],
            "stored": {**_RESULT, "evaluator_id": _EVALUATOR["id"], "revision": 1},
            "replayed": {**_RESULT, "evaluator_id": _EVALUATOR["id"], "revision": 1},
        }
    ],
    "Target": [_TARGET],
    "TokenUsage": [_TOKENS],
    "Generation": [_GENERATION],
    "TargetUsage": [
        {
            "calls": 2,
            "rows": 2,
            "prompt_tokens": 24,
            "completion_tokens": 6,
            "total_tokens": 30,
            "cost_estimate": 7.2e-06,
        }
    ],
    "Job": [_JOB],
    "JobSinkSummary": [
        {
            "type": "phoenix",
            "url": "http://phoenix:6006",
            "name": "correct",
            "delivered": 98,
            "pending": 0,
            "failed": 0,
            "skipped": 2,
        }
    ],  # fmt: skip
    "JobList": [{"data": [_JOB], "count": 1, "next_cursor": None}],
    "JobResult": [{"index": 0, "row": {"q": "2+2", "correct_answer": "4", "model_expression": "4"}, "result": _RESULT}],
    "JobResultPage": [
        {
            "data": [{"index": 0, "row": {"q": "2+2"}, "result": _RESULT}],
            "offset": 0,
            "limit": 100,
            "next_offset": None,
            "total": 1,
        },
    ],  # fmt: skip
    "MigrateRequest": [{"language": _LANGUAGE, "code": _LEGACY}],
    "DatasetRow": [_ROW],
    "DatasetRowPage": [{"data": [_ROW], "offset": 0, "limit": 20, "next_offset": 1, "total": 2}],
    "Histogram": [_HISTOGRAM],
    "InspectRequest": [{"language": _LANGUAGE, "code": _CODE, "packages": {"numpy": "2.1.3"}}],
    "DefinitionProblem": [_PROBLEM],
    "PinCheck": [_PIN, {"name": "numpy", "version": "latest", "ok": False, "message": "pin an exact version"}],
    "RuntimeState": [{"id": _RUNTIME_ID, "built": False}],
    "InspectResponse": [
        {
            "ok": True,
            "language": _LANGUAGE,
            "interface": "evaluate",
            "entrypoint": "evaluate",
            "line": 1,
            "errors": [],
            "capabilities": {},
            "pins": [_PIN],
            "policy": "standard",
            "runtime": {"id": _RUNTIME_ID, "built": True},
            "warnings": [],
        },
        {
            "ok": False,
            "language": _LANGUAGE,
            "interface": None,
            "entrypoint": None,
            "line": None,
            "errors": [_PROBLEM],
            "capabilities": {},
            "pins": [],
            "policy": None,
            "runtime": None,
            "warnings": [],
        },
    ],  # fmt: skip
    "MigrationNote": [{"line": 2, "message": "correct_answer now reads inputs['correct_answer']"}],
    "MigrateResponse": [_MIGRATED],
    "MigrationReads": [{"output": True, "correct_answer": True, "app_params": ["threshold"]}],
    "EvaluatorMigrateRequest": [{"cases": [_CASE], "dry_run": True}, {"dataset_id": _DATASET["id"], "sample": 50}],
    "EvaluatorMigrateResponse": [
        {**_MIGRATED, "compared": 2, "dry_run": False, "saved": True, "evaluator": {**_EVALUATOR, "revision": 2}}
    ],
    "Quotas": [_QUOTAS, {"max_evaluations_per_s": 50.0}],
    "Workspace": [_WORKSPACE],
    "WorkspaceList": [{"data": [_WORKSPACE], "count": 1}],
    "WorkspaceCreate": [{"name": "team-search"}],
    "WorkspacePatch": [
        {"quotas": {"max_concurrent_jobs": 4, "max_evaluations_per_s": 200}},
        {"network_allow": ["api.openai.com:443", "api.anthropic.com:443"]},
        {"quotas": {"max_warm_workers": None}},
    ],
    "KeyCreate": [{"name": "ci"}],
    "ApiKey": [_KEY],
    "ApiKeyCreated": [{**_KEY, "last_used_at": None, "key": "evh_Xq3vT9kP2mW8rZ5nB7cD1fG4hJ6lN0sQ3uV9yA2eI5o"}],
    "ApiKeyList": [{"data": [_KEY, {**_KEY, "id": "key_9d3b", "name": "old", "revoked_at": _WHEN}], "count": 2}],
    "NetworkEntry": [_INJECTING],
    "ForwardEndpoint": [{"endpoint": "https://phoenix.example.com/v1/traces", "headers": {"x-key": "{{secret:PHX}}"}}],
    "SecretPut": [{"value": "sk-…"}],
    "Secret": [_SECRET],
    "SecretList": [{"data": [_SECRET], "count": 1}],
    **_ONLINE,
    **_FIXTURES,
    **_REVIEW,
    **_SHADOW,
}


def with_examples(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with :data:`EXAMPLES` set on its component schemas (those without examples of their own)."""
    for name, schema in spec.get("components", {}).get("schemas", {}).items():
        if name in EXAMPLES and "examples" not in schema:
            schema["examples"] = EXAMPLES[name]
    return spec
