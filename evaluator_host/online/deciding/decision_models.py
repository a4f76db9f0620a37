"""The online API's shapes of a rule's budgets and of a trace's decisions (issue 51), re-exported by
:mod:`evaluator_host.online.models`. Nothing here touches the database.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Decision", "RuleLimits"]


class RuleLimits(BaseModel):
    """A rule's budgets (each optional): over one, its work is delayed, never dropped (docs/online.md, Budgets)."""

    model_config = ConfigDict(extra="forbid")

    scores_per_minute: int | None = Field(None, ge=1, le=1_000_000, description="Scores stored in any 60 s.")
    sandbox_seconds_per_hour: float | None = Field(
        None, gt=0, le=10_000_000, description="Evaluator run time (duration_ms) of the scores stored in any hour."
    )
    model_calls_per_minute: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="Calls to the evaluator's network hosts in any 60 s, as the egress proxy counts them "
        "(connections; one request each where the proxy reads the requests).",
    )


class Decision(BaseModel):
    """Why a rule did or did not score a target of the trace (docs/online.md, "Why wasn't my trace scored?")."""

    rule_id: str
    target: str | None = Field(None, description="The span id at span level; null: the trace.")
    decision: str = Field(
        description="not_matched | sampled_out | not_ready | queued | running | retrying | delayed | scored | "
        "failed | dropped | not_routed"
    )
    reason: str = Field(description="Why, in one sentence (the failed filter condition, the error, the budget...).")
    at: datetime = Field(description="When this was decided (routed, enqueued, scored...).")
    until: datetime | None = Field(None, description="not_ready, running, retrying, delayed: until when.")
    attempts: int = 0
