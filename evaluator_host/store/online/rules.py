"""Online rules (``online_rules``): create, read, change, soft-delete; every read names its workspace.

A rule of another workspace, or a deleted one, is :class:`NotFoundError` — the same answer as an
unknown id. Deleting is soft (``deleted_at``): stored scores keep their rule, and the router and
the scorer skip it at once (they read ``deleted_at``). Short transactions; call from a thread.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from evaluator_host.errors import ConflictError, NotFoundError
from evaluator_host.store.db import as_utc, newest_first, utcnow
from evaluator_host.store.online.rows import OnlineRuleRow

__all__ = ["RuleRecord", "RuleStore", "rule_record"]

CHANGEABLE = (
    "name", "revision", "filter", "sampling_rate", "mapping", "enabled", "limits", "sinks", "candidate_revision"
)  # fmt: skip
CREATED = (*CHANGEABLE, "target")  # a rule's target is set when it is created (issue 50)


@dataclass(frozen=True)
class RuleRecord:
    """A stored rule (``filter`` and ``mapping`` as their JSON)."""

    id: str
    workspace_id: str
    name: str | None
    evaluator_id: str
    revision: int | None
    filter: dict[str, Any]
    sampling_rate: float
    mapping: dict[str, Any] | None
    enabled: bool
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None = None
    target: dict[str, Any] | None = None  # None: {"level": "trace"}
    limits: dict[str, Any] | None = None  # budgets (issue 51): scores_per_minute, sandbox_seconds_per_hour, ...
    sinks: list[dict[str, Any]] | None = None  # issue 52: where its scores are also written (sinks/)
    candidate_revision: int | None = None  # issue 53: scored beside the live revision, stored apart (shadow)

    @property
    def level(self) -> str:
        """What one score is of: ``trace`` (the default) or ``span``."""
        return str((self.target or {}).get("level") or "trace")


def rule_record(row: Any) -> RuleRecord:
    """The record of a row (ORM or Core)."""
    return RuleRecord(
        id=row.id,
        workspace_id=row.workspace_id,
        name=row.name,
        evaluator_id=row.evaluator_id,
        revision=row.revision,
        filter=dict(row.filter or {}),
        sampling_rate=float(row.sampling_rate),
        mapping=None if row.mapping is None else dict(row.mapping),
        enabled=bool(row.enabled),
        created_at=as_utc(row.created_at),
        updated_at=as_utc(row.updated_at),
        deleted_at=None if row.deleted_at is None else as_utc(row.deleted_at),
        target=None if row.target is None else dict(row.target),
        limits=None if row.limits is None else dict(row.limits),
        sinks=list(getattr(row, "sinks", None) or []) or None,
        candidate_revision=getattr(row, "candidate_revision", None),
    )


def _live(session: Session, workspace_id: str, rule_id: str) -> OnlineRuleRow:
    row = session.get(OnlineRuleRow, rule_id)
    if row is None or row.workspace_id != workspace_id or row.deleted_at is not None:
        raise NotFoundError(f"online rule {rule_id!r} does not exist")
    return row


class RuleStore:
    """The ``online_rules`` table of one database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create(self, workspace_id: str, evaluator_id: str, fields: dict[str, Any]) -> RuleRecord:
        """Store a new rule (``fields``: :data:`CHANGEABLE`, JSON-ready, and optionally ``target``) and answer it."""
        now = utcnow()
        row = OnlineRuleRow(
            id=f"rule_{uuid.uuid4().hex[:20]}",
            workspace_id=workspace_id,
            evaluator_id=evaluator_id,
            created_at=now,
            updated_at=now,
            deleted_at=None,
            **{name: fields.get(name) for name in CREATED},
        )
        with Session(self.engine) as session, session.begin():
            session.add(row)
            session.flush()
            return rule_record(row)

    def get(self, workspace_id: str, rule_id: str) -> RuleRecord:
        """One live rule of ``workspace_id`` (``NotFoundError`` otherwise)."""
        with Session(self.engine) as session:
            return rule_record(_live(session, workspace_id, rule_id))

    def list(
        self, workspace_id: str, *, limit: int | None = None, before: tuple[datetime, str] | None = None
    ) -> list[RuleRecord]:
        """Live rules of ``workspace_id``, newest first (the API's keyset, ``store.db.newest_first``)."""
        r = OnlineRuleRow
        query = select(r).where(r.workspace_id == workspace_id, r.deleted_at.is_(None))
        with Session(self.engine) as session:
            return [rule_record(x) for x in session.scalars(newest_first(query, r.created_at, r.id, limit, before))]

    def update(self, workspace_id: str, rule_id: str, changes: dict[str, Any]) -> RuleRecord:
        """Change the given fields (names of :data:`CHANGEABLE`) of a live rule."""
        with Session(self.engine) as session, session.begin():
            row = _live(session, workspace_id, rule_id)
            for name, value in changes.items():
                if name not in CHANGEABLE:
                    raise ValueError(name)
                setattr(row, name, value)
            row.updated_at = utcnow()
            session.flush()
            return rule_record(row)

    def delete(self, workspace_id: str, rule_id: str) -> None:
        """Soft-delete a live rule (its scores stay; queued ones are never scored)."""
        with Session(self.engine) as session, session.begin():
            row = _live(session, workspace_id, rule_id)
            row.deleted_at = row.updated_at = utcnow()

    def promote(self, workspace_id: str, rule_id: str) -> tuple[RuleRecord, int | None]:
        """Make a live rule's candidate revision its live one and clear the candidate, in ONE conditional
        ``UPDATE`` (``revision = candidate_revision, candidate_revision = NULL WHERE candidate_revision IS NOT
        NULL``): a claim of the scorer reads the rule before or after it, never half of it (see
        docs/online.md, "Try a new revision on live traffic"). The rule after it and the revision it had;
        ``NotFoundError`` as :meth:`get`, ``ConflictError`` (409) when it has no candidate."""
        r = OnlineRuleRow
        with Session(self.engine) as session, session.begin():
            before = _live(session, workspace_id, rule_id).revision
            done = session.execute(
                update(r)
                .where(r.id == rule_id, r.deleted_at.is_(None), r.candidate_revision.is_not(None))
                .values(revision=r.candidate_revision, candidate_revision=None, updated_at=utcnow())
                .execution_options(synchronize_session=False)
            )
            if not done.rowcount:  # type: ignore[attr-defined]
                raise ConflictError(f"online rule {rule_id!r} has no candidate revision to promote")
        return self.get(workspace_id, rule_id), before
