"""Review items and verdicts (``review_items``, ``review_verdicts``): read a queue's items, give a verdict.

Contract:

* :meth:`ReviewItemStore.items` — a queue's items in the order they were added (ties: id), each with its
  current verdict; ``state`` ``pending`` (no verdict) or ``reviewed``.
* :meth:`ReviewItemStore.give` — a verdict on an item, in ONE transaction: the item's current verdict (if
  any) is marked replaced, the new one stored as current, the item ``reviewed``; the item's case
  (``snapshot``) is kept with it when it had none. Exactly one current verdict per item on either
  database: on PostgreSQL the item's row is locked first, so two verdicts at once take turns.
* :meth:`ReviewItemStore.history` — every verdict of an item, newest first.
* :meth:`ReviewItemStore.reviewed_of` — every reviewed item of an evaluator in its workspace's live
  queues, with its current verdict and its queue's source (what agreement is computed over).

Short transactions; call from a thread.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from evaluator_host.errors import NotFoundError
from evaluator_host.store.db import as_utc, utcnow
from evaluator_host.store.review.rows import ReviewItemRow, ReviewQueueRow, ReviewVerdictRow

__all__ = ["ItemRecord", "ReviewItemStore", "VerdictRecord"]

Q, It, V = ReviewQueueRow, ReviewItemRow, ReviewVerdictRow


@dataclass(frozen=True)
class VerdictRecord:
    """One person's verdict (``current``: not replaced)."""

    id: str
    item_id: str
    passed: bool
    score: float | None
    label: str | None
    note: str | None
    reviewer: str | None
    created_at: datetime
    current: bool


@dataclass(frozen=True)
class ItemRecord:
    """One item: the evaluator's answer, its case when kept, its current verdict, its queue's source."""

    id: str
    queue_id: str
    evaluator_id: str
    source_key: str
    trace_id: str | None
    span_id: str | None
    job_index: int | None
    revision: int | None
    status: str | None
    score: float | None
    passed: bool | None
    label: str | None
    reason: str | None
    snapshot: dict[str, Any] | None
    added_at: datetime
    reviewed_at: datetime | None
    verdict: VerdictRecord | None
    rule_id: str | None = None
    job_id: str | None = None


def _verdict(row: ReviewVerdictRow | None) -> VerdictRecord | None:
    if row is None:
        return None
    return VerdictRecord(
        id=row.id,
        item_id=row.item_id,
        passed=bool(row.passed),
        score=row.score,
        label=row.label,
        note=row.note,
        reviewer=row.reviewer,
        created_at=as_utc(row.created_at),
        current=row.replaced_at is None,
    )


def _item(row: ReviewItemRow, verdict: ReviewVerdictRow | None, queue: ReviewQueueRow | None = None) -> ItemRecord:
    return ItemRecord(
        id=row.id,
        queue_id=row.queue_id,
        evaluator_id=row.evaluator_id,
        source_key=row.source_key,
        trace_id=row.trace_id,
        span_id=row.span_id,
        job_index=row.job_index,
        revision=row.revision,
        status=row.status,
        score=row.score,
        passed=row.passed,
        label=row.label,
        reason=row.reason,
        snapshot=None if row.snapshot is None else dict(row.snapshot),
        added_at=as_utc(row.added_at),
        reviewed_at=None if row.reviewed_at is None else as_utc(row.reviewed_at),
        verdict=_verdict(verdict),
        rule_id=None if queue is None else queue.rule_id,
        job_id=None if queue is None else queue.job_id,
    )


def _with_verdicts() -> Select[ReviewItemRow, ReviewVerdictRow, ReviewQueueRow]:
    """Items with their current verdict (if any) and their queue."""
    query = select(It, V, Q).join(Q, Q.id == It.queue_id)
    return query.join(V, (V.item_id == It.id) & V.replaced_at.is_(None), isouter=True)


class ReviewItemStore:
    """Items and verdicts in one database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def items(self, workspace_id: str, queue_id: str, state: str | None = None) -> list[ItemRecord]:
        """A queue's items (see the module docstring); ``state``: ``pending``, ``reviewed`` or None (all)."""
        query = _with_verdicts().where(It.queue_id == queue_id, It.workspace_id == workspace_id)
        if state == "pending":
            query = query.where(It.reviewed_at.is_(None))
        elif state == "reviewed":
            query = query.where(It.reviewed_at.is_not(None))
        with Session(self.engine) as session:
            return [_item(i, v, q) for i, v, q in session.execute(query.order_by(It.added_at, It.id))]

    def item(self, workspace_id: str, queue_id: str, item_id: str) -> ItemRecord:
        """One item of a queue (404 when the queue holds no such item)."""
        query = _with_verdicts().where(It.id == item_id, It.queue_id == queue_id, It.workspace_id == workspace_id)
        with Session(self.engine) as session:
            found = session.execute(query).first()
        if found is None:
            raise NotFoundError(f"review queue {queue_id!r} has no item {item_id!r}")
        return _item(*found)

    def give(
        self,
        workspace_id: str,
        queue_id: str,
        item_id: str,
        *,
        passed: bool,
        score: float | None,
        label: str | None,
        note: str | None,
        reviewer: str | None,
        snapshot: dict[str, Any] | None,
    ) -> VerdictRecord:
        """Store a verdict as the item's current one (see the module docstring)."""
        now = utcnow()
        with Session(self.engine) as session, session.begin():
            query = select(It).where(It.id == item_id, It.queue_id == queue_id, It.workspace_id == workspace_id)
            if self.engine.dialect.name == "postgresql":
                query = query.with_for_update()
            item = session.scalars(query).first()
            if item is None:
                raise NotFoundError(f"review queue {queue_id!r} has no item {item_id!r}")
            session.execute(update(V).where(V.item_id == item_id, V.replaced_at.is_(None)).values(replaced_at=now))
            row = V(
                id=f"rv_{uuid.uuid4().hex[:20]}",
                item_id=item_id,
                queue_id=queue_id,
                workspace_id=workspace_id,
                passed=passed,
                score=score,
                label=label,
                note=note,
                reviewer=reviewer,
                created_at=now,
                replaced_at=None,
            )
            session.add(row)
            item.reviewed_at = now
            if item.snapshot is None and snapshot is not None:
                item.snapshot = snapshot
            session.flush()
            made = _verdict(row)
        assert made is not None
        return made

    def history(self, workspace_id: str, queue_id: str, item_id: str) -> list[VerdictRecord]:
        """Every verdict on an item, newest first (404 for an unknown item)."""
        self.item(workspace_id, queue_id, item_id)
        with Session(self.engine) as session:
            rows = session.scalars(
                select(V).where(V.item_id == item_id).order_by(V.created_at.desc(), V.replaced_at.is_(None).desc())
            ).all()
            return [v for v in map(_verdict, rows) if v is not None]

    def reviewed_of(self, workspace_id: str, evaluator_id: str) -> list[ItemRecord]:
        """Every reviewed item of ``evaluator_id`` in the workspace's live queues, with its current verdict."""
        query = (
            select(It, V, Q)
            .join(Q, Q.id == It.queue_id)
            .join(V, (V.item_id == It.id) & V.replaced_at.is_(None))
            .where(It.workspace_id == workspace_id, It.evaluator_id == evaluator_id, Q.deleted_at.is_(None))
            .order_by(It.added_at, It.id)
        )
        with Session(self.engine) as session:
            return [_item(i, v, q) for i, v, q in session.execute(query)]
