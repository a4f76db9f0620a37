"""Idempotency keys: a retried ``POST`` answers what the first one answered, and does nothing again.

``POST /v1/evaluators`` and ``POST /v1/jobs`` accept an ``Idempotency-Key`` header (1–255 printable
ASCII characters). The first request with a key claims it (a row with no answer yet), runs, and
stores its answer (status and body). Later requests with the same key and route:

* the same body → the stored answer again, with ``Idempotent-Replayed: true`` (nothing runs);
* the first still running → 409 ``Conflict`` (retry a moment later);
* the first's service died before it answered (its claim was not renewed for ``claim_s``) → the retry takes the
  claim over and runs (a lease, as a job's: the request renews its claim every quarter of ``claim_s`` while it
  runs, so only a claim whose service stopped renewing goes stale);
* another body → 422 ``IdempotencyKeyReused`` (a key names one request, never two).

A request that fails with an error of ours (4xx/5xx) releases its key, so a retry after a 503
really runs again. Keys are kept :data:`KEEP` (24 h) after their first use, then forgotten.

``created_at`` is the claim's clock: set when claimed, moved on by each renewal while the request runs (so a key
is kept 24 h after its request's last renewal, at most ``claim_s`` before its answer), and the fence: a
renewal, an answer or a release names the ``created_at`` its claim wrote (:attr:`Claim.token`), so a request whose
claim was taken over changes nothing. Stale is judged on each service's own clock (keep them in NTP sync: a skew
of a few seconds is covered by ``claim_s``).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

from sqlalchemy import CursorResult, delete, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from evaluator_host.store.db import IdempotencyRow

__all__ = ["KEEP", "Claim", "IdempotencyStore", "request_hash"]

KEEP = timedelta(hours=24)
CLAIM_S = 30.0  # the default: EVALUATOR_HOST_IDEMPOTENCY_CLAIM_S


def request_hash(body: bytes) -> str:
    """What identifies a request's content."""
    return hashlib.sha256(body).hexdigest()


class Claim:
    """What :meth:`IdempotencyStore.claim` found: run it (``fresh``), replay, or refuse."""

    def __init__(
        self,
        fresh: bool,
        *,
        running: bool = False,
        other_body: bool = False,
        status: int = 0,
        answer: str = "",
        token: datetime | None = None,
        taken_over: bool = False,
    ) -> None:
        self.fresh, self.running, self.other_body, self.status, self.answer = fresh, running, other_body, status, answer
        self.token = token  # a fresh claim's created_at: what renew/store/release name
        self.taken_over = taken_over  # fresh because the first request's claim went stale


class IdempotencyStore:
    """The keys' rows (one table; any SQLAlchemy database)."""

    def __init__(self, engine: Engine, claim_s: float = CLAIM_S) -> None:
        self.engine = engine
        self.claim_s = claim_s

    def claim(self, route: str, key: str, digest: str) -> Claim:
        """Claim ``key`` for a request of ``digest`` on ``route``, or say what holds it."""
        now = datetime.now(UTC)
        with Session(self.engine) as session, session.begin():
            session.execute(delete(IdempotencyRow).where(IdempotencyRow.created_at < now - KEEP))
        try:
            with Session(self.engine) as session, session.begin():
                session.add(IdempotencyRow(route=route, key=key, request_hash=digest, created_at=now))
            return Claim(True, token=now)
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
            return self._take_over(route, key, digest) or Claim(False, running=True)
        return Claim(False, status=row.status_code, answer=row.answer)

    def _take_over(self, route: str, key: str, digest: str) -> Claim | None:
        """The claim of ``key`` when its request's claim was not renewed for ``claim_s`` (its service died before
        it answered); None while it is live. One conditional update: of two retries racing, one wins."""
        now = datetime.now(UTC)
        with Session(self.engine) as session, session.begin():
            taken = session.execute(
                update(IdempotencyRow)
                .where(
                    IdempotencyRow.route == route,
                    IdempotencyRow.key == key,
                    IdempotencyRow.request_hash == digest,
                    IdempotencyRow.answer.is_(None),
                    IdempotencyRow.created_at < now - timedelta(seconds=self.claim_s),
                )
                .values(created_at=now)
            )
        return Claim(True, token=now, taken_over=True) if _count(taken) == 1 else None

    def renew(self, route: str, key: str, token: datetime) -> datetime | None:
        """Move the running request's claim (``token``) on to now: the new token, or None when the claim is no
        longer this request's (it went stale and a retry took it over)."""
        now = datetime.now(UTC)
        with Session(self.engine) as session, session.begin():
            renewed = session.execute(
                update(IdempotencyRow)
                .where(*_held(route, key, token), IdempotencyRow.answer.is_(None))
                .values(created_at=now)
            )
        return now if _count(renewed) == 1 else None

    def store(self, route: str, key: str, status: int, answer: str, token: datetime | None = None) -> bool:
        """Keep the answer of the request that claimed ``key`` (with ``token``: only while the claim is still that
        request's); whether it was kept."""
        with Session(self.engine) as session, session.begin():
            stored = session.execute(
                update(IdempotencyRow).where(*_held(route, key, token)).values(status_code=status, answer=answer)
            )
        return _count(stored) == 1

    def release(self, route: str, key: str, token: datetime | None = None) -> None:
        """Forget a claim whose request failed (a retry runs again); with ``token``, only while it is still that
        request's."""
        with Session(self.engine) as session, session.begin():
            session.execute(delete(IdempotencyRow).where(*_held(route, key, token)))


def _held(route: str, key: str, token: datetime | None) -> list[ColumnElement[bool]]:
    where = [IdempotencyRow.route == route, IdempotencyRow.key == key]
    if token is not None:
        where.append(IdempotencyRow.created_at == token)
    return where


def _count(result: object) -> int:
    return result.rowcount if isinstance(result, CursorResult) else 0
