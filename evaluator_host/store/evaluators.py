"""Evaluators and their immutable revisions.

Every create or update writes a new :class:`RevisionRow`; rows are never changed.
Deleting marks the evaluator deleted (it disappears from the API) and keeps its
revisions, so anything that referenced a revision stays consistent.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from evaluator_host.errors import NotFoundError
from evaluator_host.store.db import DEFAULT_WORKSPACE, EvaluatorRow, RevisionRow, as_utc, newest_first, utcnow

__all__ = ["EvaluatorStore", "RevisionRecord"]


@dataclass(frozen=True)
class RevisionRecord:
    """One revision, with the evaluator's timestamps."""

    id: str
    revision: int
    name: str
    description: str
    language: str
    interface: str
    code: str
    packages: dict[str, str]
    settings: dict[str, Any]
    runtime_id: str
    created_at: datetime
    updated_at: datetime
    capabilities: dict[str, Any] | None = None  # the static capability report (null: stored before reports)
    workspace_id: str = DEFAULT_WORKSPACE
    secrets: list[str] = field(default_factory=list)  # workspace secrets its workers get as env variables
    # "host:port" its workers may reach (egress proxy), or {"host", "headers"} when the proxy sets headers there
    network: list[str | dict[str, Any]] = field(default_factory=list)


def _record(ev: EvaluatorRow, rev: RevisionRow) -> RevisionRecord:
    return RevisionRecord(
        id=ev.id,
        revision=rev.revision,
        name=rev.name,
        description=rev.description,
        language=rev.language,
        interface=rev.interface,
        code=rev.code,
        packages=dict(rev.packages),
        settings=dict(rev.settings),
        runtime_id=rev.runtime_id,
        created_at=as_utc(ev.created_at),
        updated_at=as_utc(rev.created_at),
        capabilities=rev.capabilities,
        workspace_id=ev.workspace_id,
        secrets=list(rev.secrets or []),
        network=list(rev.network or []),
    )


class EvaluatorStore:
    """CRUD over evaluators; every method is one short transaction.

    ``workspace_id`` scopes every read and write: an evaluator of another workspace is
    :class:`NotFoundError`, exactly like one that does not exist.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def _live(self, session: Session, evaluator_id: str, workspace_id: str) -> EvaluatorRow:
        row = session.get(EvaluatorRow, evaluator_id)
        if row is None or row.deleted_at is not None or row.workspace_id != workspace_id:
            raise NotFoundError(f"evaluator {evaluator_id!r} does not exist")
        return row

    def create(self, workspace_id: str, **fields: Any) -> RevisionRecord:
        """Store a new evaluator of ``workspace_id`` at revision 1."""
        now = utcnow()
        with Session(self.engine) as session, session.begin():
            ev = EvaluatorRow(
                id=f"ev_{uuid.uuid4().hex[:20]}",
                workspace_id=workspace_id,
                latest_revision=1,
                created_at=now,
                updated_at=now,
            )
            rev = RevisionRow(evaluator_id=ev.id, revision=1, created_at=now, **fields)
            session.add_all([ev, rev])
            session.flush()
            return _record(ev, rev)

    def update(self, workspace_id: str, evaluator_id: str, **fields: Any) -> RevisionRecord:
        """Append a revision; earlier revisions are unchanged."""
        now = utcnow()
        with Session(self.engine) as session, session.begin():
            ev = self._live(session, evaluator_id, workspace_id)
            ev.latest_revision += 1
            ev.updated_at = now
            rev = RevisionRow(evaluator_id=ev.id, revision=ev.latest_revision, created_at=now, **fields)
            session.add(rev)
            session.flush()
            return _record(ev, rev)

    def get(self, workspace_id: str, evaluator_id: str, revision: int | None = None) -> RevisionRecord:
        """The given (default: latest) revision of a live evaluator."""
        with Session(self.engine) as session:
            ev = self._live(session, evaluator_id, workspace_id)
            rev = session.get(RevisionRow, (evaluator_id, revision if revision is not None else ev.latest_revision))
            if rev is None:
                raise NotFoundError(f"evaluator {evaluator_id!r} has no revision {revision}")
            return _record(ev, rev)

    def get_revision(self, workspace_id: str, evaluator_id: str, revision: int) -> RevisionRecord:
        """A revision even of a deleted evaluator (jobs keep running the revision they started on)."""
        with Session(self.engine) as session:
            ev = session.get(EvaluatorRow, evaluator_id)
            rev = session.get(RevisionRow, (evaluator_id, revision))
            if ev is None or rev is None or ev.workspace_id != workspace_id:
                raise NotFoundError(f"evaluator {evaluator_id!r} has no revision {revision}")
            return _record(ev, rev)

    def list_all(
        self, workspace_id: str, *, limit: int | None = None, before: tuple[datetime, str] | None = None
    ) -> list[RevisionRecord]:
        """Latest revision of every live evaluator of ``workspace_id``, newest first (ties: greater id
        first); with ``before`` (a ``(created_at, id)``), only those after it in that order; at most
        ``limit`` (None: all) — read a page at a time in the database."""
        query = (
            select(EvaluatorRow, RevisionRow)
            .join(
                RevisionRow,
                (RevisionRow.evaluator_id == EvaluatorRow.id) & (RevisionRow.revision == EvaluatorRow.latest_revision),
            )
            .where(EvaluatorRow.deleted_at.is_(None), EvaluatorRow.workspace_id == workspace_id)
        )
        with Session(self.engine) as session:
            rows = session.execute(newest_first(query, EvaluatorRow.created_at, EvaluatorRow.id, limit, before)).all()
            return [_record(ev, rev) for ev, rev in rows]

    def revisions(self, workspace_id: str, evaluator_id: str) -> list[RevisionRecord]:
        """Every revision, oldest first."""
        with Session(self.engine) as session:
            ev = self._live(session, evaluator_id, workspace_id)
            revs = session.scalars(
                select(RevisionRow).where(RevisionRow.evaluator_id == evaluator_id).order_by(RevisionRow.revision)
            ).all()
            return [_record(ev, rev) for rev in revs]

    def delete(self, workspace_id: str, evaluator_id: str) -> None:
        """Mark deleted; revisions are kept."""
        with Session(self.engine) as session, session.begin():
            ev = self._live(session, evaluator_id, workspace_id)
            ev.deleted_at = utcnow()
