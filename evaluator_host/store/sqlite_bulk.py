"""Many rows written by a few SQLite statements, without SQLAlchemy's work a row (issue 50: a backfill page's
~1,000 scores, case keys and cache entries a transaction).

SQLAlchemy's ``insert()`` run with a list of dicts builds each row's parameters through its bind processors and,
with ``RETURNING``, a multi-row ``VALUES`` text a batch: 5–8 µs of Python a score row on this machine (measured
alone, 1,000 rows a transaction: 24–34 µs a row so, 22–27 µs by one prepared statement — the rest is SQLite's
own, the row and its indexes). And ``sqlite3``'s ``executemany`` lets go of the GIL around each row's step and
takes it back after: beside a thread running Python (the page read and scored ahead of this one), each row then
waits for that thread's switch interval — a page of score rows beside a busy thread: 4,772 µs a row, against 14
alone and 83 by this module's statements (``bench/sqlite_writes.py``); in the service a page's three writes took
2.2× their CPU. Contract:

* :func:`insert` — the rows written by multi-row ``INSERT … VALUES`` statements of at most :data:`MAX_ROWS`
  rows (and the connection's parameter limit): one step, one hand-over of the GIL, a statement. Each
  statement's row count is a power of two (the rest split so), so a table's texts are few and each is
  compiled once a connection (``sqlite3``'s statement cache). ``tail`` (an ``ON CONFLICT`` clause) ends each
  statement; ``where`` keeps only the rows it holds for — the rows are then named ``v`` with the table's
  column names (``INSERT … WITH v(columns) AS (VALUES …) SELECT * FROM v WHERE …``: INSERT first, as
  ``sqlite3`` begins a transaction only before a statement that starts with INSERT, UPDATE, DELETE or
  REPLACE). Returns the rows written (``sqlite3``'s row count: with ``DO UPDATE``, the updated ones too), in
  the rows' order.
* :func:`update` — rows of a table set from the rows given, matched on key columns, by multi-row statements in
  the same slices (``UPDATE … FROM (SELECT column1 AS key, … FROM (VALUES …)) AS v WHERE table.key = v.key``);
  returns the rows set.
* :func:`insert_sql` — ``INSERT INTO table (columns) VALUES (?, …) <tail>``: one row's statement.
* :func:`power_slices` — rows in slices of powers of two (no SQL: also ``store/online/superseding.py``'s, on both
  databases).
* :func:`params` — each row's values in ``columns`` order (every row has every column), its datetimes as
  SQLAlchemy writes them on SQLite (``YYYY-MM-DD HH:MM:SS.ffffff``, each distinct time converted once): what is
  stored, read back and compared in SQL is the same text either way; bools, bytes, numbers and text as
  ``sqlite3`` binds them (what SQLAlchemy's SQLite types hand it).

SQLite only (but :func:`power_slices`).
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import DateTime
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Connection

__all__ = ["MAX_ROWS", "insert", "insert_sql", "params", "power_slices", "sqlite_time", "update"]

MAX_ROWS = 1024  # rows a statement at most (a power of two)

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


def insert(
    conn: Connection, table: str, columns: Sequence[str], rows: Sequence[tuple[Any, ...]], tail: str = "",
    where: str = "",
) -> int:  # fmt: skip
    """Write ``rows`` (:func:`params`' tuples) into ``table``; how many were written (see the module docstring)."""
    written = 0
    for part in _parts(conn, rows, len(columns)):
        statement = _values_sql(table, tuple(columns), len(part), tail, where)
        written += conn.exec_driver_sql(statement, tuple(itertools.chain.from_iterable(part))).rowcount
    return written


def update(
    conn: Connection, table: str, keys: Sequence[str], columns: Sequence[str], rows: Sequence[tuple[Any, ...]],
    also: str = "", where: str = "", where_params: tuple[Any, ...] = (),
) -> int:  # fmt: skip
    """Set ``columns`` of the rows of ``table`` whose ``keys`` match, each from its row of ``rows`` (:func:`params`'
    tuples of ``keys`` then ``columns``), by multi-row statements as :func:`insert`; ``also``: more of the SET
    clause (SQL of the table's columns), ``where``: more conditions (``where_params`` bound after the rows). How
    many rows were set (a key matching no row, or ``where`` not holding, is not counted)."""
    updated = 0
    for part in _parts(conn, rows, len(keys) + len(columns), len(where_params)):
        statement = _update_sql(table, tuple(keys), tuple(columns), len(part), also, where)
        updated += conn.exec_driver_sql(statement, (*itertools.chain.from_iterable(part), *where_params)).rowcount
    return updated


def _parts(
    conn: Connection, rows: Sequence[tuple[Any, ...]], width: int, more: int = 0
) -> Iterator[Sequence[tuple[Any, ...]]]:
    """``rows`` in slices of powers of two, each at most :data:`MAX_ROWS` and, with ``more`` parameters beside
    them, the connection's parameter limit."""
    if not rows:
        return
    limit = conn.connection.driver_connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)  # type: ignore[union-attr]
    yield from power_slices(rows, min(MAX_ROWS, 1 << max(((limit - more) // max(width, 1)).bit_length() - 1, 0)))


def power_slices(rows: Sequence[Any], most: int) -> Iterator[Sequence[Any]]:
    """``rows`` in consecutive slices whose sizes are powers of two, each at most ``most`` (a power of two): the
    largest that fits first, so that a database sees few distinct statement texts. Pure: any database's."""
    start = 0
    while start < len(rows):
        n = min(most, 1 << ((len(rows) - start).bit_length() - 1))  # the largest power of two left
        yield rows[start : start + n]
        start += n


@lru_cache(maxsize=256)
def _update_sql(table: str, keys: tuple[str, ...], columns: tuple[str, ...], n: int, also: str, where: str) -> str:
    width = len(keys) + len(columns)
    row = "(" + ", ".join("?" * width) + ")"
    named = ", ".join(f"column{i + 1} AS {name}" for i, name in enumerate((*keys, *columns)))
    sets = ", ".join([*(f"{c} = v.{c}" for c in columns), *([also] if also else [])])
    on = " AND ".join([*(f"{table}.{k} = v.{k}" for k in keys), *([where] if where else [])])
    return f"UPDATE {table} SET {sets} FROM (SELECT {named} FROM (VALUES {', '.join([row] * n)})) AS v WHERE {on}"


@lru_cache(maxsize=256)
def _values_sql(table: str, columns: tuple[str, ...], n: int, tail: str, where: str) -> str:
    row = "(" + ", ".join("?" * len(columns)) + ")"
    values = "VALUES " + ", ".join([row] * n)
    names = ", ".join(columns)
    if not where:
        return f"INSERT INTO {table} ({names}) {values} {tail}".rstrip()
    # INSERT first: ``sqlite3`` begins its transaction before a statement that starts with INSERT, not WITH
    return f"INSERT INTO {table} ({names}) WITH v({names}) AS ({values}) SELECT * FROM v WHERE {where} {tail}".rstrip()
