"""Workspaces and their API keys.

A key is ``evh_`` + 43 URL-safe characters (256 random bits); only its SHA-256 is stored (a
slow hash buys nothing for a key that cannot be guessed, and would cost every request), with
its first characters to recognise it in lists. The default workspace (:data:`DEFAULT_WORKSPACE`)
always exists (migration ``0003`` makes its row): it owns what was stored before workspaces, and
what ``EVALUATOR_HOST_API_KEYS``' keys create.

A workspace's runtimes are the ones it asked for (``POST /v1/runtimes``) and the ones its live
evaluators run on: what ``GET /v1/runtimes`` lists for its keys (the runtimes themselves are a
cache shared by every workspace).
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select, union, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from evaluator_host.errors import NotFoundError
from evaluator_host.store.db import (
    ApiKeyRow,
    EvaluatorRow,
    RevisionRow,
    WorkspaceRow,
    WorkspaceRuntimeRow,
    as_utc,
    utcnow,
)

__all__ = ["KEY_PREFIX", "ApiKeyRecord", "WorkspaceRecord", "WorkspaceStore", "hash_key"]

KEY_PREFIX = "evh_"


def hash_key(key: str) -> str:
    """The stored form of a key."""
    return hashlib.sha256(key.encode()).hexdigest()


def _aware(value: datetime | None) -> datetime | None:
    return None if value is None else as_utc(value)


@dataclass(frozen=True)
class WorkspaceRecord:
    """A workspace as stored."""

    id: str
    name: str
    created_at: datetime
    quotas: dict[str, Any] = field(default_factory=dict)
    network_allow: list[str] = field(default_factory=list)
    forwarding: list[dict[str, Any]] = field(
        default_factory=list
    )  # [{"endpoint", "headers"}]: online/receive/forwarding.py


@dataclass(frozen=True)
class ApiKeyRecord:
    """A key's metadata (never the key)."""

    id: str
    workspace_id: str
    name: str
    prefix: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


def _workspace(row: WorkspaceRow) -> WorkspaceRecord:
    created = _aware(row.created_at)
    assert created is not None
    return WorkspaceRecord(
        row.id, row.name, created, dict(row.quotas or {}), list(row.network_allow or []), list(row.forwarding or [])
    )


def _key(row: ApiKeyRow) -> ApiKeyRecord:
    created = _aware(row.created_at)
    assert created is not None
    return ApiKeyRecord(
        row.id, row.workspace_id, row.name, row.prefix, created, _aware(row.last_used_at), _aware(row.revoked_at)
    )


class WorkspaceStore:
    """Short transactions over workspaces and keys (call from a thread: they block)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create(self, name: str) -> WorkspaceRecord:
        """A new workspace (no quotas, no network)."""
        with Session(self.engine) as session, session.begin():
            row = WorkspaceRow(
                id=f"ws_{uuid.uuid4().hex[:20]}", name=name, quotas={}, network_allow=[], created_at=utcnow()
            )
            session.add(row)
            session.flush()
            return _workspace(row)

    def get(self, workspace_id: str) -> WorkspaceRecord:
        """One workspace, or :class:`NotFoundError`."""
        with Session(self.engine) as session:
            row = session.get(WorkspaceRow, workspace_id)
            if row is None:
                raise NotFoundError(f"workspace {workspace_id!r} does not exist")
            return _workspace(row)

    def list_all(self) -> list[WorkspaceRecord]:
        """Every workspace, oldest first."""
        with Session(self.engine) as session:
            return [_workspace(r) for r in session.scalars(select(WorkspaceRow).order_by(WorkspaceRow.created_at))]

    def set(self, workspace_id: str, **fields: Any) -> WorkspaceRecord:
        """Change ``name``, ``quotas``, ``network_allow`` or ``forwarding``."""
        with Session(self.engine) as session, session.begin():
            row = session.get(WorkspaceRow, workspace_id)
            if row is None:
                raise NotFoundError(f"workspace {workspace_id!r} does not exist")
            for name, value in fields.items():
                setattr(row, name, value)
            session.flush()
            return _workspace(row)

    # -- keys ------------------------------------------------------------------------------
    def create_key(self, workspace_id: str, name: str) -> tuple[ApiKeyRecord, str]:
        """A new key of ``workspace_id``: its record and the key itself (shown once, never stored)."""
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        with Session(self.engine) as session, session.begin():
            if session.get(WorkspaceRow, workspace_id) is None:
                raise NotFoundError(f"workspace {workspace_id!r} does not exist")
            row = ApiKeyRow(
                id=f"key_{uuid.uuid4().hex[:20]}",
                workspace_id=workspace_id,
                name=name,
                key_hash=hash_key(key),
                prefix=key[:10],
                created_at=utcnow(),
            )
            session.add(row)
            session.flush()
            return _key(row), key

    def keys(self, workspace_id: str | None = None) -> list[ApiKeyRecord]:
        """Keys (of one workspace, or all), oldest first, revoked ones included."""
        query = select(ApiKeyRow).order_by(ApiKeyRow.created_at)
        if workspace_id is not None:
            query = query.where(ApiKeyRow.workspace_id == workspace_id)
        with Session(self.engine) as session:
            return [_key(r) for r in session.scalars(query)]

    def revoke(self, key_id: str) -> ApiKeyRecord:
        """Mark a key revoked (idempotent); :class:`NotFoundError` when unknown."""
        with Session(self.engine) as session, session.begin():
            row = session.get(ApiKeyRow, key_id)
            if row is None:
                raise NotFoundError(f"key {key_id!r} does not exist")
            if row.revoked_at is None:
                row.revoked_at = utcnow()
            session.flush()
            return _key(row)

    def lookup(self, key_hash: str) -> tuple[str, str] | None:
        """``(key id, workspace id)`` of the live key with this hash, or None."""
        with Session(self.engine) as session:
            row = session.execute(
                select(ApiKeyRow.id, ApiKeyRow.workspace_id).where(
                    ApiKeyRow.key_hash == key_hash, ApiKeyRow.revoked_at.is_(None)
                )
            ).first()
            return None if row is None else (row[0], row[1])

    def revoked(self) -> frozenset[str]:
        """The ids of the revoked keys."""
        with Session(self.engine) as session:
            return frozenset(session.scalars(select(ApiKeyRow.id).where(ApiKeyRow.revoked_at.is_not(None))))

    def live_keys(self) -> int:
        """How many keys are not revoked."""
        with Session(self.engine) as session:
            return len(session.scalars(select(ApiKeyRow.id).where(ApiKeyRow.revoked_at.is_(None))).all())

    def touch(self, used: dict[str, datetime]) -> None:
        """Record when keys were last used (key id -> time)."""
        with self.engine.begin() as conn:
            for key_id, when in used.items():
                conn.execute(update(ApiKeyRow).where(ApiKeyRow.id == key_id).values(last_used_at=when))

    # -- runtimes --------------------------------------------------------------------------
    def note_runtime(self, workspace_id: str, runtime_id: str) -> None:
        """Remember that ``workspace_id`` asked for runtime ``runtime_id`` (idempotent)."""
        with Session(self.engine) as session:
            if session.get(WorkspaceRuntimeRow, (workspace_id, runtime_id)) is not None:
                return
            session.add(WorkspaceRuntimeRow(workspace_id=workspace_id, runtime_id=runtime_id, created_at=utcnow()))
            try:
                session.commit()
            except IntegrityError:  # the same request, concurrently: remembered either way
                session.rollback()

    def runtimes_of(self, workspace_id: str) -> frozenset[str]:
        """The ids of the runtimes ``workspace_id`` asked for or its live evaluators' revisions run on."""
        used = (
            select(RevisionRow.runtime_id)
            .join(EvaluatorRow, EvaluatorRow.id == RevisionRow.evaluator_id)
            .where(EvaluatorRow.workspace_id == workspace_id, EvaluatorRow.deleted_at.is_(None))
        )
        asked = select(WorkspaceRuntimeRow.runtime_id).where(WorkspaceRuntimeRow.workspace_id == workspace_id)
        with Session(self.engine) as session:
            return frozenset(session.scalars(select(union(used, asked).subquery().c[0])))
