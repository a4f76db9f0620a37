"""A full data disk, recognised wherever it shows: ``OSError(ENOSPC)``, SQLite's ``SQLITE_FULL``,
PostgreSQL's ``disk_full`` (SQLSTATE 53100), or an installer's "No space left on device".

:func:`is_disk_full` reads an exception (and what caused it); :func:`on_full_disk` turns one into
:class:`~evaluator_host.errors.StorageFull` (HTTP 507) at the boundary where data is written;
:func:`translate_database_errors` does the same for every statement of a database engine.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

from evaluator_host.errors import StorageFull

__all__ = ["INSTALLER_MARKS", "is_disk_full", "on_full_disk", "storage_full", "translate_database_errors"]

_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_SQLITE_FULL = 13
_PG_DISK_FULL = "53100"
INSTALLER_MARKS = ("No space left on device", "ENOSPC", "[Errno 28]")  # pip's and npm's wording


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an exception it wraps or was raised from, says the disk is full."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _ERRNOS:
            return True
        if getattr(exc, "sqlite_errorcode", None) == _SQLITE_FULL or "database or disk is full" in str(exc):
            return True
        if getattr(exc, "sqlstate", None) == _PG_DISK_FULL or getattr(exc, "pgcode", None) == _PG_DISK_FULL:
            return True
        orig = getattr(exc, "orig", None)  # SQLAlchemy's DBAPIError wraps the driver's exception
        exc = orig if isinstance(orig, BaseException) else (exc.__cause__ or exc.__context__)
    return False


def storage_full(what: str) -> StorageFull:
    """The error for a full disk met while doing ``what``."""
    return StorageFull(f"the disk is full ({what}); nothing was kept: free space, then retry")


@contextmanager
def on_full_disk(what: str) -> Iterator[None]:
    """Raise :class:`StorageFull` (naming ``what``) for a full disk inside the block; other errors pass."""
    try:
        yield
    except StorageFull:
        raise
    except Exception as exc:
        if is_disk_full(exc):
            raise storage_full(what) from exc
        raise


def translate_database_errors(engine: Engine) -> None:
    """Every statement of ``engine`` that fails for a full disk raises :class:`StorageFull` instead."""

    @event.listens_for(engine, "handle_error")
    def _disk_full(context: Any) -> None:
        if is_disk_full(context.original_exception):
            raise storage_full("writing to the database") from context.original_exception
