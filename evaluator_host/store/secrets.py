"""Workspace secrets at rest: names in clear, values as Fernet tokens (the cipher is the caller's)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, func, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from evaluator_host.store.db import SecretRow, as_utc, utcnow

__all__ = ["SecretInfo", "SecretStore"]


@dataclass(frozen=True)
class SecretInfo:
    """What the API may show of a secret: never its value."""

    name: str
    created_at: datetime
    updated_at: datetime


class SecretStore:
    """Short transactions over the ``secrets`` table (call from a thread: they block)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def put(self, workspace_id: str, name: str, ciphertext: str) -> bool:
        """Store (or replace) a secret; True when it is new. Two first puts of one name at once (this
        service or another on the database) store one row: the later one replaces the value."""
        now = utcnow()
        where = (SecretRow.workspace_id == workspace_id, SecretRow.name == name)
        with self.engine.begin() as conn:
            if conn.execute(update(SecretRow).where(*where).values(ciphertext=ciphertext, updated_at=now)).rowcount:
                return False
        row = SecretRow(workspace_id=workspace_id, name=name, ciphertext=ciphertext, created_at=now, updated_at=now)
        try:
            with Session(self.engine) as session, session.begin():
                session.add(row)
            return True
        except IntegrityError:  # put by someone else since the update found nothing
            with self.engine.begin() as conn:
                conn.execute(update(SecretRow).where(*where).values(ciphertext=ciphertext, updated_at=now))
            return False

    def delete(self, workspace_id: str, name: str) -> bool:
        """Remove a secret; False when there was none."""
        with self.engine.begin() as conn:
            gone = conn.execute(delete(SecretRow).where(SecretRow.workspace_id == workspace_id, SecretRow.name == name))
            return bool(gone.rowcount)

    def names(self, workspace_id: str) -> list[SecretInfo]:
        """The workspace's secrets, by name."""
        query = select(SecretRow).where(SecretRow.workspace_id == workspace_id).order_by(SecretRow.name)
        with Session(self.engine) as session:
            return [SecretInfo(r.name, as_utc(r.created_at), as_utc(r.updated_at)) for r in session.scalars(query)]

    def ciphertexts(self, workspace_id: str | None = None) -> dict[tuple[str, str], str]:
        """(workspace, name) -> stored token, of one workspace or all."""
        query = select(SecretRow.workspace_id, SecretRow.name, SecretRow.ciphertext)
        if workspace_id is not None:
            query = query.where(SecretRow.workspace_id == workspace_id)
        with self.engine.connect() as conn:
            return {(ws, name): token for ws, name, token in conn.execute(query)}

    def replace_ciphertexts(self, tokens: dict[tuple[str, str], str]) -> None:
        """Store re-encrypted tokens (key rotation), in one transaction."""
        with Session(self.engine) as session, session.begin():
            for (ws, name), token in tokens.items():
                row = session.get(SecretRow, (ws, name))
                if row is not None:
                    row.ciphertext = token

    def versions(self) -> dict[str, tuple[int, datetime]]:
        """Per workspace: how many secrets it has and when the newest changed (a put or a delete by
        another service sharing the database changes one of the two)."""
        query = select(SecretRow.workspace_id, func.count(), func.max(SecretRow.updated_at)).group_by(
            SecretRow.workspace_id
        )
        with self.engine.connect() as conn:
            return {ws: (int(count), as_utc(newest)) for ws, count, newest in conn.execute(query)}
