"""The decisions of the passing states — queued, running, retrying (the error quoted), delayed (the budget
named, until when), dropped (backlog full, rule deleted) — and of a trace routed before decisions were
kept, derived from the rows as the scorer leaves them, on SQLite and PostgreSQL; a rule's pending counts;
decisions deleted by the span retention sweep; and a started service's queued score whose trace retention
deleted ends ``dropped`` (status ``retention``), not failed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, insert, select, update

from evaluator_host.online.deciding.decisions import derive, span_refs
from evaluator_host.online.deciding.explain import why_not
from evaluator_host.online.deciding.router import decide
from evaluator_host.online.levels.traces import load_trace
from evaluator_host.settings import Settings
from evaluator_host.store.db import make_engine
from evaluator_host.store.online.decisions import DecisionStore
from evaluator_host.store.online.refs import TraceRef, waiting_of
from evaluator_host.store.online.rows import OnlineDecisionRow, OnlineScoreRow, OnlineTraceRow
from evaluator_host.store.online.rules import RuleStore
from evaluator_host.store.online.scores import ScoreQueue
from evaluator_host.store.online.spans import OnlineSpanStore
from tests.support.online import WS, chat_trace
from tests.support.service import serving
from tests.support.wait import wait_until

ME = "svc_test"


def _rule(engine: Engine, **fields: Any) -> str:
    base = {"name": None, "revision": None, "filter": {}, "sampling_rate": 1.0, "mapping": None, "enabled": True}
    return RuleStore(engine).create(WS, "ev_1", {**base, **fields}).id


def _decisions(engine: Engine, trace_id: str) -> dict[str, dict[str, Any]]:
    facts = DecisionStore(engine).facts(WS, trace_id)
    assert facts is not None
    with engine.connect() as conn:
        loaded = load_trace(conn, WS, trace_id, max_spans=100)
    assert loaded is not None
    ref = TraceRef(WS, trace_id, loaded.root_span_id, span_refs(loaded.spans))
    return {d["rule_id"]: d for d in derive(facts, ref, Settings(), datetime.now(UTC))}


def test_queued_running_retrying_delayed_and_dropped_say_why(engine: Engine) -> None:
    queue = ScoreQueue(engine)
    rule = _rule(engine)
    first, second, third = chat_trace(engine), chat_trace(engine), chat_trace(engine)
    queue.route(10, 100, decide, explain=why_not)
    assert _decisions(engine, first)[rule]["decision"] == "queued"
    assert _decisions(engine, first)[rule]["reason"] == "waiting for a scoring slot"
    assert DecisionStore(engine).pending(rule) == {"queued": 3, "running": 0, "retrying": 0, "delayed": 0}

    claimed = {c.trace_id: c for c in queue.claim(ME, 10, 60.0)}
    running = _decisions(engine, first)[rule]
    assert running["decision"] == "running" and running["attempts"] == 1 and running["until"] is not None
    assert running["reason"].startswith("attempt 1, claimed until ")

    queue.retry(ME, [(rule, claimed[first].target_id)], 30.0, "Overloaded: no worker fits")
    retrying = _decisions(engine, first)[rule]
    assert retrying["decision"] == "retrying" and retrying["until"] is not None
    assert retrying["reason"].startswith("attempt 1 failed: Overloaded: no worker fits; tried again at ")

    queue.defer(ME, [(rule, claimed[second].target_id)], [45.0])
    delayed = _decisions(engine, second)[rule]
    assert delayed["decision"] == "delayed" and delayed["attempts"] == 0
    assert delayed["reason"].startswith("over the budget max_evaluations_per_s: resumes at ")
    assert delayed["until"] > datetime.now(UTC) + timedelta(seconds=30)

    queue.discard(ME, [(rule, claimed[third].target_id)], "rule_deleted")
    gone = _decisions(engine, third)[rule]
    assert (gone["decision"], gone["reason"]) == ("dropped", "the rule was deleted before it was scored")
    assert DecisionStore(engine).pending(rule) == {"queued": 0, "running": 0, "retrying": 1, "delayed": 1}

    full = chat_trace(engine)
    queue.route(10, 0, decide, explain=why_not)  # the backlog bound reached: stored dropped
    dropped = _decisions(engine, full)[rule]
    assert dropped["decision"] == "dropped" and dropped["reason"].startswith("the scoring backlog was full")


def test_a_trace_routed_before_decisions_were_kept_is_explained_from_the_rule_as_it_is(engine: Engine) -> None:
    billing = _rule(engine, filter={"service_name": "billing"})
    trace_id = chat_trace(engine, state="routed")  # routed_at null: as migration 0015 finds old traces
    said = _decisions(engine, trace_id)[billing]
    assert said["decision"] == "not_matched"
    assert said["reason"].startswith('service_name is "chat-api", not "billing" (span "chat" ')
    assert said["reason"].endswith(
        "(recomputed with the rule as it is now: no decision was kept when the trace was routed)"
    )


def test_retention_deletes_decisions_with_their_trace(engine: Engine) -> None:
    _rule(engine, sampling_rate=0.0)
    trace_id = chat_trace(engine)
    ScoreQueue(engine).route(10, 100, decide, explain=why_not)

    def kept() -> int:
        with engine.connect() as conn:
            return int(conn.scalar(select(func.count()).select_from(OnlineDecisionRow)) or 0)

    assert kept() == 1
    with engine.begin() as conn:
        routed = conn.scalar(select(OnlineTraceRow.routed_at).where(OnlineTraceRow.trace_id == trace_id))
        assert routed is not None
        conn.execute(update(OnlineTraceRow).values(last_span_at=routed))
    OnlineSpanStore(engine).sweep(datetime.now(UTC) - timedelta(hours=1))
    assert kept() == 1  # younger than the cutoff: kept
    OnlineSpanStore(engine).sweep(datetime.now(UTC) + timedelta(seconds=1))
    assert kept() == 0


@pytest.mark.slow
def test_a_queued_score_whose_trace_retention_deleted_ends_dropped_for_retention(tmp_path: Path) -> None:
    with serving(tmp_path, "process", env={"EVALUATOR_HOST_ONLINE_POLL_S": "0.05"}) as (client, _proc):
        code = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"
        ev = client.post("/v1/evaluators", json={"name": "one", "language": "python", "code": code}).json()["id"]
        rule = client.post("/v1/online-rules", json={"evaluator_id": ev}).json()["id"]
        engine = make_engine(f"sqlite:///{tmp_path / 'evaluator-host.db'}")
        with engine.begin() as conn:  # queued, its trace's rows already swept
            conn.execute(
                insert(OnlineScoreRow),
                [{"rule_id": rule, "trace_id": "ab" * 16, "workspace_id": WS, "state": "queued", "attempts": 0,
                  "enqueued_at": datetime.now(UTC), "evaluator_id": ev}],
            )  # fmt: skip
        engine.dispose()

        def dropped() -> dict[str, Any] | None:
            rows = client.get(f"/v1/online-rules/{rule}/scores").json()["data"]
            return rows[0] if rows and rows[0]["state"] == "dropped" else None

        row = wait_until(dropped, 60, 0.05, what="the row dropped")
        assert row["status"] == "retention" and row["result"] is None
        stats = client.get(f"/v1/online-rules/{rule}/stats").json()
        assert stats["decisions"] == {"dropped": 1} and stats["dropped"] == 1


def test_a_rules_waiting_rows_are_read_by_the_backlogs_index_not_every_row_of_the_rule(engine: Engine) -> None:
    """The Online screen asks each 3 s: with the rule in an indexable comparison SQLite read every row of the rule
    (41 ms a call at 100,000 rows); the backlog is bounded, so its ``state`` index is the one to read (plan:
    SQLite's; the count: both databases)."""
    query = select(func.count()).select_from(OnlineScoreRow).where(waiting_of("rule_x"))
    with engine.connect() as conn:
        assert conn.scalar(query) == 0
        if engine.dialect.name == "sqlite":
            compiled = query.compile(conn, compile_kwargs={"literal_binds": True})
            plan = " | ".join(str(r[3]) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}"))
            assert "ix_online_scores_state" in plan and "rule_scored" not in plan, plan
