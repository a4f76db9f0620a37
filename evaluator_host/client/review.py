"""The builders of the review calls (issue 53; ``calls.py`` states the contract): review queues, their items,
verdicts and exports, verdicts as fixtures, and an evaluator's agreement per revision. The clients expose each as
a method of the same name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import httpx

from evaluator_host.client.calls import Call, body_of, model, nothing
from evaluator_host.review.models import (
    Agreement,
    FixturesAdded,
    ItemList,
    Queue,
    QueueList,
    Verdict,
    VerdictList,
)

__all__ = [
    "agreement",
    "create_review_queue",
    "delete_review_queue",
    "export_review",
    "get_review_queue",
    "give_verdict",
    "list_review_queues",
    "refill_review_queue",
    "review_items",
    "verdict_history",
    "verdicts_to_fixtures",
]


def create_review_queue(
    name: str,
    *,
    rule_id: str | None = None,
    job_id: str | None = None,
    select: Mapping[str, Any] | None = None,
    sample: float | None = None,
    limit: int | None = None,
) -> Call[Queue]:
    """``POST /v1/review-queues``: a queue on a rule's scores (``rule_id``) or a job's results (``job_id``),
    by one ``select`` condition (``{"score_below": 0.5}``, ``{"passed": False}``, …), a ``sample`` share and at
    most ``limit`` items; filled at once (a rule's also as scores arrive)."""
    source = body_of(rule_id=rule_id, job_id=job_id)
    body = body_of(name=name, source=source, select=select, sample=sample, limit=limit)
    return Call("POST", "/v1/review-queues", model(Queue), body)


def list_review_queues(*, limit: int | None = None, cursor: str | None = None) -> Call[QueueList]:
    """``GET /v1/review-queues``: the workspace's queues with their progress, newest first."""
    return Call("GET", "/v1/review-queues", model(QueueList), params={"limit": limit, "cursor": cursor})


def get_review_queue(queue_id: str) -> Call[Queue]:
    """``GET /v1/review-queues/{id}``: one queue with its progress (items, reviewed)."""
    return Call("GET", f"/v1/review-queues/{queue_id}", model(Queue))


def refill_review_queue(queue_id: str) -> Call[Queue]:
    """``POST /v1/review-queues/{id}/refill``: take what the source holds now (the same items every time)."""
    return Call("POST", f"/v1/review-queues/{queue_id}/refill", model(Queue))


def delete_review_queue(queue_id: str) -> Call[None]:
    """``DELETE /v1/review-queues/{id}``."""
    return Call("DELETE", f"/v1/review-queues/{queue_id}", nothing)


def review_items(
    queue_id: str,
    *,
    state: Literal["pending", "reviewed"] | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Call[ItemList]:
    """``GET /v1/review-queues/{id}/items``: items (50 a page by default) with the evaluator's answer, what it
    judged (the trace, or the job row) and the current verdict."""
    params = {"state": state, "limit": limit, "cursor": cursor}
    return Call("GET", f"/v1/review-queues/{queue_id}/items", model(ItemList), params=params)


def give_verdict(
    queue_id: str,
    item_id: str,
    passed: bool,
    *,
    score: float | None = None,
    label: str | None = None,
    note: str | None = None,
) -> Call[Verdict]:
    """``POST /v1/review-queues/{id}/items/{item_id}/verdict``: the item's current verdict (the one before is
    kept in its history)."""
    body = body_of(passed=passed, score=score, label=label, note=note)
    return Call("POST", f"/v1/review-queues/{queue_id}/items/{item_id}/verdict", model(Verdict), body)


def verdict_history(queue_id: str, item_id: str) -> Call[VerdictList]:
    """``GET /v1/review-queues/{id}/items/{item_id}/verdict``: every verdict of the item, newest first."""
    return Call("GET", f"/v1/review-queues/{queue_id}/items/{item_id}/verdict", model(VerdictList))


def _text(response: httpx.Response) -> str:
    return response.text


def export_review(
    queue_id: str,
    format: Literal["jsonl", "csv"] = "jsonl",
    state: Literal["reviewed", "pending", "all"] = "reviewed",
) -> Call[str]:
    """``GET /v1/review-queues/{id}/export``: the items with the evaluator's answer beside the human verdict,
    as JSON lines or CSV text."""
    return Call("GET", f"/v1/review-queues/{queue_id}/export", _text, params={"format": format, "state": state})


def verdicts_to_fixtures(
    queue_id: str, items: Sequence[str] | None = None, *, tolerance: float | None = None
) -> Call[FixturesAdded]:
    """``POST /v1/review-queues/{id}/fixtures``: the given reviewed items (default: every reviewed one) become
    fixtures of the queue's evaluator, so a later revision that disagrees is refused at save unless forced."""
    body = body_of(items=list(items) if items is not None else None, tolerance=tolerance)
    if items is None:
        body["all_reviewed"] = True
    return Call("POST", f"/v1/review-queues/{queue_id}/fixtures", model(FixturesAdded), body)


def agreement(evaluator_id: str, revision: int | None = None) -> Call[Agreement]:
    """``GET /v1/evaluators/{id}/agreement``: how a revision (default: the latest) agrees with people's verdicts."""
    return Call("GET", f"/v1/evaluators/{evaluator_id}/agreement", model(Agreement), params={"revision": revision})
