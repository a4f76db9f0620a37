"""Workspaces' ``max_evaluations_per_s`` token buckets kept in the database (``rate_buckets``), so that
several services on one PostgreSQL database share one bucket per workspace (issue 54): with N replicas a
workspace still gets its rate, not N times it.

Contract:

* One row per workspace that has a rate quota and was charged: ``tokens`` left at ``at`` (Unix seconds by
  the **database's** clock, as job leases: services whose hosts' clocks disagree still refill alike), the
  ``rate`` it was refilled at, and ``booked`` (when the last batch of paced evaluations put off is due).
* :meth:`RateBuckets.update` runs one transaction: the row is created when missing (a concurrent creator's
  row is kept), then read ``FOR UPDATE`` (PostgreSQL: the workspace's charges take turns across services),
  handed with the database's clock to ``change`` (the
  bucket arithmetic of :mod:`evaluator_host.tenancy.quotas`), and written back. A charge ``change`` refuses
  (it raises) writes nothing.
* Used on PostgreSQL only (:class:`~evaluator_host.tenancy.quotas.QuotaGuard`): the SQLite database is the
  embedded single service's, whose bucket stays in its memory (no write per call).
* A rate changed by a ``PATCH`` starts a full bucket at the new rate, as the in-memory bucket does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Float, String, Table, insert, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from evaluator_host.store.db import Base
from evaluator_host.store.jobs.leases import database_now

__all__ = ["BucketState", "RateBucketRow", "RateBuckets"]

T = TypeVar("T")


class RateBucketRow(Base):
    """A workspace's shared ``max_evaluations_per_s`` bucket (migration ``0023_rate_buckets``)."""

    __tablename__ = "rate_buckets"

    workspace_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    rate: Mapped[float] = mapped_column(Float)
    tokens: Mapped[float] = mapped_column(Float)
    at: Mapped[float] = mapped_column(Float)
    booked: Mapped[float] = mapped_column(Float)


_TABLE: Table = RateBucketRow.__table__  # type: ignore[assignment]


class BucketState:
    """A bucket as read (and changed in place by the quota arithmetic): the same fields as the row."""

    __slots__ = ("at", "booked", "rate", "tokens")

    def __init__(self, rate: float, tokens: float, at: float, booked: float = 0.0) -> None:
        self.rate, self.tokens, self.at, self.booked = rate, tokens, at, booked


class RateBuckets:
    """The ``rate_buckets`` table on ``engine`` (call from a thread: statements block)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def update(self, workspace_id: str, rate: float, change: Callable[[BucketState, float], T]) -> T:
        """Run ``change(bucket, now)`` on ``workspace_id``'s bucket at ``rate`` under its lock, ``now`` the
        database's clock (Unix s); store the bucket it leaves unless it raises; its result."""
        table, row_of = _TABLE, _TABLE.c
        # the row and the clock in one statement (three round trips a charge: this, the UPDATE, the commit);
        # the clock may be read before a wait for the lock: the refill never goes back in time (quotas._refill)
        query = select(row_of.rate, row_of.tokens, row_of.at, row_of.booked, database_now(self.engine)).where(
            row_of.workspace_id == workspace_id
        )
        with self.engine.begin() as conn:
            found = conn.execute(query.with_for_update(of=table)).first()
            if found is None:
                now = float(conn.execute(select(database_now(self.engine))).scalar_one())
                try:
                    with conn.begin_nested():
                        conn.execute(
                            insert(table).values(
                                workspace_id=workspace_id, rate=rate, tokens=max(rate, 1.0), at=now, booked=0.0
                            )
                        )
                except IntegrityError:
                    pass  # another service made it meanwhile: use (and lock) its row
                found = conn.execute(query.with_for_update(of=table)).one()
            *fields, clock = (float(v) for v in found)
            now = clock
            bucket = BucketState(*fields)
            if bucket.rate != rate:
                bucket = BucketState(rate, max(rate, 1.0), now)
            result = change(bucket, now)
            conn.execute(
                update(table)
                .where(row_of.workspace_id == workspace_id)
                .values(rate=bucket.rate, tokens=bucket.tokens, at=bucket.at, booked=bucket.booked)
            )
            return result
