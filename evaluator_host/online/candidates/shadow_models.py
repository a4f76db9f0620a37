"""The online API's shapes of shadow revisions (``/v1/online-rules/{id}/shadow`` and ``/promote``, issue 53), beside
:mod:`evaluator_host.online.models` (whose ``Rule`` a promotion answers; the client imports both). Nothing here
touches the database.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from evaluator_host.online.models import Rule
from evaluator_host.review.models import Confusion, LabelAgreement

__all__ = [
    "Promotion",
    "ShadowAgreement",
    "ShadowAgreements",
    "ShadowAnswer",
    "ShadowComparison",
    "ShadowExample",
    "ShadowFlips",
]


class ShadowFlips(BaseModel):
    """Targets whose ``passed`` the candidate turned round."""

    pass_to_fail: int = Field(description="The live revision passed, the candidate failed.")
    fail_to_pass: int = Field(description="The live revision failed, the candidate passed.")


class ShadowAnswer(BaseModel):
    """One side's answer of a target."""

    revision: int | None = Field(None, description="The revision that ran.")
    status: str | None = None
    score: float | None = None
    passed: bool | None = None
    label: str | None = None


class ShadowExample(BaseModel):
    """One target both revisions scored, side by side."""

    target_id: str
    trace_id: str
    span_id: str | None = None
    session_id: str | None = None
    flip: Literal["pass_to_fail", "fail_to_pass"] | None = Field(None, description="null: passed did not flip.")
    delta: float | None = Field(None, description="candidate score - live score (null: a side gave no score).")
    live: ShadowAnswer
    candidate: ShadowAnswer
    scored_at: datetime


class ShadowAgreement(BaseModel):
    """One side's agreement with people's verdicts on the rule's reviewed targets both revisions scored
    (the figures of ``GET /v1/evaluators/{id}/agreement``, computed by the same code)."""

    revision: int | None = Field(None, description="The revision (live: the one most of those targets had).")
    reviewed: int
    accuracy: float
    cohen_kappa: float | None
    cohen_kappa_reason: str | None = None
    confusion: Confusion
    evaluator_unanswered: int
    score_mae: float | None = None
    scored: int
    spearman: float | None = None
    spearman_reason: str | None = None
    by_label: dict[str, LabelAgreement] = Field(default_factory=dict)


class ShadowAgreements(BaseModel):
    """Both sides' agreement over the same reviewed targets."""

    live: ShadowAgreement
    candidate: ShadowAgreement


class ShadowComparison(BaseModel):
    """``GET /v1/online-rules/{id}/shadow``: the candidate revision against the live one, over every target both
    scored at the same moment (``compared`` 0 is no success: ``message`` says why)."""

    rule_id: str
    live_revision: int | None = Field(description="The rule's live revision now (null: the latest).")
    candidate_revision: int | None = Field(
        description="The revision compared: the rule's candidate, else the last one that has shadow scores "
        "(e.g. just promoted); null: none ever."
    )
    pending_candidate: bool = Field(description="Whether candidate_revision is the rule's candidate now.")
    compared: int = Field(description="Targets both revisions scored.")
    flips: ShadowFlips
    same_passed: int = Field(description="Targets where both gave passed and it agreed.")
    mean_delta: float | None = Field(description="Mean of candidate score - live score where both gave one.")
    scored: int = Field(description="Targets where both gave a score (mean_delta is over these).")
    errors: dict[str, int] = Field(description="Targets whose result was not ok: {'live': n, 'candidate': n}.")
    examples: list[ShadowExample] = Field(description="Flips first, then the largest |delta|, then the newest.")
    agreement_with_reviews: ShadowAgreements | None = Field(
        description="Each side against the review verdicts on the rule's items both scored; null: none (see "
        "agreement_reason)."
    )
    agreement_reason: str | None = Field(None, description="Why agreement_with_reviews is null.")
    message: str | None = Field(None, description="Set when nothing was compared: why.")


class Promotion(BaseModel):
    """``POST /v1/online-rules/{id}/promote``'s answer: the candidate is the live revision now, from the next
    claimed target on, and the rule has no candidate."""

    rule_id: str
    previous_revision: int | None = Field(description="The live revision before (null: the latest).")
    revision: int = Field(description="The live revision now (the candidate promoted).")
    rule: Rule = Field(description="The rule now (GET /v1/online-rules/{id}).")
