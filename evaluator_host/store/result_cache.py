"""The result cache's tables (migration ``0011``): one stored result per (workspace, key), bounded per workspace.

Contract (``evaluation/caching/cache.py`` computes the keys and decides what is cached; this module only stores):

* :meth:`ResultCacheStore.get` answers the entries of many keys in one query per 500 keys (a job's
  chunk: never one query per row) and marks the ones last used more than :data:`TOUCH_AFTER_S` ago
  as used now, in one statement: the eviction order is least recently used, to within that time.
* :meth:`ResultCacheStore.put` adds entries (a key already there is left as it is: an entry never
  changes), adds their bytes to the workspace's ``result_cache_usage`` in the same transaction, and,
  past ``max_bytes``, evicts the workspace's least recently used entries down to 90 % of it, in that
  transaction too: what a workspace's entries add up to never stays over its bound after a ``put``.
  An entry larger than ``max_bytes`` alone is not stored.
* Nothing else removes an entry (no expiry, no invalidation: a changed evaluator, runtime or case is
  another key); :meth:`clear` empties a workspace's cache; :meth:`usage` says what it holds.

Every statement is portable SQL (SQLite and PostgreSQL); call from a thread: they block.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from sqlalchemy import BigInteger, Float, Index, Integer, LargeBinary, String, Table, Text, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Mapped, mapped_column

from evaluator_host.store import sqlite_bulk
from evaluator_host.store.db import Base

__all__ = ["TOUCH_AFTER_S", "CacheUsage", "ResultCacheRow", "ResultCacheStore"]

TOUCH_AFTER_S = 60.0  # an entry's last use is written again only when older than this (LRU-ish, few writes)
_BATCH = 500  # keys per query
_SKIP_HELD = "ON CONFLICT (workspace_id, key) DO NOTHING"
_COLUMNS = ("workspace_id", "key", "status", "result", "bytes", "used_at")


class ResultCacheRow(Base):
    """One cached result: the row's stored form (``jobs/stored_form.py``) under its key."""

    __tablename__ = "result_cache"
    __table_args__ = (Index("ix_result_cache_used", "workspace_id", "used_at"), {"sqlite_with_rowid": False})

    workspace_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    key: Mapped[bytes] = mapped_column(LargeBinary(32), primary_key=True)  # sha256 (evaluation/caching/cache.py)
    status: Mapped[str] = mapped_column(String(20))
    result: Mapped[str] = mapped_column(Text)
    bytes: Mapped[int] = mapped_column(Integer)  # UTF-8 bytes of ``result`` plus the key's 32
    used_at: Mapped[float] = mapped_column(Float)  # Unix seconds, to within TOUCH_AFTER_S


class ResultCacheUsageRow(Base):
    """What one workspace's cache entries add up to (kept with every add and eviction)."""

    __tablename__ = "result_cache_usage"

    workspace_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    bytes: Mapped[int] = mapped_column(BigInteger)
    entries: Mapped[int] = mapped_column(BigInteger)


CACHE: Table = ResultCacheRow.__table__  # type: ignore[assignment]
USAGE: Table = ResultCacheUsageRow.__table__  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class CacheUsage:
    """A workspace's cache: its entries and their bytes."""

    entries: int = 0
    bytes: int = 0


class ResultCacheStore:
    """Short transactions over ``result_cache`` (see the module's contract)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._now = time.time
        self._pg = engine.dialect.name == "postgresql"

    def get(self, workspace_id: str, keys: Sequence[bytes]) -> dict[bytes, tuple[str, str]]:
        """The entries of ``keys`` that are stored: key → (status, stored result)."""
        found: dict[bytes, tuple[str, str]] = {}
        stale: list[bytes] = []
        now = self._now()
        c = CACHE.c
        with self.engine.begin() as conn:
            for start in range(0, len(keys), _BATCH):
                part = list(keys[start : start + _BATCH])
                query = select(c.key, c.status, c.result, c.used_at).where(
                    c.workspace_id == workspace_id, c.key.in_(part)
                )
                for key, status, result, used_at in conn.execute(query):
                    found[bytes(key)] = (status, result)
                    if used_at < now - TOUCH_AFTER_S:
                        stale.append(bytes(key))
            for start in range(0, len(stale), _BATCH):
                part = stale[start : start + _BATCH]
                conn.execute(update(CACHE).where(c.workspace_id == workspace_id, c.key.in_(part)).values(used_at=now))
        return found

    def put(self, workspace_id: str, entries: Sequence[tuple[bytes, str, str]], max_bytes: int) -> int:
        """Store ``entries`` (key, status, stored result) not stored yet, then evict past ``max_bytes``
        (the module's contract); the number of entries evicted. An entry of status ``marker`` is marked used
        a millisecond later than the others — also when it was stored by an earlier put (a job's later chunk) —
        so it is the last of them evicted."""
        now = self._now()
        values = self._values(workspace_id, entries, max_bytes, now)
        if not values:
            return 0
        with self.engine.begin() as conn:
            return self._put(conn, workspace_id, values, entries, max_bytes, now)

    def put_in(
        self, conn: Connection, workspace_id: str, entries: Sequence[tuple[bytes, str, str]], max_bytes: int
    ) -> int:
        """:meth:`put` in the caller's transaction ``conn`` (a backfill's page: one commit for both). On SQLite
        ``conn`` has written already (it holds the database's one write lock: the keys stored are read, then the
        others inserted by one prepared statement, :mod:`~evaluator_host.store.sqlite_bulk`)."""
        now = self._now()
        values = self._values(workspace_id, entries, max_bytes, now)
        return self._put(conn, workspace_id, values, entries, max_bytes, now, locked=True) if values else 0

    def _put(
        self,
        conn: Connection,
        workspace_id: str,
        values: list[dict[str, object]],
        entries: Sequence[tuple[bytes, str, str]],
        max_bytes: int,
        now: float,
        locked: bool = False,
    ) -> int:
        sizes: dict[bytes, int] = {key: len(text.encode()) + 32 for key, _, text in entries}
        dialect = postgresql if self._pg else sqlite
        added = 0
        count = 0
        markers = [v["key"] for v in values if v["status"] == "marker"]
        if locked and not self._pg:
            new = self._insert_locked(conn, workspace_id, values)
            added, count, values = sum(sizes[k] for k in new), len(new), []  # the loop below inserts nothing
        for start in range(0, len(values), _BATCH):
            statement = (
                dialect.insert(CACHE)
                .on_conflict_do_nothing(index_elements=["workspace_id", "key"])
                .returning(CACHE.c.key)
            )
            for key in conn.execute(statement, values[start : start + _BATCH]).scalars():
                added += sizes[bytes(key)]
                count += 1
        if markers:  # a marker already stored is not inserted again: mark it used now, after this put's rows
            c = CACHE.c
            conn.execute(
                update(CACHE).where(c.workspace_id == workspace_id, c.key.in_(markers)).values(used_at=now + 0.001)
            )
        used = self._add_usage(conn, workspace_id, added, count)
        if used.bytes <= max_bytes:
            return 0
        return self._evict(conn, workspace_id, used, max_bytes)

    @staticmethod
    def _insert_locked(conn: Connection, workspace_id: str, values: list[dict[str, object]]) -> set[bytes]:
        """SQLite, ``conn`` holding the write lock: insert the entries whose key is not stored; their keys."""
        c = CACHE.c
        keys = [v["key"] for v in values]
        held: set[bytes] = set()
        for start in range(0, len(keys), _BATCH):
            present = select(c.key).where(c.workspace_id == workspace_id, c.key.in_(keys[start : start + _BATCH]))
            held.update(bytes(k) for k in conn.execute(present).scalars())
        new: set[bytes] = set()
        fresh = []
        for v in values:
            key = cast(bytes, v["key"])
            if key not in held and key not in new:
                new.add(key)
                fresh.append(v)
        if fresh:
            fresh.sort(key=lambda v: cast(bytes, v["key"]))  # in the primary key's order: each page of it once
            entries = sqlite_bulk.params(fresh, _COLUMNS)
            if sqlite_bulk.insert(conn, CACHE.name, _COLUMNS, entries, _SKIP_HELD) != len(fresh):
                raise RuntimeError("result cache entries were stored meanwhile")
        return new

    @staticmethod
    def _values(
        workspace_id: str, entries: Sequence[tuple[bytes, str, str]], max_bytes: int, now: float
    ) -> list[dict[str, object]]:
        return [
            {
                "workspace_id": workspace_id,
                "key": key,
                "status": status,
                "result": text,
                "bytes": size,
                "used_at": now + 0.001 if status == "marker" else now,
            }
            for key, status, text in entries
            if (size := len(text.encode()) + 32) <= max_bytes
        ]

    def _add_usage(self, conn: Connection, workspace_id: str, added: int, count: int) -> CacheUsage:
        u = USAGE.c
        dialect = postgresql if self._pg else sqlite
        upsert = dialect.insert(USAGE).values(workspace_id=workspace_id, bytes=added, entries=count)
        upsert = upsert.on_conflict_do_update(
            index_elements=["workspace_id"], set_={"bytes": USAGE.c.bytes + added, "entries": USAGE.c.entries + count}
        ).returning(u.bytes, u.entries)
        row = conn.execute(upsert).one()
        return CacheUsage(entries=int(row.entries), bytes=int(row.bytes))

    def _evict(self, conn: Connection, workspace_id: str, used: CacheUsage, max_bytes: int) -> int:
        """Remove the least recently used entries until the workspace holds at most 90 % of ``max_bytes``."""
        c = CACHE.c
        excess = used.bytes - int(max_bytes * 0.9)
        freed = evicted = 0
        while freed < excess:
            query = (
                select(c.key, c.bytes).where(c.workspace_id == workspace_id).order_by(c.used_at, c.key).limit(_BATCH)
            )
            victims: list[bytes] = []
            for key, size in conn.execute(query):
                if freed >= excess:
                    break
                victims.append(bytes(key))
                freed += int(size)
            if not victims:
                break
            conn.execute(delete(CACHE).where(c.workspace_id == workspace_id, c.key.in_(victims)))
            evicted += len(victims)
        conn.execute(
            update(USAGE)
            .where(USAGE.c.workspace_id == workspace_id)
            .values(bytes=USAGE.c.bytes - freed, entries=USAGE.c.entries - evicted)
        )
        return evicted

    def usage(self, workspace_id: str) -> CacheUsage:
        """What ``workspace_id``'s cache holds."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(USAGE.c.entries, USAGE.c.bytes).where(USAGE.c.workspace_id == workspace_id)
            ).first()
        return CacheUsage() if row is None else CacheUsage(int(row.entries), int(row.bytes))

    def clear(self, workspace_id: str) -> int:
        """Remove every entry of ``workspace_id``; how many there were."""
        with self.engine.begin() as conn:
            removed = conn.execute(delete(CACHE).where(CACHE.c.workspace_id == workspace_id)).rowcount
            conn.execute(delete(USAGE).where(USAGE.c.workspace_id == workspace_id))
        return int(removed or 0)
