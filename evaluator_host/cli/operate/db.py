"""``evaluator-host db status | upgrade``: the database's schema revision, and migrating it by hand.

The service migrates its database to the newest revision when it starts, so ``upgrade`` is for
operators who want the migration to happen apart from a start (before rolling out a release to
several services, or to see it run). ``status`` exits 0 when the schema is current, 1 when a
migration is due (the next start or ``upgrade`` runs it), 2 when the database cannot be used
(unreachable, or migrated by a newer release). Neither prints a password. SQLAlchemy and the schema's
migrations are imported when a command runs, not when the parser is built (``cli/main.py``'s contract).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from evaluator_host.errors import DatabaseSchemaError, DataDirInUse

if TYPE_CHECKING:
    from evaluator_host.settings import Settings

__all__ = ["add_parser", "check_database", "shown_url"]


def shown_url(url: str) -> str:
    """``url`` with its password masked."""
    from sqlalchemy.engine import make_url

    from evaluator_host.store import schema

    return make_url(schema.normalized_url(url)).render_as_string(hide_password=True)


def _fail(message: str) -> int:
    sys.stderr.write(f"evaluator-host: {message}\n")
    return 2


def _status(settings: Settings) -> int:
    from sqlalchemy import create_engine

    from evaluator_host.store import schema

    url = settings.resolved_database_url
    engine = create_engine(schema.normalized_url(url))
    try:
        found = schema.state(engine)
    finally:
        engine.dispose()
    sys.stdout.write(f"database: {shown_url(url)}\n")
    current = found.current or ("none (made before migrations)" if found.legacy else "none (empty)")
    sys.stdout.write(f"schema revision: {current}; newest known: {found.head}\n")
    if found.up_to_date:
        sys.stdout.write("up to date\n")
        return 0
    sys.stdout.write("a migration is due: the next start runs it, or `evaluator-host db upgrade`\n")
    return 1


def check_database(settings: Settings) -> str | None:
    """Migrate the configured database now; None when it is ready, else why it cannot be used."""
    from sqlalchemy.exc import SQLAlchemyError

    from evaluator_host.store.db import make_engine

    try:
        make_engine(settings.resolved_database_url).dispose()
    except DatabaseSchemaError as exc:
        return exc.message
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        return f"cannot use the database {shown_url(settings.resolved_database_url)}: {reason}"
    return None


def _upgrade(settings: Settings) -> int:
    from sqlalchemy import create_engine

    from evaluator_host.store import schema

    lock = -1
    if settings.database_url is None:  # the data dir's SQLite file: not under a running service
        from evaluator_host.services import lock_data_dir

        settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock = lock_data_dir(settings.data_dir, "db-upgrade")
    try:
        engine = create_engine(schema.normalized_url(settings.resolved_database_url))
        try:
            before = schema.state(engine)
        finally:
            engine.dispose()
        if (problem := check_database(settings)) is not None:
            return _fail(problem)
    finally:
        if lock >= 0:
            os.close(lock)
    was = before.current or ("none (made before migrations)" if before.legacy else "none (empty)")
    if before.up_to_date:
        sys.stdout.write(f"already at revision {before.head}\n")
    else:
        sys.stdout.write(f"upgraded {shown_url(settings.resolved_database_url)} from {was} to {before.head}\n")
    return 0


def _run(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from evaluator_host.settings import Settings

    settings = Settings()
    try:
        return _status(settings) if args.action == "status" else _upgrade(settings)
    except (DatabaseSchemaError, DataDirInUse) as exc:
        return _fail(exc.message)
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        return _fail(f"cannot use the database {shown_url(settings.resolved_database_url)}: {reason}")


def add_parser(sub: Any) -> None:
    """Add ``db`` to the command line's subcommands."""
    db = sub.add_parser(
        "db", help="the database's schema: status, or upgrade it now (the service also does at start-up)"
    )
    db.add_argument("action", choices=["status", "upgrade"])
    db.set_defaults(func=_run)
