"""Many rows written by one prepared SQLite statement, without SQLAlchemy's work a row (issue 50: a backfill
page's ~1,000 scores and case keys a transaction).

SQLAlchemy's ``insert()`` run with a list of dicts builds each row's parameters through its bind processors and,
with ``RETURNING``, a multi-row ``VALUES`` text a batch: 5–8 µs of Python a score row on this machine (measured
alone, 1,000 rows a transaction: 24–34 µs a row so, 22–27 µs by one prepared statement — the rest is SQLite's
own, the row and its indexes). Contract:

* :func:`insert_sql` — ``INSERT INTO table (columns) VALUES (?, …) <tail>`` (``tail``: an ``ON CONFLICT`` clause).
* :func:`params` — each row's values in ``columns`` order (every row has every column), its datetimes as
  SQLAlchemy writes them on SQLite (``YYYY-MM-DD HH:MM:SS.ffffff``, each distinct time converted once): what is
  stored, read back and compared in SQL is the same text either way; bools, bytes, numbers and text as
  ``sqlite3`` binds them (what SQLAlchemy's SQLite types hand it).

Run them with ``conn.exec_driver_sql(insert_sql(...), params(...))`` (``executemany``). SQLite only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import DateTime
from sqlalchemy.dialects import sqlite

__all__ = ["insert_sql", "params", "sqlite_time"]

_TIME = DateTime(timezone=True).dialect_impl(sqlite.dialect()).bind_processor(sqlite.dialect())


def sqlite_time(value: datetime) -> Any:
    """``value`` as SQLAlchemy binds a ``DateTime`` on SQLite."""
    return _TIME(value) if _TIME is not None else value


def insert_sql(table: str, columns: Sequence[str], tail: str = "") -> str:
    """The statement inserting one row of ``columns`` into ``table`` (``tail`` appended)."""
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))}) {tail}".rstrip()


def params(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """Each row's parameters for :func:`insert_sql` (see the module docstring)."""
    texts: dict[datetime, Any] = {}
    out = []
    for row in rows:
        values = []
        for column in columns:
            value = row[column]
            if isinstance(value, datetime):
                text = texts.get(value)
                if text is None:
                    text = texts[value] = sqlite_time(value)
                value = text
            values.append(value)
        out.append(tuple(values))
    return out
