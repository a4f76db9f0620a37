"""Many rows written by one PostgreSQL statement over arrays, without SQLAlchemy's work a row (issue 50: a
backfill page's ~1,000 scores and case keys a transaction).

SQLAlchemy's ``insert()`` run with a list of dicts builds each row's parameters through its bind processors and,
with ``RETURNING``, a multi-row ``VALUES`` text a batch, compiled again for each batch's size; without
``RETURNING`` psycopg's ``executemany``, which this service's sessions run one statement at a time
(store/pg_sessions.py). Measured on a backfill of 20,000 stored traces (docs/benchmarks.md, issue 50): the case
keys' upsert a statement a row, then a multi-row ``VALUES``, was 36 % of the service's busy samples. Contract:

* :func:`insert_sql` — ``INSERT INTO table (columns) SELECT * FROM unnest(%b::type[], …) <tail>``: one array a
  column, each cast to the column's type as the table declares it (``tail``: an ``ON CONFLICT`` clause,
  ``RETURNING``), sent in binary: psycopg's text arrays escape each text element with a regular expression (a
  result's JSON is all quotes), measured 20 % slower on a whole fresh backfill (1,252–1,518 against
  1,578–1,864 targets/s, 20,000 traces).
* :func:`params` — the arrays: one list a column, in ``columns`` order (every row has every column), its values
  as psycopg adapts them (a column of ``None`` only is an array of NULLs of the cast's type).

Run them with ``conn.exec_driver_sql(insert_sql(...), params(...))``: one statement, one round trip, whatever
the number of rows. PostgreSQL only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql

__all__ = ["insert_sql", "params"]

_DIALECT = postgresql.dialect()  # type: ignore[no-untyped-call]


def insert_sql(table: Table, columns: Sequence[str], tail: str = "", where: str = "") -> str:
    """The statement inserting the rows of :func:`params` into ``table`` (``where``: a condition on the rows, named
    ``u`` and by their columns; ``tail`` appended)."""
    arrays = ", ".join(f"%b::{table.c[c].type.compile(dialect=_DIALECT)}[]" for c in columns)
    rows = f"SELECT * FROM unnest({arrays}) AS u({', '.join(columns)})" + (f" WHERE {where}" if where else "")
    return f"INSERT INTO {table.name} ({', '.join(columns)}) {rows} {tail}".rstrip()


def params(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> tuple[list[Any], ...]:
    """One list a column of ``rows`` (see the module docstring)."""
    return tuple([row[c] for row in rows] for c in columns)
