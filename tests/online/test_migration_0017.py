"""Migration 0017 (issue 52, job sinks), on SQLite and PostgreSQL: the online scores' deliveries stay, as
``source = 'rule'``; jobs get ``sinks`` (null) and ``sinks_enqueued`` (false); a job's delivery and a rule's
with the same ids are two rows (the source is in the key); down (the job rows left out) and up again."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import create_engine, text
from sqlalchemy.exc import IntegrityError

from evaluator_host.store import schema
from evaluator_host.store.db import make_engine

_DELIVERY = (
    "INSERT INTO online_sink_deliveries (rule_id, target_id, sink, workspace_id, type, key, state, attempts, error, "
    "due_at, claimed_by, claimed_until, created_at, delivered_at) VALUES ('r1', :t, 0, 'ws', 'langfuse', 'evh-1', "
    "'delivered', 1, NULL, '2026-11-25 12:00:00', NULL, NULL, '2026-11-25 12:00:00', '2026-11-25 12:00:01')"
)


def test_0017_keeps_score_deliveries_and_keys_job_ones_apart(database_url: str) -> None:
    engine = create_engine(database_url)
    with engine.begin() as conn:
        command.upgrade(schema._config(conn), "0016")
        conn.execute(text(_DELIVERY), {"t": "a" * 32})
    engine.dispose()
    engine = make_engine(database_url)  # migrates to the newest
    try:
        with engine.begin() as conn:
            row = conn.execute(text("SELECT source, rule_id, target_id, state, trace_id FROM online_sink_deliveries"))
            assert [tuple(r) for r in row] == [("rule", "r1", "a" * 32, "delivered", None)]
            conn.execute(
                text(_DELIVERY.replace("(rule_id", "(source, rule_id").replace("('r1'", "('job', 'r1'")),
                {"t": "a" * 32},
            )
            assert conn.execute(text("SELECT count(*) FROM online_sink_deliveries")).scalar() == 2
        with pytest.raises(IntegrityError), engine.begin() as conn:  # the same (source, rule, target, sink): one
            conn.execute(text(_DELIVERY), {"t": "a" * 32})
        with engine.begin() as conn:
            columns = conn.execute(text("SELECT sinks, sinks_enqueued FROM jobs")).all()
            assert columns == []
            command.downgrade(schema._config(conn), "0016")
            assert conn.execute(text("SELECT rule_id, target_id FROM online_sink_deliveries")).all() == [
                ("r1", "a" * 32)
            ]
            command.upgrade(schema._config(conn), "head")
            assert conn.execute(text("SELECT source FROM online_sink_deliveries")).all() == [("rule",)]
    finally:
        engine.dispose()
