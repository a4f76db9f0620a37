"""The review API's shapes (``/v1/review-queues``, ``/v1/evaluators/{id}/agreement``). Nothing here touches
the database.

A queue takes its items from one ``source`` (``{"rule_id"}``: an online rule's scores, or ``{"job_id"}``: a
job's results), by one ``select`` condition (or none: every answer), ``sample`` (the share taken, decided
per item: a refill takes the same ones) and at most ``limit`` items.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from evaluator_host.evaluation.models import Status
from evaluator_host.shared.text import StoredText

__all__ = [
    "MAX_QUEUE_ITEMS",
    "Agreement",
    "Confusion",
    "FixturesAdded",
    "FixturesRequest",
    "Item",
    "ItemList",
    "ItemSource",
    "LabelAgreement",
    "Queue",
    "QueueCreate",
    "QueueList",
    "QueuePatch",
    "QueueSelect",
    "QueueSource",
    "Verdict",
    "VerdictCreate",
    "VerdictList",
]

MAX_QUEUE_ITEMS = 10_000  # items one queue may hold


def _unset(value: object) -> bool:
    return value is None


class QueueSource(BaseModel):
    """Where a queue's items come from: exactly one of ``rule_id`` and ``job_id``."""

    model_config = ConfigDict(extra="forbid")

    rule_id: StoredText | None = Field(
        None, max_length=40, description="An online rule: its scores, now and as they arrive."
    )
    job_id: StoredText | None = Field(None, max_length=40, description="A job: its stored results.")

    @model_validator(mode="after")
    def _one(self) -> QueueSource:
        if (self.rule_id is None) == (self.job_id is None):
            raise ValueError("source needs exactly one of rule_id and job_id")
        return self


class QueueSelect(BaseModel):
    """Which answers a queue takes: exactly one condition (the others are left out of answers)."""

    model_config = ConfigDict(extra="forbid")

    score_below: float | None = Field(
        None, allow_inf_nan=False, description="A score lower than this.", exclude_if=_unset
    )
    score_above: float | None = Field(
        None, allow_inf_nan=False, description="A score higher than this.", exclude_if=_unset
    )
    passed: bool | None = Field(None, description="passed equal to this (false: the failures).", exclude_if=_unset)
    label_in: list[StoredText] | None = Field(
        None, min_length=1, max_length=100, description="One of these labels.", exclude_if=_unset
    )
    status_in: list[Status] | None = Field(None, min_length=1, description="One of these statuses.", exclude_if=_unset)

    @model_validator(mode="after")
    def _one(self) -> QueueSelect:
        if sum(getattr(self, f) is not None for f in type(self).model_fields) != 1:
            raise ValueError("select needs exactly one of score_below, score_above, passed, label_in, status_in")
        return self


class QueueCreate(BaseModel):
    """``POST /v1/review-queues``."""

    model_config = ConfigDict(extra="forbid")

    name: StoredText = Field(min_length=1, max_length=200)
    source: QueueSource
    select: QueueSelect | None = Field(None, description="Which answers it takes (none: any).")
    sample: float = Field(1.0, ge=0.0, le=1.0, description="The share of the selected answers it takes.")
    limit: int = Field(100, ge=1, le=MAX_QUEUE_ITEMS, description="At most this many items.")


class QueuePatch(BaseModel):
    """``PATCH /v1/review-queues/{id}``: its name (what it takes is fixed: its items were chosen by it)."""

    model_config = ConfigDict(extra="forbid")

    name: StoredText = Field(min_length=1, max_length=200)


class Queue(BaseModel):
    """A review queue and its progress."""

    id: str
    name: str
    evaluator_id: str
    source: QueueSource
    select: QueueSelect | None = None
    sample: float
    limit: int
    items: int = Field(description="Items it holds.")
    reviewed: int = Field(description="Items with a verdict.")
    created_at: datetime
    updated_at: datetime


class QueueList(BaseModel):
    data: list[Queue]
    count: int
    next_cursor: str | None = None


class VerdictCreate(BaseModel):
    """``POST /v1/review-queues/{id}/items/{item_id}/verdict``: a person's verdict (replaces the current one)."""

    model_config = ConfigDict(extra="forbid")

    passed: bool = Field(description="Whether the item should pass (the truth agreement is measured against).")
    score: float | None = Field(None, allow_inf_nan=False, description="The score it should get.")
    label: StoredText | None = Field(None, max_length=200, description="The label it should get.")
    note: StoredText | None = Field(None, max_length=10_000, description="Why.")


class Verdict(BaseModel):
    """A verdict (``current``: the item's one that counts; the others are its history)."""

    id: str
    item_id: str
    passed: bool
    score: float | None = None
    label: str | None = None
    note: str | None = None
    reviewer: str | None = Field(None, description="The id of the API key that gave it (null: none).")
    created_at: datetime
    current: bool


class VerdictList(BaseModel):
    data: list[Verdict]
    count: int


class ItemSource(BaseModel):
    """Where an item's answer came from: a rule's score of a target, or a job's row."""

    rule_id: str | None = None
    target_id: str | None = None
    trace_id: str | None = None
    span_id: str | None = None
    job_id: str | None = None
    index: int | None = None


class Item(BaseModel):
    """One answer of the evaluator before people: what it said, what it judged, and the current verdict."""

    id: str
    queue_id: str
    state: Literal["pending", "reviewed"]
    source: ItemSource
    evaluator_id: str
    revision: int | None = Field(None, description="The revision that gave the answer.")
    status: str | None = None
    score: float | None = None
    passed: bool | None = None
    label: str | None = None
    reason: str | None = None
    inputs: Any = None
    outputs: Any = None
    trace: Any = Field(None, description="The trace it scored (a rule's item), or the job row's trace.")
    case_error: str | None = Field(None, description="Why inputs/outputs/trace are missing (the trace is gone).")
    verdict: Verdict | None = None
    added_at: datetime


class ItemList(BaseModel):
    data: list[Item]
    count: int
    next_cursor: str | None = None


class FixturesRequest(BaseModel):
    """``POST /v1/review-queues/{id}/fixtures``: which reviewed items become fixtures."""

    model_config = ConfigDict(extra="forbid")

    items: list[str] | None = Field(None, min_length=1, max_length=200, description="Item ids (each reviewed).")
    all_reviewed: bool = Field(False, description="Every reviewed item of the queue.")
    tolerance: float = Field(0.1, ge=0, le=1e9, description="|score - the verdict's score| a revision may differ by.")

    @model_validator(mode="after")
    def _one(self) -> FixturesRequest:
        if (self.items is None) == (not self.all_reviewed):
            raise ValueError('give either "items" or "all_reviewed": true')
        return self


class FixturesAdded(BaseModel):
    """The revision that holds the verdicts as fixtures (saved as the latest even where the code disagrees:
    ``disagreeing`` names those fixtures, the next revision must pass them or be refused, 409)."""

    evaluator_id: str
    revision: int
    added: int = Field(description="Fixtures new to the evaluator.")
    replaced: int = Field(description="Fixtures of the same items replaced (a newer verdict).")
    fixtures: int = Field(description="Fixtures the revision holds in all.")
    disagreeing: list[str] = Field(description="Fixtures this revision's code fails: the verdicts it disagrees with.")


class Confusion(BaseModel):
    """The evaluator's ``passed`` against people's (people's is the truth; passed is the positive class)."""

    tp: int
    fp: int
    fn: int
    tn: int


class LabelAgreement(BaseModel):
    """The items the evaluator gave one label."""

    reviewed: int
    accuracy: float
    label_agreement: float | None = Field(None, description="Share of those people labelled alike (null: none did).")


class Agreement(BaseModel):
    """``GET /v1/evaluators/{id}/agreement``: how a revision agrees with people's verdicts."""

    evaluator_id: str
    revision: int
    reviewed: int = Field(description="Items compared (each reviewed item once).")
    ran: int = Field(description="Items the revision never scored, run on it now (the result cache applies).")
    cached: int = Field(0, description="Of those run now, answered from the result cache.")
    skipped: int = Field(0, description="Items another revision scored whose case is no longer stored: not compared.")
    accuracy: float
    cohen_kappa: float | None
    cohen_kappa_reason: str | None = Field(None, description="Why cohen_kappa is null.")
    confusion: Confusion
    evaluator_unanswered: int = Field(description="Items where the evaluator gave no passed (counted as not passed).")
    score_mae: float | None = Field(None, description="Mean |score - the verdict's score| where both are given.")
    scored: int = Field(description="Items with both scores (score_mae and spearman are over these).")
    spearman: float | None = None
    spearman_reason: str | None = None
    by_label: dict[str, LabelAgreement] = Field(default_factory=dict, description="By the evaluator's label.")
