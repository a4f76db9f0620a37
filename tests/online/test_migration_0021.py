"""Migration 0021_shadow_revisions (issue 53), on SQLite and PostgreSQL: a rule from before has no candidate
(``candidate_revision`` null) and works as before — a candidate can be set and promoted; its shadow scores go
into the new table; down drops the candidate and the shadow scores (the rule and its live scores stay), and up
again."""

from __future__ import annotations

from alembic import command
from sqlalchemy import create_engine, inspect, text

from evaluator_host.store import schema
from evaluator_host.store.db import make_engine, utcnow
from evaluator_host.store.online import shadow as online_shadow
from evaluator_host.store.online.rules import RuleStore

_RULE = (
    "INSERT INTO online_rules (id, workspace_id, name, evaluator_id, revision, filter, sampling_rate, mapping, target, "
    "limits, sinks, enabled, created_at, updated_at, deleted_at) VALUES ('rule_1', 'ws_1', 'r', 'ev_1', 1, '{}', 1.0, "
    "NULL, NULL, NULL, NULL, true, '2026-11-25 12:00:00', '2026-11-25 12:00:00', NULL)"
)


def _shadow_row() -> dict[str, object]:
    return {
        "rule_id": "rule_1", "target_id": "a" * 32, "revision": 2, "workspace_id": "ws_1", "trace_id": "a" * 32,
        "span_id": None, "session_id": None, "evaluator_id": "ev_1", "status": "ok", "score": 0.0, "passed": False,
        "label": None, "duration_ms": 1.0, "result": "{}", "live_revision": 1, "live_status": "ok", "live_score": 1.0,
        "live_passed": True, "live_label": None, "scored_at": utcnow(),
    }  # fmt: skip


def test_0021_gives_old_rules_no_candidate_and_down_drops_only_the_shadow(database_url: str) -> None:
    engine = create_engine(database_url)
    with engine.begin() as conn:
        command.upgrade(schema._config(conn), "0020_job_leases")
        conn.execute(text(_RULE))
    engine.dispose()
    engine = make_engine(database_url)  # migrates to the newest
    try:
        rules = RuleStore(engine)
        assert rules.get("ws_1", "rule_1").candidate_revision is None
        assert rules.update("ws_1", "rule_1", {"candidate_revision": 2}).candidate_revision == 2
        assert online_shadow.record(engine, [_shadow_row()]) == 1
        assert online_shadow.record(engine, [_shadow_row()]) == 0  # once per (rule, target, revision)
        promoted, before = rules.promote("ws_1", "rule_1")
        assert (before, promoted.revision, promoted.candidate_revision) == (1, 2, None)
        assert online_shadow.compare(engine, "rule_1", 2, 5).pass_to_fail == 1
        with engine.begin() as conn:
            command.downgrade(schema._config(conn), "0020_job_leases")
            assert "online_shadow_scores" not in inspect(conn).get_table_names()
            assert "candidate_revision" not in {c["name"] for c in inspect(conn).get_columns("online_rules")}
            assert conn.execute(text("SELECT id, revision FROM online_rules")).all() == [("rule_1", 2)]
            command.upgrade(schema._config(conn), "head")
            assert conn.execute(text("SELECT count(*) FROM online_shadow_scores")).scalar() == 0
        assert rules.get("ws_1", "rule_1").candidate_revision is None
    finally:
        engine.dispose()
