"""What the online API reads, computed in the database, on SQLite and PostgreSQL: per-bucket stats
(count, ok, mean score, pass rate, labels) of ``done`` scores only, a rule's scores newest first
with a keyset cursor, the queued and dropped counts, the latest traces of one workspace."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, insert

from evaluator_host.store.online.rows import OnlineScoreRow
from evaluator_host.store.online.views import ScoreView
from tests.support.online import WS, chat_trace, hex_id

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def row(rule: str, at_s: float | None, state: str = "done", **fields: Any) -> dict[str, Any]:
    at = None if at_s is None else T0 + timedelta(seconds=at_s)
    return {
        "rule_id": rule,
        "trace_id": hex_id(16),
        "workspace_id": WS,
        "state": state,
        "attempts": 1,
        "enqueued_at": at or T0,
        "scored_at": at if state == "done" else None,
        "evaluator_id": "ev_1",
        **{"status": None, "score": None, "passed": None, "label": None, **fields},
    }


def test_stats_per_bucket_in_sql(engine: Engine) -> None:
    rows = [
        row("r1", 5, status="ok", score=1.0, passed=True, label="good"),
        row("r1", 30, status="ok", score=0.5, passed=False, label="bad"),
        row("r1", 59.9, status="error"),
        row("r1", 61, status="ok", score=0.25, label="good"),
        row("r1", 3000, status="ok", score=1.0),  # past until
        row("r1", 10, "queued"),
        row("r1", 20, "dropped"),
        row("r2", 10, status="ok", score=0.0),  # another rule
    ]
    with engine.begin() as conn:
        conn.execute(insert(OnlineScoreRow), rows)
    view = ScoreView(engine)
    got = {b.index: b for b in view.stats("r1", T0, T0 + timedelta(seconds=180), 60)}
    assert set(got) == {0, 1}
    first, second = got[0], got[1]
    assert (first.count, first.ok, first.mean_score, first.pass_rate) == (3, 2, 0.75, 0.5)
    assert first.labels == {"good": 1, "bad": 1}
    assert (second.count, second.ok, second.mean_score, second.pass_rate) == (1, 1, 0.25, None)
    assert view.counted("r1", T0, T0 + timedelta(seconds=180)) == (1, 1)


def test_scores_page_newest_first_and_traces_of_one_workspace(engine: Engine) -> None:
    rows = [row("r1", float(i), status="ok", score=i / 10) for i in range(5)]
    with engine.begin() as conn:
        conn.execute(insert(OnlineScoreRow), rows)
    view = ScoreView(engine)
    first = view.of_rule("r1", since=None, until=None, limit=3, before=None)
    assert [s["score"] for s in first] == [0.4, 0.3, 0.2]
    last = first[-1]
    after = view.of_rule("r1", since=None, until=None, limit=3, before=(last["enqueued_at"], last["trace_id"]))
    assert [s["score"] for s in after] == [0.1, 0.0]
    since = view.of_rule(
        "r1", since=T0 + timedelta(seconds=3), until=T0 + timedelta(seconds=4), limit=None, before=None
    )
    assert [s["score"] for s in since] == [0.3]
    mine = [chat_trace(engine) for _ in range(3)]
    chat_trace(engine, workspace="ws_other")
    listed = view.traces(WS, limit=None, before=None)
    assert {t.trace_id for t in listed} == set(mine) and all(t.span_count == 2 for t in listed)
    assert view.trace_row("ws_other", mine[0]) is None
