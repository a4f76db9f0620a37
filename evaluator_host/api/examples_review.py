"""Examples of the review schemas (queues, items, verdicts, agreement, verdicts as fixtures; issue 53) for the
OpenAPI document: merged into :data:`evaluator_host.api.examples.EXAMPLES`, checked by ``tests/api/test_openapi.py``."""

from __future__ import annotations

from typing import Any

__all__ = ["REVIEW"]

_WHEN = "2026-11-25T12:00:00Z"
_T = "4bf92f3577b34da6a3ce929d0e0e4736"
_SOURCE = {"rule_id": "rule_3f9a2c", "job_id": None}
_SELECT = {"passed": False}
_QUEUE = {
    "id": "rq_5d1e8a0b3c7f4e2d9a61", "name": "failed chats", "evaluator_id": "ev_8c1f2d", "source": _SOURCE,
    "select": _SELECT, "sample": 0.2, "limit": 200, "items": 37, "reviewed": 12, "created_at": _WHEN,
    "updated_at": _WHEN,
}  # fmt: skip
_VERDICT = {
    "id": "rv_0c2f4e6a8b1d3f5a7c9e", "item_id": "ri_9a8b7c6d5e4f3a2b1c0d9e8f", "passed": True, "score": 0.9,
    "label": None, "note": "the answer is right; the judge missed the unit", "reviewer": "key_7f3a",
    "created_at": _WHEN, "current": True,
}  # fmt: skip
_ITEM_SOURCE = {"rule_id": "rule_3f9a2c", "target_id": _T, "trace_id": _T, "span_id": None, "job_id": None,
                "index": None}  # fmt: skip
_ITEM = {
    "id": "ri_9a8b7c6d5e4f3a2b1c0d9e8f", "queue_id": _QUEUE["id"], "state": "reviewed", "source": _ITEM_SOURCE,
    "evaluator_id": "ev_8c1f2d", "revision": 3, "status": "ok", "score": 0.2, "passed": False, "label": "wrong",
    "reason": "expected 4 km", "inputs": {"q": "How far is it?"}, "outputs": "4000 m",
    "trace": {"trace_id": _T, "spans": {}}, "case_error": None, "verdict": _VERDICT, "added_at": _WHEN,
}  # fmt: skip
_CONFUSION = {"tp": 18, "fp": 3, "fn": 2, "tn": 7}
_BY_LABEL = {"reviewed": 10, "accuracy": 0.8, "label_agreement": 0.9}
_AGREEMENT = {
    "evaluator_id": "ev_8c1f2d", "revision": 4, "reviewed": 30, "ran": 30, "cached": 0, "skipped": 0,
    "accuracy": 0.8333, "cohen_kappa": 0.6087, "cohen_kappa_reason": None, "confusion": _CONFUSION,
    "evaluator_unanswered": 0, "score_mae": 0.12, "scored": 22, "spearman": 0.81, "spearman_reason": None,
    "by_label": {"wrong": _BY_LABEL},
}  # fmt: skip

REVIEW: dict[str, list[Any]] = {
    "QueueSource": [_SOURCE, {"rule_id": None, "job_id": "job_0a1b2c3d4e5f6a7b8c9d"}],
    "QueueSelect": [_SELECT, {"score_below": 0.5}, {"label_in": ["wrong", "unsure"]}],
    "QueueCreate": [
        {"name": "failed chats", "source": {"rule_id": "rule_3f9a2c"}, "select": _SELECT, "sample": 0.2, "limit": 200},
        {"name": "a tenth of the job", "source": {"job_id": "job_0a1b2c3d4e5f6a7b8c9d"}, "sample": 0.1},
    ],
    "QueuePatch": [{"name": "failed chats (week 48)"}],
    "Queue": [_QUEUE],
    "QueueList": [{"data": [_QUEUE], "count": 1, "next_cursor": None}],
    "ItemSource": [_ITEM_SOURCE],
    "Item": [_ITEM],
    "ItemList": [{"data": [_ITEM], "count": 1, "next_cursor": None}],
    "VerdictCreate": [{"passed": True, "score": 0.9, "note": "the answer is right; the judge missed the unit"}],
    "Verdict": [_VERDICT],
    "VerdictList": [{"data": [_VERDICT, {**_VERDICT, "id": "rv_1", "passed": False, "current": False}], "count": 2}],
    "FixturesRequest": [{"all_reviewed": True}, {"items": [_ITEM["id"]], "tolerance": 0.05}],
    "FixturesAdded": [
        {
            "evaluator_id": "ev_8c1f2d",
            "revision": 5,
            "added": 12,
            "replaced": 0,
            "fixtures": 14,
            "disagreeing": [f"review:{_ITEM['id']}"],
        },
    ],  # fmt: skip
    "Confusion": [_CONFUSION],
    "LabelAgreement": [_BY_LABEL],
    "Agreement": [_AGREEMENT],
}
