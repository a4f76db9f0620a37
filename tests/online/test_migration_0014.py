"""Migration 0014 (issue 50), on SQLite and PostgreSQL: existing scores stay current trace scores (no session,
no generation, not superseded, no backfill); the session and backfill tables come; down (session and
``@r`` rows left out) and up again."""

from __future__ import annotations

from alembic import command
from sqlalchemy import create_engine, text

from evaluator_host.store import schema
from evaluator_host.store.db import make_engine

_RULE = (
    "INSERT INTO online_rules (id, workspace_id, name, evaluator_id, revision, filter, sampling_rate, mapping, "
    "enabled, created_at, updated_at) VALUES ('r1', 'ws', NULL, 'ev', NULL, '{}', 1.0, NULL, true, "
    "'2026-11-23 12:00:00', '2026-11-23 12:00:00')"
)
_SCORE = (
    "INSERT INTO online_scores (rule_id, target_id, trace_id, workspace_id, span_id, state, attempts, enqueued_at, "
    "evaluator_id, status, score) VALUES ('r1', :g, :t, 'ws', NULL, 'done', 1, '2026-11-23 12:00:00', 'ev', 'ok', 0.5)"
)


def test_0014_keeps_existing_scores_current_and_adds_sessions_and_backfills(database_url: str) -> None:
    engine = create_engine(database_url)
    with engine.begin() as conn:
        command.upgrade(schema._config(conn), "0013")
        conn.execute(text(_RULE))
        conn.execute(text(_SCORE), {"g": "a" * 32, "t": "a" * 32})
    engine.dispose()
    engine = make_engine(database_url)  # migrates to the newest
    try:
        with engine.begin() as conn:
            row = conn.execute(
                text("SELECT target_id, session_id, generation, superseded_by, backfill_id FROM online_scores")
            ).one()
            assert tuple(row) == ("a" * 32, None, None, None, None)
            for table in ("online_sessions", "online_session_traces", "online_session_rules", "online_backfills"):
                assert conn.execute(text(f"SELECT count(*) FROM {table}")).scalar() == 0
            conn.execute(text(_SCORE), {"g": "conv#1", "t": "a" * 32})
            conn.execute(text(_SCORE), {"g": "a" * 32 + "@r2", "t": "a" * 32})
            conn.execute(
                text("UPDATE online_scores SET session_id = 'conv', generation = 1 WHERE target_id = 'conv#1'")
            )
        with engine.begin() as conn:
            command.downgrade(schema._config(conn), "0013")
            assert conn.execute(text("SELECT target_id FROM online_scores")).all() == [("a" * 32,)]
            command.upgrade(schema._config(conn), "head")
            assert conn.execute(text("SELECT target_id, superseded_by FROM online_scores")).all() == [("a" * 32, None)]
    finally:
        engine.dispose()
