"""SQLite's writers queue on a process lock a file (``store/sqlite_writer.py``, issue 55 §2): held from a
transaction's first write to its commit or rollback, never by reads; an autocommit write gives it back at once;
many threads writing at once all commit, none lost; a writer marked first (the span writer) goes before the others
waiting, but not twice in a row while they wait; and it stands in front of SQLite's own lock, not instead of it — a
writer that cannot have it within its busy timeout goes on, and SQLite answers as before."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
from sqlalchemy import text

from evaluator_host.store import sqlite_writer
from evaluator_host.store.db import make_engine
from evaluator_host.store.sqlite_writer import WriterConnection


def _lock(path: Path) -> sqlite_writer._WriterLock:
    lock = sqlite_writer._file_lock(str(path))
    assert lock is not None
    return lock


def test_the_lock_is_held_from_a_transactions_first_write_to_its_end_and_never_by_reads(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    engine = make_engine(f"sqlite:///{db}")
    lock = _lock(db)
    with engine.connect() as conn:
        conn.execute(text("SELECT count(*) FROM workspaces")).all()
        assert not lock.locked()  # a read: not ordered
        conn.execute(text("UPDATE workspaces SET name = name WHERE 0"))
        assert lock.locked()  # the first write took it, as SQLite's BEGIN took its own
        conn.execute(text("SELECT count(*) FROM workspaces")).all()
        assert lock.locked()
        conn.commit()
        assert not lock.locked()
        conn.execute(text("UPDATE workspaces SET name = name WHERE 0"))
        assert lock.locked()
        conn.rollback()
        assert not lock.locked()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("UPDATE workspaces SET name = name WHERE 0"))
        assert not lock.locked()  # no transaction left open: given back at the statement's end
    engine.dispose()


def test_every_engine_of_the_process_on_one_file_shares_its_lock_and_memory_has_none(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    assert sqlite_writer._file_lock(str(db)) is sqlite_writer._file_lock(str(tmp_path / "." / "w.db"))
    assert sqlite_writer._file_lock(":memory:") is None
    raw = sqlite3.connect(":memory:", factory=WriterConnection)
    raw.execute("CREATE TABLE t (a)")
    raw.execute("INSERT INTO t VALUES (1)")
    raw.commit()
    raw.close()


def test_many_threads_writing_at_once_all_commit_and_none_is_lost(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    engine = make_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE counter (n INTEGER)"))
        conn.execute(text("CREATE TABLE workspaces_log (n INTEGER)"))
        conn.execute(text("INSERT INTO counter VALUES (0)"))
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(50):
                with engine.begin() as conn:
                    conn.execute(text("SELECT n FROM counter")).scalar_one()  # a read first: not ordered
                    conn.execute(text("UPDATE counter SET n = n + 1"))
                    conn.execute(text("INSERT INTO workspaces_log VALUES (1)"))  # a second write, same turn
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:1]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT n FROM counter")).scalar_one() == 300  # no write lost, none refused
        assert conn.execute(text("SELECT count(*) FROM workspaces_log")).scalar_one() == 300
    assert not _lock(db).locked()
    engine.dispose()


def test_a_writer_that_cannot_have_it_within_its_timeout_goes_on_and_sqlite_answers_as_before(tmp_path: Path) -> None:
    """The same thread holding a write transaction on one connection and writing on another: SQLite refused
    that before the lock (``database is locked`` after the busy timeout) and still does — after the same wait
    on the lock first — rather than hanging."""
    db = tmp_path / "w.db"
    make_engine(f"sqlite:///{db}").dispose()  # migrated
    outer = sqlite3.connect(db, timeout=0.2, factory=WriterConnection, check_same_thread=False)
    inner = sqlite3.connect(db, timeout=0.2, factory=WriterConnection, check_same_thread=False)
    outer.execute("UPDATE workspaces SET name = name WHERE 0")
    assert outer.in_transaction and _lock(db).locked()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        inner.execute("UPDATE workspaces SET name = name WHERE 0")
    inner.rollback()
    outer.commit()
    assert not _lock(db).locked()
    inner.execute("UPDATE workspaces SET name = name WHERE 0")  # free again: taken at once
    inner.commit()
    outer.close()
    inner.close()


def test_a_writer_marked_first_goes_before_the_others_waiting_but_not_twice_in_a_row() -> None:
    lock = sqlite_writer._WriterLock()
    order: list[str] = []
    assert lock.acquire(1.0)  # the holder

    def wait(name: str, first: bool) -> threading.Thread:
        def run() -> None:
            assert lock.acquire(30.0, first=first)
            order.append(name)
            lock.release()

        thread = threading.Thread(target=run)
        before = sum(lock._waiting)
        thread.start()
        for _ in range(30_000):  # until it waits (30 s at most)
            if sum(lock._waiting) > before:
                break
            threading.Event().wait(0.001)
        assert sum(lock._waiting) > before
        return thread

    other = wait("other", False)
    ingest = wait("first", True)
    lock.release()  # both wait: the first goes first
    for t in (other, ingest):
        t.join(30)
    assert order == ["first", "other"]

    order.clear()
    assert lock.acquire(1.0, first=True)  # a first writer holds it ...
    other = wait("other", False)
    ingest = wait("first again", True)
    lock.release()  # ... and another first writer waits beside one that is not: the other goes
    for t in (other, ingest):
        t.join(30)
    assert order == ["other", "first again"]
    assert not lock.locked()


def test_a_write_after_a_savepoint_a_comment_or_a_failed_commit_keeps_the_lock_rule(tmp_path: Path) -> None:
    """A write inside a transaction a ``SAVEPOINT`` opened (its reads took no lock) takes the lock; a write
    after a leading comment does; a commit that fails (a deferred foreign key) leaves the transaction open
    and the lock held until its rollback; a script's commit gives it back."""
    db = tmp_path / "w.db"
    lock = _lock(db)
    raw = sqlite3.connect(db, timeout=1, factory=WriterConnection, check_same_thread=False)
    raw.execute("CREATE TABLE p (id INTEGER PRIMARY KEY)")
    raw.execute("CREATE TABLE c (p INTEGER REFERENCES p(id) DEFERRABLE INITIALLY DEFERRED)")
    raw.execute("PRAGMA foreign_keys=ON")
    raw.execute("SAVEPOINT s")
    raw.execute("SELECT count(*) FROM p").fetchall()
    assert raw.in_transaction and not lock.locked()
    raw.execute("INSERT INTO p VALUES (1)")
    assert lock.locked()
    raw.execute("RELEASE s")
    raw.commit()
    assert not lock.locked()
    raw.execute("/* a comment */ -- and another\n INSERT INTO p VALUES (2)")
    assert lock.locked()
    raw.commit()
    raw.execute("INSERT INTO c VALUES (99)")  # no parent: refused at the commit
    with pytest.raises(sqlite3.IntegrityError):
        raw.commit()
    assert raw.in_transaction and lock.locked()
    raw.rollback()
    assert not lock.locked()
    raw.execute("INSERT INTO p VALUES (3)")
    raw.executescript("INSERT INTO p VALUES (4);")
    assert not raw.in_transaction and not lock.locked()
    raw.close()
