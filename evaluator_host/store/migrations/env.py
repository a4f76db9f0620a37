"""Alembic's entry point: runs the revisions on the connection ``store/schema.py`` hands over.

Run by hand (``alembic -c evaluator_host/store/migrations/alembic.ini …``, e.g. to autogenerate a
revision) it connects to the configured database (``EVALUATOR_HOST_DATABASE_URL``, default the
data dir's SQLite file). SQLite runs in batch mode, so ``op.alter_column`` and friends work there
(Alembic copies the table).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from evaluator_host.store.db import Base


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _main() -> None:
    given = context.config.attributes.get("connection")
    if given is not None:
        _run(given)
        return
    from evaluator_host.settings import Settings
    from evaluator_host.store.schema import normalized_url

    engine = create_engine(normalized_url(Settings().resolved_database_url))
    try:
        with engine.begin() as connection:
            _run(connection)
    finally:
        engine.dispose()


_main()
