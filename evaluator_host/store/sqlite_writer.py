"""One writer at a time on a SQLite file, queued in the process (issue 55 §2: the service's threads that write —
span writer, router, claims, results, backfill pages — wait for each other without sleeping).

SQLite lets one connection write at a time. Another that wants to write meanwhile gets ``SQLITE_BUSY``, and
SQLite's busy handler *sleeps* — 1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, then 100 ms at a time until the busy
timeout — without being woken when the lock is free: a write that waited for a 3 ms commit could sleep 25 ms or
100 ms more. Measured at 1,500 traces/s (``bench.scoring_steps``, each call's wall and thread CPU): a result
store 138 ms of wall for 14 ms of CPU, a claim 57 for 12, a span group 71 for 12.

So the connections of a SQLite engine made by ``make_engine`` are :class:`WriterConnection`: before a
transaction's first write (a statement that starts, after any comments, with INSERT, UPDATE, DELETE or REPLACE:
the one ``sqlite3`` begins the transaction for, or the first write in a transaction a ``SAVEPOINT`` opened), a
connection takes its file's lock in this process (one lock a file, shared by every engine of the process on it),
and the end of its transaction — a commit, a rollback, a close, a script's commit, the statement's end in
autocommit; not a commit that failed, whose transaction is still open — gives it back. A waiter wakes the moment
it is free. Contract:

* The lock is taken exactly when SQLite's own write lock would be, and released when SQLite's is: a thread that
  would have waited on SQLite waits on the lock instead; nothing waits that did not.
* It is a lock in front of SQLite's, not instead of it: after the connection's busy timeout without it, the
  statement goes on and SQLite decides as before (``database is locked`` after another timeout). Other
  processes on the same file (a CLI command, a second service) are ordered by SQLite's lock alone.
* :func:`first`: the transactions a thread writes within it go before the writers waiting that are not marked
  so (the span writer's group commit: a ``POST /v1/traces`` waits on it, a scoring round does not) — but not
  twice in a row while others wait: the kinds then alternate, so neither starves the other.
* Statements that do not start a writing transaction (reads, PRAGMAs, DDL outside a transaction) are not
  ordered; an in-memory database is not either.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

__all__ = ["WriterConnection", "WriterCursor", "first"]

# a statement that writes (after any leading comments, as ``sqlite3`` skips them)
_DML = re.compile(r"(?:\s|--[^\n]*(?:\n|$)|/\*.*?\*/)*(?:INSERT|UPDATE|DELETE|REPLACE)\b", re.IGNORECASE | re.DOTALL)
_GUARD = threading.Lock()
_FIRST = threading.local()  # whether this thread's next writing transaction goes first (:func:`first`)


class _WriterLock:
    """One writer at a time; a waiter marked *first* is let in before the others waiting — but not twice in a
    row while others wait: then one of them goes (neither kind starves the other)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._held = False
        self._waiting = [0, 0]  # others, first
        self._last_first = False  # whether the last holder was a first writer

    def locked(self) -> bool:
        """Whether a writer holds it."""
        return self._held

    def acquire(self, timeout: float, *, first: bool = False) -> bool:
        """Hold it (waiting at most ``timeout`` seconds); whether it is held."""

        def turn() -> bool:
            if self._held:
                return False
            if first:
                return not self._last_first or not self._waiting[0]
            return not self._waiting[1] or self._last_first

        with self._cond:
            self._waiting[first] += 1
            try:
                free = self._cond.wait_for(turn, timeout)
            finally:
                self._waiting[first] -= 1
            if free:
                self._held, self._last_first = True, first
            return free

    def release(self) -> None:
        """Let the next writer in."""
        with self._cond:
            self._held = False
            self._cond.notify_all()


_LOCKS: dict[str, _WriterLock] = {}


@contextmanager
def first() -> Iterator[None]:
    """Within the block, this thread's writing transactions go before the other writers waiting (a request
    waits on them: the span writer's group commit)."""
    before = getattr(_FIRST, "on", False)
    _FIRST.on = True
    try:
        yield
    finally:
        _FIRST.on = before


def _file_lock(database: Any) -> _WriterLock | None:
    """The process's lock of ``database``'s file (None: in memory)."""
    name = os.fsdecode(database) if isinstance(database, (str, bytes, os.PathLike)) else ""
    if not name or name == ":memory:" or name.startswith("file:"):
        return None
    path = os.path.realpath(name)
    with _GUARD:
        return _LOCKS.setdefault(path, _WriterLock())


class WriterConnection(sqlite3.Connection):
    """A ``sqlite3`` connection that takes its file's process lock for its writing transactions (the module's
    contract); pass as ``sqlite3.connect(..., factory=WriterConnection)``."""

    def __init__(self, database: Any, timeout: float = 5.0, *args: Any, **kwargs: Any) -> None:
        super().__init__(database, timeout, *args, **kwargs)
        self._lock = _file_lock(database)
        self._wait_s = timeout
        self._holding = False

    def cursor(self, factory: Any = None) -> Any:
        """A :class:`WriterCursor`."""
        return super().cursor(factory or WriterCursor)

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        """``sqlite3``'s shortcut (it does not go through :meth:`cursor`): a :class:`WriterCursor`'s."""
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, seq_of_parameters: Any, /) -> Any:
        """As :meth:`execute`."""
        return self.cursor().executemany(sql, seq_of_parameters)

    def commit(self) -> None:
        try:
            super().commit()
        finally:
            self.after()  # a commit that failed (a deferred constraint) leaves the transaction, and the lock, held

    def rollback(self) -> None:
        try:
            super().rollback()
        finally:
            self.after()

    def executescript(self, sql_script: str, /) -> Any:
        """``sqlite3``'s own (a script commits first): the lock given back when no transaction is left open."""
        try:
            return super().executescript(sql_script)
        finally:
            self.after()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._release()

    def before(self, sql: str) -> None:
        """Take the lock before a transaction's first write (also in a transaction a ``SAVEPOINT`` or ``BEGIN``
        opened: its reads took no lock)."""
        if self._lock is not None and not self._holding and _DML.match(sql):  # (a SAVEPOINT may have begun it)
            self._holding = self._lock.acquire(self._wait_s, first=getattr(_FIRST, "on", False))

    def after(self) -> None:
        """Give it back when no transaction is left open (a commit, a rollback, autocommit, a failed statement
        rolled back, a script's commit)."""
        if self._holding and not self.in_transaction:
            self._release()

    def _release(self) -> None:
        if self._holding:
            self._holding = False
            assert self._lock is not None
            self._lock.release()


class WriterCursor(sqlite3.Cursor):
    """A cursor of a :class:`WriterConnection`: its statements take and give back the connection's lock."""

    def execute(self, sql: str, parameters: Any = (), /) -> WriterCursor:
        return self._ordered(super().execute, sql, parameters)

    def executemany(self, sql: str, seq_of_parameters: Any, /) -> WriterCursor:
        return self._ordered(super().executemany, sql, seq_of_parameters)

    def _ordered(self, run: Callable[[str, Any], object], sql: str, argument: Any) -> WriterCursor:
        conn = cast(WriterConnection, self.connection)
        conn.before(sql)
        try:
            run(sql, argument)
        finally:
            conn.after()
        return self
