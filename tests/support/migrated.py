"""A database migrated once for a test module, handed to each of its tests as fresh as a new one.

Migrating a database costs a few tenths of a second of CPU (seconds on this loaded machine); a store
test that takes a new database for each of its tests pays it every time, for the migrations' sake
only. :class:`MigratedDatabase` migrates one (SQLite file or PostgreSQL schema) once and
:meth:`MigratedDatabase.fresh` brings it back to the state the migrations left before each test:
every table emptied (identities restarted), then the rows the migrations seeded (the default
workspace) put back as they were. A test of the migrations themselves keeps a database of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import MetaData, Table, inspect, select, text
from sqlalchemy.engine import Engine

from evaluator_host.store.db import make_engine
from tests.support.backends import DATABASES

_KEPT = "alembic_version"  # the schema's version: never touched


class MigratedDatabase:
    """``url``'s database, migrated now; :meth:`fresh` empties it back to that state."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: Engine = make_engine(url)
        with self.engine.connect() as conn:
            names = [n for n in inspect(conn).get_table_names() if n != _KEPT]
            meta = MetaData()
            self.tables = [Table(name, meta, autoload_with=conn) for name in names]
            self.seeded: list[tuple[Table, list[dict[str, Any]]]] = []
            for table in self.tables:
                rows = [dict(r) for r in conn.execute(select(table)).mappings()]
                if rows:
                    self.seeded.append((table, rows))

    def fresh(self) -> str:
        """Empty every table and put the migrations' own rows back; the URL (for a test's own engine)."""
        if self.engine.dialect.name == "postgresql":
            with self.engine.begin() as conn:
                listed = ", ".join(f'"{t.name}"' for t in self.tables)
                conn.execute(text(f"TRUNCATE {listed} RESTART IDENTITY"))
                self._seed(conn)
        else:
            with self.engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA foreign_keys=OFF")  # outside a transaction: the order does not matter
                conn.commit()
                try:
                    for table in self.tables:
                        conn.execute(table.delete())
                    if conn.exec_driver_sql("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'").first():
                        conn.exec_driver_sql("DELETE FROM sqlite_sequence")
                    self._seed(conn)
                    conn.commit()
                finally:
                    conn.rollback()
                    conn.exec_driver_sql("PRAGMA foreign_keys=ON")
                    conn.commit()
        return self.url

    def _seed(self, conn: Any) -> None:
        for table, rows in self.seeded:
            conn.execute(table.insert(), rows)

    def close(self) -> None:
        self.engine.dispose()


@contextmanager
def migrated_database(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MigratedDatabase]:
    """The database of ``request.param`` (``sqlite``: a file of its own; ``postgres``: a schema of the session's
    server), migrated once: what a module-scoped fixture parametrized by ``DATABASES`` yields."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('migrated') / 'test.db'}"
    else:
        url = request.getfixturevalue("postgres").database()
    database = MigratedDatabase(url)
    try:
        yield database
    finally:
        database.close()


def module_fixtures() -> tuple[Callable[..., Iterator[MigratedDatabase]], Callable[..., str]]:
    """The two fixtures a store test module assigns to its globals (``migrated, database_url =
    module_fixtures()``): ``migrated``, one database per backend of ``DATABASES`` for the module, migrated once;
    ``database_url``, the module's database emptied for the test, in place of the suite's new one a test."""

    @pytest.fixture(scope="module", params=DATABASES)
    def migrated(
        request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[MigratedDatabase]:
        with migrated_database(request, tmp_path_factory) as database:
            yield database

    @pytest.fixture
    def database_url(migrated: MigratedDatabase) -> str:
        return migrated.fresh()

    return migrated, database_url
