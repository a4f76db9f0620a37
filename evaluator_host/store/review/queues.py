"""Review queues (``review_queues``): create, read, rename, soft-delete; every read names its workspace.

A queue of another workspace, or a deleted one, is :class:`NotFoundError` — the same answer as an unknown
id. A queue's counts (items, reviewed) are read with it. Short transactions; call from a thread.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from evaluator_host.errors import NotFoundError
from evaluator_host.store.db import as_utc, utcnow
from evaluator_host.store.review.rows import ReviewItemRow, ReviewQueueRow

__all__ = ["QueueRecord", "ReviewQueueStore"]

Q, It = ReviewQueueRow, ReviewItemRow


@dataclass(frozen=True)
class QueueRecord:
    """A stored queue with its counts."""

    id: str
    workspace_id: str
    name: str
    evaluator_id: str
    rule_id: str | None
    job_id: str | None
    selection: dict[str, Any] | None
    sample: float
    max_items: int
    created_at: datetime
    updated_at: datetime
    items: int = 0
    reviewed: int = 0


def _record(row: ReviewQueueRow, items: int = 0, reviewed: int = 0) -> QueueRecord:
    return QueueRecord(
        id=row.id,
        workspace_id=row.workspace_id,
        name=row.name,
        evaluator_id=row.evaluator_id,
        rule_id=row.rule_id,
        job_id=row.job_id,
        selection=None if row.selection is None else dict(row.selection),
        sample=float(row.sample),
        max_items=int(row.max_items),
        created_at=as_utc(row.created_at),
        updated_at=as_utc(row.updated_at),
        items=items,
        reviewed=reviewed,
    )


class ReviewQueueStore:
    """CRUD over ``review_queues`` in one database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create(self, workspace_id: str, **fields: Any) -> QueueRecord:
        """Store a new queue (``name``, ``evaluator_id``, ``rule_id`` | ``job_id``, ``selection``, ``sample``,
        ``max_items``); it starts empty."""
        now = utcnow()
        row = Q(id=f"rq_{uuid.uuid4().hex[:20]}", workspace_id=workspace_id, created_at=now, updated_at=now, **fields)
        with Session(self.engine) as session, session.begin():
            session.add(row)
            session.flush()
            return _record(row)

    def _live(self, session: Session, workspace_id: str, queue_id: str) -> ReviewQueueRow:
        row = session.get(Q, queue_id)
        if row is None or row.workspace_id != workspace_id or row.deleted_at is not None:
            raise NotFoundError(f"review queue {queue_id!r} does not exist")
        return row

    @staticmethod
    def _counts(session: Session, ids: list[str]) -> dict[str, tuple[int, int]]:
        if not ids:
            return {}
        reviewed = func.sum(case((It.reviewed_at.is_not(None), 1), else_=0))
        query = select(It.queue_id, func.count(), reviewed).where(It.queue_id.in_(ids)).group_by(It.queue_id)
        return {q: (int(n), int(r or 0)) for q, n, r in session.execute(query)}

    def get(self, workspace_id: str, queue_id: str) -> QueueRecord:
        """A live queue of ``workspace_id`` with its counts."""
        with Session(self.engine) as session:
            row = self._live(session, workspace_id, queue_id)
            return _record(row, *self._counts(session, [row.id]).get(row.id, (0, 0)))

    def list_all(self, workspace_id: str) -> list[QueueRecord]:
        """Every live queue of ``workspace_id``, newest first (ties: greater id first)."""
        with Session(self.engine) as session:
            rows = session.scalars(
                select(Q)
                .where(Q.workspace_id == workspace_id, Q.deleted_at.is_(None))
                .order_by(Q.created_at.desc(), Q.id.desc())
            ).all()
            counts = self._counts(session, [r.id for r in rows])
            return [_record(r, *counts.get(r.id, (0, 0))) for r in rows]

    def rename(self, workspace_id: str, queue_id: str, name: str) -> QueueRecord:
        """Change a queue's name (what it takes is fixed at creation: its items were chosen by it)."""
        with Session(self.engine) as session, session.begin():
            row = self._live(session, workspace_id, queue_id)
            row.name, row.updated_at = name, utcnow()
        return self.get(workspace_id, queue_id)

    def delete(self, workspace_id: str, queue_id: str) -> None:
        """Soft-delete: the queue fills no more and is listed no more; its verdicts stop counting."""
        with Session(self.engine) as session, session.begin():
            row = self._live(session, workspace_id, queue_id)
            row.deleted_at = row.updated_at = utcnow()
