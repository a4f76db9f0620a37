"""The insert of a group commit's spans into ``online_spans``, on each database in its cheapest form.

Contract of :func:`insert_spans`: ``rows`` (dicts of the ``online_spans`` columns, plus ``at``: the receipt
time as SQLAlchemy writes it on SQLite), no two with the same key, are inserted on ``conn``'s transaction;
a row whose (workspace, trace, span) is already stored is left as it is (``ON CONFLICT DO NOTHING``); the
keys of the rows newly stored are returned. Both forms run on the driver's own cursor (SQLAlchemy's result
fetched the ``RETURNING`` rows one by one: ~4 µs a span):

* SQLite: multi-row ``INSERT … VALUES`` of up to :data:`_SQLITE_ROWS` rows a statement.
* PostgreSQL: ``COPY … FROM STDIN (FORMAT BINARY)`` into a temporary staging table (psycopg formats each row
  in C; binary arrays through ``unnest`` were dumped element by element in Python, ~10 µs a span), then
  one ``INSERT … SELECT … ON CONFLICT DO NOTHING RETURNING``. The staging table is the connection's own
  (``CREATE TEMPORARY TABLE IF NOT EXISTS … ON COMMIT DELETE ROWS`` in each write: made by a connection's
  first, other sessions never see it, and every commit or rollback empties it).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection

__all__ = ["SPAN_COLUMNS", "insert_spans"]

SPAN_COLUMNS = (
    "workspace_id",
    "trace_id",
    "span_id",
    "parent_span_id",
    "name",
    "service_name",
    "start_ns",
    "end_ns",
    "body",
    "received_at",
)
# a row's parameters on SQLite, in SPAN_COLUMNS' order ("at": received_at as SQLAlchemy writes it there)
_SQLITE_KEYS = (*SPAN_COLUMNS[:-1], "at")
_SQLITE_ROWS = 3000  # spans per INSERT on SQLite: 30,000 parameters, under its 32,766
_STAGE = "online_spans_in"
_PG_STAGE = (  # its "already exists" notice silenced for the rest of the writing transaction
    "SET LOCAL client_min_messages = warning; "
    f"CREATE TEMPORARY TABLE IF NOT EXISTS {_STAGE} (workspace_id text, trace_id text, span_id text, "
    "parent_span_id text, name text, service_name text, start_ns bigint, end_ns bigint, body text, "
    "received_at timestamptz) ON COMMIT DELETE ROWS"
)
_PG_TYPES = ["text", "text", "text", "text", "text", "text", "int8", "int8", "text", "timestamptz"]
_PG_COPY = f"COPY {_STAGE} ({', '.join(SPAN_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
_PG_INSERT = (
    f"INSERT INTO online_spans ({', '.join(SPAN_COLUMNS)}) SELECT {', '.join(SPAN_COLUMNS)} FROM {_STAGE} "
    "ON CONFLICT (workspace_id, trace_id, span_id) DO NOTHING RETURNING workspace_id, trace_id, span_id"
)


def insert_spans(conn: Connection, rows: list[dict[str, Any]], *, sqlite: bool) -> set[tuple[str, str, str]]:
    """Insert ``rows``; the keys newly stored (see the module docstring)."""
    if not rows:
        return set()
    return _insert_sqlite(conn, rows) if sqlite else _insert_pg(conn, rows)


def _insert_sqlite(conn: Connection, rows: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    stored: set[tuple[str, str, str]] = set()
    cursor = conn.connection.cursor()
    try:
        for start in range(0, len(rows), _SQLITE_ROWS):
            part = rows[start : start + _SQLITE_ROWS]
            cursor.execute(_sqlite_insert(len(part)), [r[c] for r in part for c in _SQLITE_KEYS])
            stored.update((w, t, s) for w, t, s in cursor.fetchall())
    finally:
        cursor.close()
    return stored


def _sqlite_insert(n: int) -> str:
    row = "(" + ", ".join("?" * len(SPAN_COLUMNS)) + ")"
    return (
        f"INSERT INTO online_spans ({', '.join(SPAN_COLUMNS)}) VALUES {', '.join([row] * n)} "
        "ON CONFLICT DO NOTHING RETURNING workspace_id, trace_id, span_id"
    )


def _insert_pg(conn: Connection, rows: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    raw: Any = conn.connection.driver_connection
    with raw.cursor() as cursor:
        cursor.execute(_PG_STAGE)  # a catalog look-up once made (a rolled-back first write leaves none behind)
        with cursor.copy(_PG_COPY) as copy:
            copy.set_types(_PG_TYPES)
            write = copy.write_row
            for r in rows:
                write(_pg_row(r))
        cursor.execute(_PG_INSERT)
        return {(w, t, s) for w, t, s in cursor.fetchall()}


def _pg_row(r: dict[str, Any]) -> tuple[str, str, str, str | None, str, str | None, int, int, str, datetime]:
    return (
        r["workspace_id"],
        r["trace_id"],
        r["span_id"],
        r["parent_span_id"],
        r["name"],
        r["service_name"],
        r["start_ns"],
        r["end_ns"],
        r["body"],
        r["received_at"],
    )
