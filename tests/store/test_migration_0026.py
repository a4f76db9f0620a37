"""Migration 0026_case_hashes_sweep (issue 50), on SQLite and PostgreSQL: the backfills' case-hash rows whose trace
retention deleted before it (orphans no sweep would reach) are deleted, a stored trace's row stays, and the index
the sweep deletes by is made; down (the index goes, the rows stay) and up again."""

from __future__ import annotations

from alembic import command
from sqlalchemy import Connection, create_engine, inspect, text

from evaluator_host.store import schema

_TRACE = (
    "INSERT INTO online_traces (workspace_id, trace_id, span_count, first_seen_at, last_span_at, state) "
    "VALUES ('default', :id, 2, '2026-11-25 12:00:00', '2026-11-25 12:00:00', 'routed')"
)
_HASH = (
    "INSERT INTO online_case_hashes (workspace_id, scope, target_id, span_count, case_key, status) "
    "VALUES ('default', :scope, :id, 2, :key, 'ok')"
)
KEPT, SWEPT = "a" * 32, "b" * 32


def _hashed(conn: Connection) -> list[str]:
    return [str(r[0]) for r in conn.execute(text("SELECT target_id FROM online_case_hashes ORDER BY target_id"))]


def test_0026_deletes_the_case_keys_of_traces_swept_before_it_and_keeps_the_stored_ones(database_url: str) -> None:
    engine = create_engine(database_url)
    with engine.begin() as conn:
        command.upgrade(schema._config(conn), "0025_backfill_case_hashes")
        conn.execute(text(_TRACE), {"id": KEPT})  # SWEPT's trace was deleted by retention: its row is an orphan
        for trace_id in (KEPT, SWEPT):
            for scope in (b"1" * 32, b"2" * 32):
                conn.execute(text(_HASH), {"scope": scope, "id": trace_id, "key": b"k" * 32})
    engine.dispose()
    engine = create_engine(database_url)
    try:
        with engine.begin() as conn:
            command.upgrade(schema._config(conn), "0026_case_hashes_sweep")  # (0027 makes the table again, empty)
            assert _hashed(conn) == [KEPT, KEPT]
            indexes = {i["name"] for i in inspect(conn).get_indexes("online_case_hashes")}
            assert "ix_online_case_hashes_target" in indexes
            command.downgrade(schema._config(conn), "0025_backfill_case_hashes")
            assert "ix_online_case_hashes_target" not in {
                i["name"] for i in inspect(conn).get_indexes("online_case_hashes")
            }
            assert _hashed(conn) == [KEPT, KEPT]
            command.upgrade(schema._config(conn), "0026_case_hashes_sweep")
            assert _hashed(conn) == [KEPT, KEPT]
    finally:
        engine.dispose()
