"""Migration 0027_case_hashes_generation (issue 50), on SQLite and PostgreSQL: the backfills' case-hash table gets
each key's trace generation (``first_seen_at``), nullable, on the rows it has: a key stored before has none (NULL)
and so answers no trace — not even one sent again under its id; a key written after it keeps its trace's; a
service of the release before (its insert names no generation) still writes; the add and the drop are skipped when
already done (a service killed between SQLite's DDL and the version's stamp starts again); down and up again."""

from __future__ import annotations

from datetime import UTC, datetime

from alembic import command
from sqlalchemy import Connection, DateTime, bindparam, create_engine, inspect, text

from evaluator_host.store import schema
from evaluator_host.store.db import as_utc, make_engine
from evaluator_host.store.online.case_hashes import remember

_TRACE = (
    "INSERT INTO online_traces (workspace_id, trace_id, span_count, first_seen_at, last_span_at, state) "
    "VALUES ('default', :id, 2, :at, :at, 'routed')"
)
_HASH = (
    "INSERT INTO online_case_hashes (workspace_id, scope, target_id, span_count, case_key, status) "
    "VALUES ('default', :scope, :id, 2, :key, 'ok')"
)
STORED, SENT_AGAIN, SWEPT = "a" * 32, "b" * 32, "c" * 32
SEEN = datetime(2026, 11, 25, 12, 0, 0, 123456, tzinfo=UTC)


def _hashed(conn: Connection) -> list[str]:
    return [str(r[0]) for r in conn.execute(text("SELECT target_id FROM online_case_hashes ORDER BY target_id"))]


def _columns(conn: Connection) -> dict[str, bool]:
    return {c["name"]: bool(c["nullable"]) for c in inspect(conn).get_columns("online_case_hashes")}


def _indexes(conn: Connection) -> set[str]:
    return {str(i["name"]) for i in inspect(conn).get_indexes("online_case_hashes")}


def test_0027_gives_the_case_keys_a_generation_that_old_keys_lack_and_an_older_release_still_writes(
    database_url: str,
) -> None:
    engine = create_engine(database_url)
    with engine.begin() as conn:
        command.upgrade(schema._config(conn), "0026_case_hashes_sweep")
        for trace_id in (STORED, SENT_AGAIN):  # SENT_AGAIN: a new trace under the id of a swept one whose key stayed
            conn.execute(
                text(_TRACE).bindparams(bindparam("at", type_=DateTime(timezone=True))), {"id": trace_id, "at": SEEN}
            )
        for trace_id in (STORED, SENT_AGAIN, SWEPT):
            conn.execute(text(_HASH), {"scope": b"1" * 32, "id": trace_id, "key": b"k" * 32})
    engine.dispose()
    engine = make_engine(database_url)  # migrates to the newest
    try:
        with engine.begin() as conn:
            assert _hashed(conn) == [STORED, SENT_AGAIN, SWEPT]  # kept, each without a generation
            assert _columns(conn)["first_seen_at"] is True
            assert "ix_online_case_hashes_target" in _indexes(conn)
            answering = text(
                "SELECT h.target_id FROM online_case_hashes h JOIN online_traces t ON t.workspace_id = h.workspace_id"
                " AND t.trace_id = h.target_id AND t.span_count = h.span_count AND t.first_seen_at = h.first_seen_at"
            )  # the match resolve_cached makes: no key without a generation answers a trace
            assert conn.execute(answering).all() == []
            conn.execute(text(_HASH), {"scope": b"2" * 32, "id": STORED, "key": b"k" * 32})  # an older release's
            row = {"workspace_id": "default", "scope": b"1" * 32, "target_id": STORED, "span_id": None,
                   "span_count": 2, "first_seen_at": SEEN, "case_key": b"k" * 32, "status": "ok", "score": 1.0,
                   "passed": True, "label": None, "runtime_id": "python", "duration_ms": 0.1}  # fmt: skip
            remember(conn, [row])
            seen = conn.execute(
                text("SELECT first_seen_at FROM online_case_hashes WHERE scope = :s AND target_id = :t"),
                {"s": b"1" * 32, "t": STORED},
            ).scalar_one()
            assert as_utc(seen if isinstance(seen, datetime) else datetime.fromisoformat(seen)) == SEEN
            assert [str(r[0]) for r in conn.execute(answering)] == [STORED]  # its own generation: it answers
            command.stamp(schema._config(conn), "0026_case_hashes_sweep")  # killed after the DDL, before the stamp
            command.upgrade(schema._config(conn), "head")
            assert _columns(conn)["first_seen_at"] is True
            command.downgrade(schema._config(conn), "0026_case_hashes_sweep")
            assert "first_seen_at" not in _columns(conn) and STORED in _hashed(conn)
            assert "ix_online_case_hashes_target" in _indexes(conn)
            command.upgrade(schema._config(conn), "head")
            assert _columns(conn)["first_seen_at"] is True
    finally:
        engine.dispose()
