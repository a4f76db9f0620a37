"""The online API's shapes of backfills (``/v1/online-rules/{id}/backfill``, issue 50), re-exported by
:mod:`evaluator_host.online.models`. Nothing here touches the database.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Backfill", "BackfillCreate", "BackfillDryRun"]


class BackfillCreate(BaseModel):
    """``POST /v1/online-rules/{id}/backfill``: score the rule's stored traces first seen in ``[since, until)``."""

    model_config = ConfigDict(extra="forbid")

    since: datetime | None = Field(None, description="First seen at or after (ISO 8601); default: the oldest.")
    until: datetime | None = Field(None, description="First seen before (ISO 8601); default: now.")
    limit: int | None = Field(
        None, ge=1, le=2**31 - 1, description="At most this many targets scored (default and most: the setting)."
    )
    dry_run: bool = Field(False, description="true: count, score nothing, answer at once.")


class BackfillDryRun(BaseModel):
    """A dry run's answer."""

    traces: int = Field(description="Stored traces in the range (read up to the targets to score).")
    targets: int = Field(description="The rule's targets among them (traces, or spans at span level).")
    already_scored: int = Field(description="Of them, scored (or queued) with the revision: skipped.")
    estimate_s: float = Field(description="Seconds the scoring would take, roughly.")
    revision: int | None = Field(None, description="The revision a target counts as scored with.")


class Backfill(BaseModel):
    """A backfill (202, and ``GET /v1/online-rules/{id}/backfills/{backfill_id}``). Every field is in every answer:
    the OpenAPI document marks them required (so the TypeScript client's ``Backfill`` has ``cached: number``),
    while the Python model still reads an answer without the later ones (``cached``, ``failed``: 0)."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    id: str
    rule_id: str
    status: str = Field(
        description="running | done | cancelled | failed (every target it scored failed, or was dropped: see reason)"
    )
    total: int = Field(description="Targets to score (while planning: at least this many).")
    done: int = Field(description="Of them, scored.")
    skipped: int = Field(description="Targets already scored with the revision (so far).")
    cached: int = Field(
        0, description="Of the scored, those answered from the result cache (no run: the same case seen before)."
    )
    failed: int = Field(0, description="Of the scored, those whose result is not ok (error, timeout, ...).")
    reason: str | None = Field(None, description="Set when failed: how many failed and the most common error.")
    queued: int = Field(0, description="Of them, waiting or running now.")
    cancelled: int = Field(0, description="Of them, dropped by a cancel.")
    since: datetime | None = None
    until: datetime | None = None
    limit: int
    revision: int | None = None
    created_at: datetime
