"""Evaluators and their immutable revisions.

Every create or update writes a new :class:`RevisionRow`; rows are never changed.
Deleting marks the evaluator deleted (it disappears from the API) and keeps its
revisions, so anything that referenced a revision stays consistent.

A revision stored with ``draft=True`` (its fixtures failed and the save was not forced) is numbered
like any other but never becomes the evaluator's latest: ``latest_revision`` (what a call without a
revision runs) stays where it was, 0 when every revision is a draft; ``head_revision`` is the newest.
``get`` without a revision on an evaluator that has only drafts is a :class:`ConflictError` (409) —
a job or a call by id never runs a draft unless it names its number — except through ``shown``
(:meth:`EvaluatorStore.shown`: what the API shows, the newest draft).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from evaluator_host.errors import ConflictError, NotFoundError
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
    fixtures: list[dict[str, Any]] = field(default_factory=list)  # [{name, inputs, outputs, trace, expect}]
    fixture_report: dict[str, Any] | None = None  # what running them on save found (null: no fixtures)
    draft: bool = False  # fixtures failed, not forced: never the latest


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
        fixtures=list(rev.fixtures or []),
        fixture_report=rev.fixture_report,
        draft=bool(rev.draft),
    )


def _head(ev: EvaluatorRow) -> int:
    return ev.head_revision if ev.head_revision is not None else ev.latest_revision


# the revision an evaluator is listed with: its latest, or its newest draft when every revision is one
_shown = case(
    (EvaluatorRow.latest_revision > 0, EvaluatorRow.latest_revision),
    else_=func.coalesce(EvaluatorRow.head_revision, EvaluatorRow.latest_revision),
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

    def create(self, workspace_id: str, *, draft: bool = False, **fields: Any) -> RevisionRecord:
        """Store a new evaluator of ``workspace_id`` at revision 1 (``draft``: its latest stays none)."""
        now = utcnow()
        with Session(self.engine) as session, session.begin():
            ev = EvaluatorRow(
                id=f"ev_{uuid.uuid4().hex[:20]}",
                workspace_id=workspace_id,
                latest_revision=0 if draft else 1,
                head_revision=1,
                created_at=now,
                updated_at=now,
            )
            rev = RevisionRow(evaluator_id=ev.id, revision=1, created_at=now, draft=draft, **fields)
            session.add_all([ev, rev])
            session.flush()
            return _record(ev, rev)

    def update(self, workspace_id: str, evaluator_id: str, *, draft: bool = False, **fields: Any) -> RevisionRecord:
        """Append a revision (the latest unless ``draft``); earlier revisions are unchanged."""
        now = utcnow()
        with Session(self.engine) as session, session.begin():
            ev = self._live(session, evaluator_id, workspace_id)
            number = _head(ev) + 1
            ev.head_revision = number
            if not draft:
                ev.latest_revision = number
            ev.updated_at = now
            rev = RevisionRow(evaluator_id=ev.id, revision=number, created_at=now, draft=draft, **fields)
            session.add(rev)
            session.flush()
            return _record(ev, rev)

    def latest(self, workspace_id: str, evaluator_id: str) -> int:
        """A live evaluator's latest revision number (0: only drafts) — one primary-key read; ``NotFoundError``
        for a deleted one, another workspace's or none (what a service sharing the database with others
        reads on every call by id: another service may have saved or deleted it since)."""
        query = select(EvaluatorRow.latest_revision).where(
            EvaluatorRow.id == evaluator_id,
            EvaluatorRow.workspace_id == workspace_id,
            EvaluatorRow.deleted_at.is_(None),
        )
        with self.engine.connect() as conn:
            latest = conn.execute(query).scalar_one_or_none()
        if latest is None:
            raise NotFoundError(f"evaluator {evaluator_id!r} does not exist")
        return int(latest)

    def get(self, workspace_id: str, evaluator_id: str, revision: int | None = None) -> RevisionRecord:
        """The given (default: latest) revision of a live evaluator. Without a revision, an evaluator
        whose revisions are all drafts is a ``ConflictError``."""
        return self._get(workspace_id, evaluator_id, revision, or_draft=False)

    def shown(self, workspace_id: str, evaluator_id: str, revision: int | None = None) -> RevisionRecord:
        """As :meth:`get`, but without a revision an evaluator whose revisions are all drafts gives its
        newest draft (what the API shows of it, and what a save builds on)."""
        return self._get(workspace_id, evaluator_id, revision, or_draft=True)

    def _get(self, workspace_id: str, evaluator_id: str, revision: int | None, *, or_draft: bool) -> RevisionRecord:
        with Session(self.engine) as session:
            ev = self._live(session, evaluator_id, workspace_id)
            if revision is None and ev.latest_revision == 0:
                if not or_draft:
                    raise ConflictError(
                        f"evaluator {evaluator_id!r} has no released revision: its fixtures failed on every save "
                        f"(revision {_head(ev)} is a draft); name a revision, or save again with force: true"
                    )
                revision = _head(ev)
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
        """Latest revision (the newest draft when all are drafts) of every live evaluator of
        ``workspace_id``, newest first (ties: greater id
        first); with ``before`` (a ``(created_at, id)``), only those after it in that order; at most
        ``limit`` (None: all) — read a page at a time in the database."""
        query = (
            select(EvaluatorRow, RevisionRow)
            .join(
                RevisionRow,
                (RevisionRow.evaluator_id == EvaluatorRow.id) & (RevisionRow.revision == _shown),
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
