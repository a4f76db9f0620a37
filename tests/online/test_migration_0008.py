"""Migration 0008: ``online_spans`` on SQLite becomes a rowid table, its rows and key kept; down and up again."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine

from evaluator_host.store import schema
from evaluator_host.store.db import make_engine

_ROW = (
    "INSERT INTO online_spans (workspace_id, trace_id, span_id, parent_span_id, name, service_name, start_ns, "
    "end_ns, body, received_at) VALUES ('ws', :t, 'bbbbbbbbbbbbbbbb', NULL, 'chat', 'svc', 1, 2, '{}', "
    "'2026-11-23 12:00:00.000000')"
)


def _table_sql(engine: Engine) -> str:
    with engine.connect() as conn:
        return str(conn.execute(text("SELECT sql FROM sqlite_master WHERE name = 'online_spans'")).scalar_one())


def test_0008_keeps_the_rows_and_the_key(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    engine = create_engine(url)
    with engine.begin() as conn:
        command.upgrade(schema._config(conn), "0007")
        conn.execute(text(_ROW), {"t": "a" * 32})
    assert "WITHOUT ROWID" in _table_sql(engine)
    engine.dispose()
    engine = make_engine(url)  # migrates to the newest
    try:
        assert "WITHOUT ROWID" not in _table_sql(engine)
        with engine.begin() as conn:
            assert conn.execute(text("SELECT trace_id, name FROM online_spans")).all() == [("a" * 32, "chat")]
            conn.execute(text(_ROW.replace("INSERT", "INSERT OR IGNORE")), {"t": "a" * 32})  # the key still holds
            assert conn.execute(text("SELECT count(*) FROM online_spans")).scalar_one() == 1
            indexes = conn.execute(text("SELECT name FROM sqlite_master WHERE tbl_name = 'online_spans'")).all()
            assert ("ix_online_spans_received_at",) in indexes
            command.downgrade(schema._config(conn), "0007")
        assert "WITHOUT ROWID" in _table_sql(engine)
    finally:
        engine.dispose()
