"""The tables of review queues (issue 53, migration ``0018_review_queues``).

* ``review_queues`` — a workspace's queue: its evaluator, its source (one online rule's scores or one job's
  results), ``selection`` (which answers it takes: ``{"score_below": x}``, ``{"score_above": x}``,
  ``{"passed": false}``, ``{"label_in": [...]}``, ``{"status_in": [...]}``; null: any), ``sample`` (the
  share it takes, decided per item by a hash: the same item is always taken or always left) and
  ``max_items``. Soft-deleted.
* ``review_items`` — one row per (queue, ``source_key``: the score's target id, or the job row's index):
  the evaluator's answer as it was stored (revision, status, score, passed, label, reason) and
  ``snapshot``, the case it scored (a job row's inputs/outputs at once; a trace's case when the first
  verdict is given, so retention never takes what a verdict judged). ``reviewed_at`` null: pending.
* ``review_verdicts`` — people's verdicts: the current one of an item has ``replaced_at`` null; a new
  verdict sets it on the one before (history kept).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, Float, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from evaluator_host.store.db import Base

__all__ = ["ReviewItemRow", "ReviewQueueRow", "ReviewVerdictRow"]

_TZ = DateTime(timezone=True)


class ReviewQueueRow(Base):
    """A review queue (one source: ``rule_id`` or ``job_id``)."""

    __tablename__ = "review_queues"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    workspace_id: Mapped[str] = mapped_column(String(40), index=True)
    name: Mapped[str] = mapped_column(String(200))
    evaluator_id: Mapped[str] = mapped_column(String(40))
    rule_id: Mapped[str | None] = mapped_column(String(40), nullable=True, index=True)
    job_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    selection: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    sample: Mapped[float] = mapped_column(Float)
    max_items: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(_TZ)
    updated_at: Mapped[datetime] = mapped_column(_TZ)
    deleted_at: Mapped[datetime | None] = mapped_column(_TZ, nullable=True)


class ReviewItemRow(Base):
    """One answer of the evaluator put before people."""

    __tablename__ = "review_items"
    __table_args__ = (
        UniqueConstraint("queue_id", "source_key", name="uq_review_items_queue_source"),
        Index("ix_review_items_queue_added", "queue_id", "added_at", "id"),
        Index("ix_review_items_evaluator", "workspace_id", "evaluator_id"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    queue_id: Mapped[str] = mapped_column(String(40))
    workspace_id: Mapped[str] = mapped_column(String(40))
    evaluator_id: Mapped[str] = mapped_column(String(40))
    source_key: Mapped[str] = mapped_column(String(200))  # the score's target id, or the job row's index
    trace_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    span_id: Mapped[str | None] = mapped_column(String(16), nullable=True)
    job_index: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    revision: Mapped[int | None] = mapped_column(Integer, nullable=True)
    status: Mapped[str | None] = mapped_column(String(20), nullable=True)
    score: Mapped[float | None] = mapped_column(Float, nullable=True)
    passed: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    label: Mapped[str | None] = mapped_column(String(200), nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    snapshot: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)  # {inputs, outputs, trace}
    added_at: Mapped[datetime] = mapped_column(_TZ)
    reviewed_at: Mapped[datetime | None] = mapped_column(_TZ, nullable=True)


class ReviewVerdictRow(Base):
    """A person's verdict on an item (``replaced_at`` null: the item's current one)."""

    __tablename__ = "review_verdicts"
    __table_args__ = (Index("ix_review_verdicts_item", "item_id", "created_at"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    item_id: Mapped[str] = mapped_column(String(40))
    queue_id: Mapped[str] = mapped_column(String(40))
    workspace_id: Mapped[str] = mapped_column(String(40))
    passed: Mapped[bool] = mapped_column(Boolean)
    score: Mapped[float | None] = mapped_column(Float, nullable=True)
    label: Mapped[str | None] = mapped_column(String(200), nullable=True)
    note: Mapped[str | None] = mapped_column(Text, nullable=True)
    reviewer: Mapped[str | None] = mapped_column(String(40), nullable=True)  # the API key's id (null: none)
    created_at: Mapped[datetime] = mapped_column(_TZ)
    replaced_at: Mapped[datetime | None] = mapped_column(_TZ, nullable=True)
