"""Routing's per-trace rows written by driver SQL (issue 55: SQLAlchemy's per-row parameter processing cost
more than the inserts) are the rows SQLAlchemy's Core insert wrote, byte for byte, on SQLite and PostgreSQL:
a decision row (its ``at`` bound as SQLAlchemy binds it), and a session's member rows (a trace joined twice
keeps its first row)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, insert

from evaluator_host.store.online import sessions as online_sessions
from evaluator_host.store.online.routing import _insert_decisions
from evaluator_host.store.online.rows import OnlineDecisionRow

pytestmark = pytest.mark.databases


def _raw(engine: Engine, sql: str) -> list[tuple[object, ...]]:
    with engine.connect() as conn:
        return [tuple(row) for row in conn.exec_driver_sql(sql)]


def test_decision_rows_by_driver_sql_are_the_core_inserts_rows(engine: Engine) -> None:
    at = datetime(2026, 11, 26, 7, 41, 5, 123456, tzinfo=UTC)
    row = {"workspace_id": "ws", "rule_id": "rule_1", "decision": "sampled_out", "reason": "é 'quoted' \x01", "at": at}
    with engine.begin() as conn:
        conn.execute(insert(OnlineDecisionRow), [{**row, "trace_id": "a" * 32}])  # what routing did before
        _insert_decisions(conn, [{**row, "trace_id": "b" * 32}, {**row, "trace_id": "c" * 32, "at": at.replace(1999)}])
    stored = _raw(
        engine, "SELECT trace_id, workspace_id, rule_id, decision, reason, at FROM online_decisions ORDER BY trace_id"
    )
    assert [r[0] for r in stored] == ["a" * 32, "b" * 32, "c" * 32]
    assert stored[1][1:] == stored[0][1:]  # every column, the time as stored (SQLite: SQLAlchemy's text)
    assert stored[2][1:5] == stored[0][1:5] and stored[2][5] != stored[0][5]


def test_a_trace_joining_a_session_twice_keeps_its_first_member_row(engine: Engine) -> None:
    now = datetime(2026, 11, 26, 8, 0, tzinfo=UTC)
    first = online_sessions.Joined("ws", "s-1", "a" * 32, 5, now, ())
    again = online_sessions.Joined("ws", "s-1", "a" * 32, 9, now, ())
    other = online_sessions.Joined("ws", "s-1", "b" * 32, 7, now, ())
    with engine.begin() as conn:
        online_sessions.record(conn, [first, other], now)
    with engine.begin() as conn:
        online_sessions.record(conn, [again], now)
    members = _raw(
        engine, "SELECT workspace_id, session_id, trace_id, start_ns FROM online_session_traces ORDER BY trace_id"
    )
    assert members == [("ws", "s-1", "a" * 32, 5), ("ws", "s-1", "b" * 32, 7)]
