"""A backfill re-run from the result cache, end to end through the real service (issue 50): the same deterministic
evaluator on the same stored traces answers every target from the cache (``cached`` counts them, ``skipped`` stays
0, each score says ``cached``), except a trace whose spans changed since — a span arrived after the first run, so
its case is another: it runs again and its score sees the new span; an evaluator whose cache is off
(``settings.cache: false``) is never answered from the cache. Process and docker backends on SQLite, and SQLite
and PostgreSQL on the process backend."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from evaluator_host.online.reading.spans import encode
from evaluator_host.store.db import as_utc, make_engine
from evaluator_host.store.online.case_hashes import CaseHashRow
from evaluator_host.store.online.rows import OnlineTraceRow
from evaluator_host.store.online.spans import OnlineSpanStore
from tests.support.backends import BACKENDS
from tests.support.online import WS, chat_trace, span
from tests.support.service import serving
from tests.support.wait import wait_until

ENV = {
    "EVALUATOR_HOST_ONLINE_QUIET_PERIOD_S": "0.2",
    "EVALUATOR_HOST_ONLINE_ASSEMBLY_S": "0.05",
    "EVALUATOR_HOST_ONLINE_POLL_S": "0.05",
    "EVALUATOR_HOST_ONLINE_BACKFILL_MAX_TARGETS": "1000",
}
CODE = (
    "def evaluate(inputs, outputs, trace):\n"
    "    def n(spans):\n"
    "        return sum(1 + n(s['children']) for s in spans.values())\n"
    "    return {'score': 1.0, 'label': str(n(trace['spans']))}\n"
)


def _late_span(engine: Any, trace_id: str) -> None:
    """A span of ``trace_id`` arriving now, written as the receiver writes it."""
    late = span(trace_id, "tool")
    row = {"trace_id": trace_id, "span_id": late.span_id, "parent_span_id": None, "name": "tool",
           "service_name": "chat-api", "start_ns": late.start_ns, "end_ns": late.end_ns, "body": encode(late),
           "root_ended_at": None}  # fmt: skip
    assert OnlineSpanStore(engine).write(WS, [row], datetime.now(UTC)) == 1


def _backfilled(client: httpx.Client, evaluator_id: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A new rule of the evaluator, its backfill followed to its end, then the rule deleted: the backfill and its
    scores by trace id."""
    rule = client.post("/v1/online-rules", json={"evaluator_id": evaluator_id}).json()["id"]
    started = client.post(f"/v1/online-rules/{rule}/backfill", json={}).json()

    def ended() -> dict[str, Any] | None:
        got = dict(client.get(f"/v1/online-rules/{rule}/backfills/{started['id']}").json())
        return got if got["status"] != "running" else None

    done = wait_until(ended, 300, 0.1, what="the backfill ended")
    scores = client.get(f"/v1/online-rules/{rule}/scores", params={"limit": 100}).json()["data"]
    client.delete(f"/v1/online-rules/{rule}")
    return done, {s["trace_id"]: s for s in scores}


def _rerun(client: httpx.Client, engine: Any) -> None:
    traces = [chat_trace(engine, state="routed") for _ in range(6)]
    body = {"name": "spans", "language": "python", "code": CODE, "settings": {"cache": True}}
    ev = client.post("/v1/evaluators", json=body).json()["id"]
    first, ran = _backfilled(client, ev)
    assert (first["status"], first["done"], first["skipped"], first["cached"]) == ("done", 6, 0, 0)
    assert sorted(ran) == sorted(traces) and {s["label"] for s in ran.values()} == {"2"}
    with engine.connect() as conn:  # the pages' case keys: each with its trace's span count and generation
        keys = conn.execute(select(CaseHashRow.target_id, CaseHashRow.span_count, CaseHashRow.first_seen_at)).all()
        seen = dict(conn.execute(select(OnlineTraceRow.trace_id, OnlineTraceRow.first_seen_at)).all())
    assert keys and {(t, n, as_utc(at)) for t, n, at in keys} <= {(t, 2, as_utc(seen[t])) for t in traces}
    grew = traces[0]
    _late_span(engine, grew)  # the trace changed after it was scored

    again, rerun = _backfilled(client, ev)
    assert (again["status"], again["done"], again["skipped"], again["cached"]) == ("done", 6, 0, 5), [
        (s["label"], s["result"].get("cached")) for s in rerun.values()
    ]
    assert rerun[grew]["label"] == "3" and not rerun[grew]["result"].get("cached")  # run again: sees the new span
    for trace_id in traces[1:]:
        assert rerun[trace_id]["result"]["cached"] is True and rerun[trace_id]["label"] == "2"

    off = {**body, "name": "uncached", "settings": {"cache": False}}
    uncached = client.post("/v1/evaluators", json=off).json()["id"]
    for _ in range(2):  # the second backfill finds the first's results, and never uses them
        done, scores = _backfilled(client, uncached)
        assert (done["status"], done["done"], done["cached"]) == ("done", 6, 0)
        assert not any(s["result"].get("cached") for s in scores.values()) and rerun.keys() == scores.keys()
    assert client.get("/healthz").status_code == 200


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rerun_is_answered_from_the_cache_but_a_trace_that_changed_and_an_uncached_evaluator_run(
    tmp_path: Path, backend: str
) -> None:
    with serving(tmp_path, backend, env=ENV) as (client, _proc):
        engine = make_engine(f"sqlite:///{tmp_path / 'evaluator-host.db'}")
        _rerun(client, engine)
        engine.dispose()


@pytest.mark.slow
def test_a_rerun_from_the_cache_on_each_database(tmp_path: Path, database_url: str) -> None:
    with serving(tmp_path, "process", database_url=database_url, env=ENV) as (client, _proc):
        engine = make_engine(database_url)
        _rerun(client, engine)
        engine.dispose()
