"""Idempotency keys: a retried ``POST`` answers what the first one answered, and does nothing again.

``POST /v1/evaluators`` and ``POST /v1/jobs`` accept an ``Idempotency-Key`` header (1–255 printable
ASCII characters). The first request with a key claims it (a row with no answer yet), runs, and
stores its answer (status and body). Later requests with the same key and route:

* the same body → the stored answer again, with ``Idempotent-Replayed: true`` (nothing runs);
* the first still running → 409 ``Conflict`` (retry a moment later);
* another body → 422 ``IdempotencyKeyReused`` (a key names one request, never two).

A request that fails with an error of ours (4xx/5xx) releases its key, so a retry after a 503
really runs again. Keys are kept :data:`KEEP` (24 h) after their first use, then forgotten.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from evaluator_host.store.db import IdempotencyRow

__all__ = ["KEEP", "Claim", "IdempotencyStore", "request_hash"]

KEEP = timedelta(hours=24)


def request_hash(body: bytes) -> str:
    """What identifies a request's content."""
    return hashlib.sha256(body).hexdigest()


class Claim:
    """What :meth:`IdempotencyStore.claim` found: run it (``fresh``), replay, or refuse."""

    def __init__(
        self, fresh: bool, *, running: bool = False, other_body: bool = False, status: int = 0, answer: str = ""
    ) -> None:
        self.fresh, self.running, self.other_body, self.status, self.answer = fresh, running, other_body, status, answer


class IdempotencyStore:
    """The keys' rows (one table; any SQLAlchemy database)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def claim(self, route: str, key: str, digest: str) -> Claim:
        """Claim ``key`` for a request of ``digest`` on ``route``, or say what holds it."""
        now = datetime.now(UTC)
        with Session(self.engine) as session, session.begin():
            session.execute(delete(IdempotencyRow).where(IdempotencyRow.created_at < now - KEEP))
        try:
            with Session(self.engine) as session, session.begin():
                session.add(IdempotencyRow(route=route, key=key, request_hash=digest, created_at=now))
            return Claim(True)
        except IntegrityError:
            pass
        with Session(self.engine) as session:
            row = session.scalars(
                select(IdempotencyRow).where(IdempotencyRow.route == route, IdempotencyRow.key == key)
            ).first()
        if row is None:  # released meanwhile: try once more
            return self.claim(route, key, digest)
        if row.request_hash != digest:
            return Claim(False, other_body=True)
        if row.answer is None or row.status_code is None:
            return Claim(False, running=True)
        return Claim(False, status=row.status_code, answer=row.answer)

    def store(self, route: str, key: str, status: int, answer: str) -> None:
        """Keep the answer of the request that claimed ``key``."""
        with Session(self.engine) as session, session.begin():
            session.execute(
                update(IdempotencyRow)
                .where(IdempotencyRow.route == route, IdempotencyRow.key == key)
                .values(status_code=status, answer=answer)
            )

    def release(self, route: str, key: str) -> None:
        """Forget a claim whose request failed (a retry runs again)."""
        with Session(self.engine) as session, session.begin():
            session.execute(delete(IdempotencyRow).where(IdempotencyRow.route == route, IdempotencyRow.key == key))
