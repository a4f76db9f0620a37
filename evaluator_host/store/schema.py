"""The database schema's version: Alembic migrations, applied when the service starts.

Contract:

* :func:`upgrade` brings any database this project ever made to the newest revision, in
  place: a fresh one is created; one made before migrations existed (no ``alembic_version``
  table, the tables ``create_all`` made) is adopted by the baseline revision, which only adds
  what such a database may lack; data is never rewritten or dropped.
* A database at a revision this code does not know (a newer release migrated it) is refused
  with :class:`DatabaseSchemaError` before anything is touched: run that release or a newer one.
* On PostgreSQL, concurrent starters serialize on an advisory lock, so one migrates and the
  others find the schema current; the migration is one transaction (DDL is transactional there).
  On a SQLite file they serialize on a lock file beside it (``<file>.migrate-lock``).
* :func:`normalized_url` lets users write ``postgresql://user@host/db``: the driver (psycopg 3)
  is ours to choose.

The revisions live in ``store/migrations/versions``; docs/database.md says how to add one.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic.config import Config
from alembic.runtime.environment import EnvironmentContext
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine, make_url

from evaluator_host.errors import DatabaseSchemaError

__all__ = ["MIGRATIONS", "SchemaState", "head", "normalized_url", "state", "upgrade"]

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).with_name("migrations")
_LOCK_KEY = 0x6576616C5F686F73  # pg_advisory_xact_lock key ("eval_hos"): one migrator at a time


def normalized_url(url: str) -> str:
    """``url`` with the driver this project ships for its dialect (``postgresql`` → ``postgresql+psycopg``)."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def _config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


@functools.cache
def _scripts() -> ScriptDirectory:
    """The revisions, read once per process: each new ``ScriptDirectory`` loads every migration file again, and
    a start asked for them four times (the state before, again under the lock, the service's engine's check)."""
    return ScriptDirectory.from_config(_config())


def head() -> str:
    """The newest revision this code knows."""
    newest = _scripts().get_current_head()
    assert newest is not None, "no migrations found"
    return newest


@dataclass(frozen=True)
class SchemaState:
    """Where a database's schema stands."""

    current: str | None  # its revision; None: empty, or made before migrations existed
    head: str  # the newest revision this code knows
    legacy: bool  # it has tables but no revision: made before migrations existed

    @property
    def up_to_date(self) -> bool:
        return self.current == self.head


def _state(conn: Connection) -> SchemaState:
    current = MigrationContext.configure(conn).get_current_revision()
    newest = head()
    if current is not None:
        try:
            _scripts().get_revision(current)
        except Exception:  # alembic's ResolutionError and friends: a revision we never wrote
            raise DatabaseSchemaError(
                f"the database's schema is at revision {current!r}, which this evaluator-host does not know "
                f"(its newest is {newest!r}): a newer release migrated it; run that release or a newer one"
            ) from None
    legacy = current is None and conn.dialect.has_table(conn, "evaluators")
    return SchemaState(current, newest, legacy)


def state(engine: Engine) -> SchemaState:
    """The database's schema revision next to this code's newest (``DatabaseSchemaError`` if unknown)."""
    with engine.connect() as conn:
        return _state(conn)


@contextlib.contextmanager
def _file_lock(engine: Engine) -> Iterator[None]:
    """On a SQLite file, an exclusive lock beside it for the migration: processes sharing the file (a
    service and its queue's worker hosts on one machine) starting at once migrate one at a time."""
    path = engine.url.database if engine.dialect.name == "sqlite" else None
    if not path or path == ":memory:" or path.startswith("file:"):
        yield
        return
    fd = os.open(f"{path}.migrate-lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _upgrade_to_head(conn: Connection) -> None:
    """``alembic upgrade head`` on ``conn`` with this process's revisions (:func:`_scripts`): what
    ``alembic.command.upgrade`` does, without reading every migration file once more into a new
    ``ScriptDirectory`` (a fresh database's start read them twice)."""
    script = _scripts()

    def steps(revision: Any, _context: Any) -> Any:
        return script._upgrade_revs("head", revision)  # as alembic.command.upgrade

    with EnvironmentContext(_config(conn), script, fn=steps, as_sql=False, starting_rev=None, destination_rev="head"):
        script.run_env()


def upgrade(engine: Engine) -> SchemaState:
    """Migrate the database to the newest revision (nothing to do: one cheap read). Returns the state before."""
    before = state(engine)
    if before.up_to_date:
        return before
    with _file_lock(engine):
        return _upgrade(engine)


def _upgrade(engine: Engine) -> SchemaState:
    before = state(engine)  # another starter may have migrated while we waited for the lock
    if before.up_to_date:
        return before
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
            before = _state(conn)  # another starter may have migrated while we waited
            if before.up_to_date:
                return before
        _upgrade_to_head(conn)
    was = before.current or ("none (made before migrations)" if before.legacy else "none (empty)")
    log.info("database schema migrated from revision %s to %s", was, before.head)
    return before
