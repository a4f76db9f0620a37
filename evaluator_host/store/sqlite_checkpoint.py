"""SQLite WAL checkpoints run after a hot writer's lock is released instead of inside its commits.

SQLite's WAL mode copies the log back into the database file (a *checkpoint*, with an ``fsync``) in the
commit that takes the log past ``wal_autocheckpoint`` pages (1000: 4 MB): a writer of ~0.6 MB a
transaction (one OTLP request of 512 spans) paid one every few commits — ~35 µs of every span's ~45 µs
in the store on this machine's disk, all of it inside the span writer's lock, so every other request's
write waited on it. Contract:

* :func:`no_autocheckpoint` turns the automatic checkpoint off on one connection for one block (the
  span writer's transaction) and back on (to SQLite's default) after it, whatever happens in it.
* :meth:`Checkpointer.wrote` is told the bytes each write added, on the writing thread, after the
  writer's lock is released: once :attr:`Checkpointer.every_bytes` (4 MB, SQLite's own period) have
  been written since the last checkpoint, that thread runs ``PRAGMA wal_checkpoint(PASSIVE)`` — unless
  another thread is running one already (then it goes on: checkpoints never queue up). PASSIVE never
  blocks a writer or a reader and never waits on one: the next writes go on meanwhile; what it could
  not copy, the next checkpoint does. No thread of its own, so nothing outlives the store's engine.
  Nothing depends on a checkpoint for correctness: a commit is durable in the WAL either way
  (``synchronous=NORMAL``, docs/operations.md), and every other connection keeps SQLite's automatic
  checkpoint.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

from sqlalchemy.engine import Connection, Engine

__all__ = ["DEFAULT_PAGES", "Checkpointer", "no_autocheckpoint"]

log = logging.getLogger(__name__)

DEFAULT_PAGES = 1000  # SQLite's own wal_autocheckpoint
EVERY_BYTES = 4 * 1024 * 1024  # SQLite's period: 1000 pages of 4 KiB


@contextlib.contextmanager
def no_autocheckpoint(conn: Connection) -> Iterator[None]:
    """No automatic checkpoint in ``conn``'s commits within the block (a PRAGMA outside any transaction:
    it never begins one)."""
    raw: Any = conn.connection.driver_connection
    raw.execute("PRAGMA wal_autocheckpoint=0")
    try:
        yield
    finally:
        raw.execute(f"PRAGMA wal_autocheckpoint={DEFAULT_PAGES}")


class Checkpointer:
    """PASSIVE checkpoints of ``engine``'s SQLite database, every ``every_bytes`` written (see the module
    docstring)."""

    def __init__(self, engine: Engine, every_bytes: int = EVERY_BYTES) -> None:
        self.engine = engine
        self.every_bytes = every_bytes
        self.done = 0  # checkpoints run (tests read it)
        self._written = 0  # bytes written since the last checkpoint began
        self._count = threading.Lock()
        self._running = threading.Lock()

    def wrote(self, size: int) -> None:
        """Count ``size`` bytes written; run a checkpoint here when one is due and none is running."""
        with self._count:
            self._written += size
            if self._written < self.every_bytes:
                return
        if not self._running.acquire(blocking=False):
            return  # another thread checkpoints now: this write's pages are in its next one
        try:
            with self._count:
                self._written = 0
            with self.engine.connect() as conn:
                raw: Any = conn.connection.driver_connection
                raw.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            self.done += 1
        except Exception:  # a disk hiccup: the next due write tries again, the other connections' still run
            log.warning("WAL checkpoint after the span writes failed", exc_info=True)
        finally:
            self._running.release()
