"""Migration 0013 (issue 50), on SQLite and PostgreSQL: ``online_scores``' key becomes (rule_id, target_id)
with existing rows kept valid (their target id is their trace id, a trace-level rule's), the key still
refusing a second row for a pair, a span row beside them accepted; ``online_rules.target`` added (null:
trace level); down (span rows left out) and up again."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import create_engine, text
from sqlalchemy.exc import IntegrityError

from evaluator_host.store import schema
from evaluator_host.store.db import make_engine
from evaluator_host.store.online.rules import RuleStore

_RULE = (
    "INSERT INTO online_rules (id, workspace_id, name, evaluator_id, revision, filter, sampling_rate, mapping, "
    "enabled, created_at, updated_at) VALUES ('r1', 'ws', NULL, 'ev', NULL, '{}', 1.0, NULL, true, "
    "'2026-11-23 12:00:00', '2026-11-23 12:00:00')"
)
_SCORE = (
    "INSERT INTO online_scores (rule_id, trace_id, workspace_id, span_id, state, attempts, enqueued_at, "
    "evaluator_id, status, score) VALUES ('r1', :t, 'ws', 'bbbbbbbbbbbbbbbb', 'done', 1, '2026-11-23 12:00:00', "
    "'ev', 'ok', 0.5)"
)


def test_0013_keeps_existing_scores_valid_and_keys_the_queue_by_target(database_url: str) -> None:
    engine = create_engine(database_url)
    with engine.begin() as conn:
        command.upgrade(schema._config(conn), "0011")
        conn.execute(text(_RULE))
        conn.execute(text(_SCORE), {"t": "a" * 32})
    engine.dispose()
    engine = make_engine(database_url)  # migrates to the newest
    try:
        with engine.begin() as conn:
            rows = conn.execute(text("SELECT rule_id, target_id, trace_id, span_id, score FROM online_scores")).all()
            assert [tuple(r) for r in rows] == [("r1", "a" * 32, "a" * 32, "b" * 16, 0.5)]
            conn.execute(
                text(
                    "INSERT INTO online_scores (rule_id, target_id, trace_id, workspace_id, span_id, state, attempts, "
                    "enqueued_at, evaluator_id) VALUES ('r1', :g, :t, 'ws', 'cccccccccccccccc', 'queued', 0, "
                    "'2026-11-23 12:00:01', 'ev')"
                ),
                {"g": "a" * 32 + "/" + "c" * 16, "t": "a" * 32},
            )
        with pytest.raises(IntegrityError), engine.begin() as conn:  # the pair's key still holds
            conn.execute(
                text(_SCORE.replace("(rule_id,", "(target_id, rule_id,").replace("VALUES (", "VALUES (:t, ")),
                {"t": "a" * 32},
            )
        rule = RuleStore(engine).get("ws", "r1")
        assert rule.target is None and rule.level == "trace"
        with engine.begin() as conn:
            command.downgrade(schema._config(conn), "0011")
            assert conn.execute(text("SELECT rule_id, trace_id FROM online_scores")).all() == [("r1", "a" * 32)]
            command.upgrade(schema._config(conn), "head")
            assert conn.execute(text("SELECT target_id FROM online_scores")).all() == [("a" * 32,)]
    finally:
        engine.dispose()
