"""Backfill end to end (issue 50): traffic from the OpenTelemetry SDK reaches the real service before a rule
exists; a rule created afterwards scores new traffic live, and ``POST /v1/online-rules/{id}/backfill``
scores what it missed — a dry run first (nothing stored), then the backfill, followed to ``done``; a second
backfill skips everything; a new revision scores everything again and its scores supersede the old ones
(the stats count current scores only). A cancel drops what is still queued; a backfill survives a SIGKILL
of its service and scores each target exactly once — also a fast rule's, scored page by page by its planner,
with two services on one database (SQLite and PostgreSQL). A session-level rule's backfill scores the sessions
stored before it; a backfill whose every target failed ends ``failed``."""

from __future__ import annotations

import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind
from sqlalchemy import func, insert, select

from evaluator_host.online.reading.spans import encode
from evaluator_host.store.db import make_engine
from evaluator_host.store.online.rows import OnlineBackfillRow, OnlineScoreRow, OnlineSpanRow, OnlineTraceRow
from tests.support.backends import BACKENDS
from tests.support.online import WS, chat_spans, chat_trace, hex_id, put_traces, score_rows, span
from tests.support.service import serving
from tests.support.wait import wait_until

ENV = {
    "EVALUATOR_HOST_ONLINE_QUIET_PERIOD_S": "0.2",
    "EVALUATOR_HOST_ONLINE_ASSEMBLY_S": "0.05",
    "EVALUATOR_HOST_ONLINE_POLL_S": "0.05",
    "EVALUATOR_HOST_ONLINE_BACKFILL_MAX_TARGETS": "1000",
}


def _code(label: str) -> str:
    return f"def evaluate(inputs, outputs, trace):\n    return {{'score': 1.0, 'label': {label!r}}}\n"


def _send(base: str, n: int) -> list[str]:
    """``n`` chat traces from an app instrumented with the OpenTelemetry SDK (OTLP/HTTP protobuf)."""
    provider = TracerProvider(resource=Resource.create({"service.name": "chat"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces", timeout=10)))
    tracer = provider.get_tracer("tests.online.backfill")
    sent = []
    for i in range(n):
        with tracer.start_as_current_span("chat", kind=SpanKind.SERVER, attributes={"input.value": f"q{i}"}) as root:
            with tracer.start_as_current_span("llm", kind=SpanKind.CLIENT, attributes={"output.value": f"a{i}"}):
                pass
            sent.append(format(root.get_span_context().trace_id, "032x"))
    provider.shutdown()
    return sent


def _send_turns(base: str, sessions: dict[str, int]) -> list[str]:
    """Chat turns from an app instrumented with the OpenTelemetry SDK: ``n`` turns of each session id, each turn a
    trace whose root carries ``session.id`` (OpenInference) and its question and answer."""
    provider = TracerProvider(resource=Resource.create({"service.name": "chat"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces", timeout=10)))
    tracer = provider.get_tracer("tests.online.backfill")
    sent = []
    for sid, n in sessions.items():
        for i in range(n):
            attributes = {"session.id": sid, "input.value": f"{sid} q{i}", "output.value": f"a{i}"}
            with tracer.start_as_current_span("turn", kind=SpanKind.SERVER, attributes=attributes) as root:
                sent.append(format(root.get_span_context().trace_id, "032x"))
    provider.shutdown()
    return sent


def _routed(client: httpx.Client, traces: list[str]) -> bool:
    states = {t["trace_id"]: t["state"] for t in client.get("/v1/traces", params={"limit": 100}).json()["data"]}
    return all(states.get(t) == "routed" for t in traces)


def _backfill(client: httpx.Client, rule_id: str, backfill_id: str) -> dict[str, Any]:
    return dict(client.get(f"/v1/online-rules/{rule_id}/backfills/{backfill_id}").json())


def _finished(client: httpx.Client, rule_id: str, backfill_id: str) -> dict[str, Any] | None:
    got = _backfill(client, rule_id, backfill_id)
    return got if got["status"] == "done" else None


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_backfill_scores_what_a_rule_missed_skips_the_scored_and_rescores_a_new_revision(
    tmp_path: Path, backend: str
) -> None:
    with serving(tmp_path, backend, env=ENV) as (client, _proc):
        base = str(client.base_url)
        before = _send(base, 6)  # no rule yet: stored, routed, never scored
        wait_until(lambda: _routed(client, before), 120, 0.1, what="the traces routed")
        made = client.post("/v1/evaluators", json={"name": "bf", "language": "python", "code": _code("v1")})
        ev = made.json()["id"]
        rule_id = client.post("/v1/online-rules", json={"evaluator_id": ev}).json()["id"]
        live = _send(base, 2)  # scored live by the rule

        def live_done() -> bool:
            scores = client.get(f"/v1/online-rules/{rule_id}/scores").json()["data"]
            return sorted(s["trace_id"] for s in scores if s["state"] == "done") == sorted(live)

        wait_until(live_done, 120, 0.1, what="the live traces scored")

        url = f"/v1/online-rules/{rule_id}/backfill"
        dry = client.post(url, json={"dry_run": True})
        assert dry.status_code == 200, dry.text
        assert {k: dry.json()[k] for k in ("traces", "targets", "already_scored")} == {
            "traces": 8,
            "targets": 8,
            "already_scored": 2,
        }
        assert dry.json()["estimate_s"] >= 0 and dry.json()["revision"] == 1
        assert client.get(f"/v1/online-rules/{rule_id}/scores").json()["count"] == 2  # the dry run stored nothing

        started = client.post(url, json={"since": "2000-01-01T00:00:00Z"})
        assert started.status_code == 202, started.text
        body = started.json()
        assert set(body) >= {"id", "status", "total", "done", "skipped"} and body["total"] == 6
        bf = wait_until(lambda: _finished(client, rule_id, body["id"]), 300, 0.1, what="the backfill done")
        assert (bf["total"], bf["done"], bf["skipped"]) == (6, 6, 2)
        scores = client.get(f"/v1/online-rules/{rule_id}/scores").json()["data"]
        assert sorted(s["trace_id"] for s in scores) == sorted(before + live)  # each once
        assert {s["label"] for s in scores} == {"v1"}

        again = client.post(url, json={}).json()
        skipped = wait_until(lambda: _finished(client, rule_id, again["id"]), 120, 0.1, what="nothing to do")
        assert (skipped["total"], skipped["done"], skipped["skipped"]) == (0, 0, 8)

        client.put(f"/v1/evaluators/{ev}", json={"name": "bf", "language": "python", "code": _code("v2")})
        newer = client.post(url, json={}).json()  # the rule scores with the latest: revision 2
        assert newer["revision"] == 2 and newer["total"] == 8
        redone = wait_until(lambda: _finished(client, rule_id, newer["id"]), 300, 0.1, what="revision 2 done")
        assert redone["done"] == 8
        scores = client.get(f"/v1/online-rules/{rule_id}/scores").json()["data"]
        current = [s for s in scores if s["current"]]
        assert len(scores) == 16 and len(current) == 8 and {s["label"] for s in current} == {"v2"}
        assert all(s["superseded_by"] == f"{s['target_id']}@r2" for s in scores if not s["current"])
        stats = client.get(f"/v1/online-rules/{rule_id}/stats", params={"bucket": 3600}).json()
        assert sum(b["count"] for b in stats["buckets"]) == 8 and stats["buckets"][-1]["labels"] == {"v2": 8}

        assert client.post(url, json={"limit": 1001}).status_code == 422  # over the setting
        assert client.post(url, json={"since": "2100-01-01T00:00:00Z"}).status_code == 422  # since after until
        session_rule = client.post("/v1/online-rules", json={"evaluator_id": ev, "target": {"level": "session"}})
        sessions = client.post(f"/v1/online-rules/{session_rule.json()['id']}/backfill", json={"dry_run": True})
        assert sessions.status_code == 200 and sessions.json()["targets"] == 0  # these traces name no session
        assert client.post("/v1/online-rules/rule_nope/backfill", json={}).status_code == 404
        assert client.get(f"/v1/online-rules/{rule_id}/backfills/bf_nope").status_code == 404
        assert client.get("/healthz").status_code == 200


SLOW = "import time\ndef evaluate(inputs, outputs, trace):\n    time.sleep({s})\n    return 1.0\n"


def _states(engine: Any, rule_id: str) -> dict[str, int]:
    with engine.connect() as conn:
        query = (
            select(OnlineScoreRow.state, func.count())
            .where(OnlineScoreRow.rule_id == rule_id)
            .group_by(OnlineScoreRow.state)
        )
        return {state: int(n) for state, n in conn.execute(query)}


@pytest.mark.slow
def test_a_backfill_is_cancelled_and_another_survives_a_sigkill_scoring_each_target_once(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = {**ENV, "EVALUATOR_HOST_ONLINE_SCORING_CONCURRENCY": "1", "EVALUATOR_HOST_ONLINE_SCORING_BATCH": "2"}
    with serving(data_dir, "process", env=env) as (client, proc):
        engine = make_engine(f"sqlite:///{data_dir / 'evaluator-host.db'}")
        traces = [chat_trace(engine, state="routed") for _ in range(40)]  # stored before any rule
        slow = client.post("/v1/evaluators", json={"name": "slow", "language": "python", "code": SLOW.format(s=1)})
        slow_rule = client.post("/v1/online-rules", json={"evaluator_id": slow.json()["id"]}).json()["id"]
        started = client.post(f"/v1/online-rules/{slow_rule}/backfill", json={"limit": 10}).json()
        assert started["total"] == 10
        wait_until(lambda: _states(engine, slow_rule).get("queued", 0) > 0, 60, 0.05, what="rows queued")
        cancelled = client.delete(f"/v1/online-rules/{slow_rule}/backfills/{started['id']}")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled", cancelled.text
        wait_until(lambda: "running" not in _states(engine, slow_rule), 60, 0.1, what="the running row finished")
        after = _backfill(client, slow_rule, started["id"])
        assert after["status"] == "cancelled" and after["cancelled"] >= 1
        assert after["done"] + after["cancelled"] <= 10 and after["queued"] == 0

        fast = client.post("/v1/evaluators", json={"name": "fast", "language": "python", "code": SLOW.format(s=0.05)})
        rule_id = client.post("/v1/online-rules", json={"evaluator_id": fast.json()["id"]}).json()["id"]
        backfill = client.post(f"/v1/online-rules/{rule_id}/backfill", json={}).json()
        wait_until(
            lambda: _states(engine, rule_id).get("done", 0) >= 3 and _states(engine, rule_id).get("running", 0) > 0,
            120,
            0.02,
            what="the backfill scoring",
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    with serving(data_dir, "process", env=env) as (client, _proc):
        done = wait_until(lambda: _finished(client, rule_id, backfill["id"]), 300, 0.1, what="the backfill done")
        assert (done["total"], done["done"], done["skipped"]) == (40, 40, 0)
        rows = [r for r in score_rows(engine) if r.rule_id == rule_id]
        assert sorted(r.target_id for r in rows) == sorted(traces)  # each target exactly once
        assert {r.state for r in rows} == {"done"} and max(r.attempts for r in rows) >= 2
    engine.dispose()


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_backfills_rerun_of_a_deterministic_evaluator_is_answered_from_the_result_cache(
    tmp_path: Path, backend: str
) -> None:
    with serving(tmp_path, backend, env=ENV) as (client, _proc):
        engine = make_engine(f"sqlite:///{tmp_path / 'evaluator-host.db'}")
        traces = [chat_trace(engine, state="routed") for _ in range(5)]
        code = "def evaluate(inputs, outputs, trace):\n    return {'score': 1.0, 'label': str(inputs)}\n"
        body = {"name": "det", "language": "python", "code": code, "settings": {"cache": True}}
        ev = client.post("/v1/evaluators", json=body).json()["id"]

        def backfilled(rule_id: str) -> list[dict[str, Any]]:
            started = client.post(f"/v1/online-rules/{rule_id}/backfill", json={}).json()
            wait_until(lambda: _finished(client, rule_id, started["id"]), 300, 0.1, what="the backfill done")
            return list(client.get(f"/v1/online-rules/{rule_id}/scores").json()["data"])

        first = client.post("/v1/online-rules", json={"evaluator_id": ev}).json()["id"]
        ran = backfilled(first)
        assert sorted(s["trace_id"] for s in ran) == sorted(traces)
        assert not any(s["result"].get("cached") for s in ran)  # the first run ran
        client.delete(f"/v1/online-rules/{first}")
        second = client.post("/v1/online-rules", json={"evaluator_id": ev}).json()["id"]
        again = backfilled(second)  # the same evaluator on the same traces: lookups, not runs
        assert sorted(s["trace_id"] for s in again) == sorted(traces)
        assert all(s["result"]["cached"] is True and s["status"] == "ok" for s in again)
        assert {s["label"] for s in again} == {s["label"] for s in ran}
        engine.dispose()


@pytest.mark.slow
def test_a_new_revisions_backfill_of_more_traces_than_a_direct_page_scores_and_supersedes_every_one(
    tmp_path: Path,
) -> None:
    """A re-run after changing the evaluator over more traces than a page the planner scores directly (1,000):
    every target scored again with the new revision and each earlier score superseded (a page's 1,000 keys once
    made a statement SQLite refused: "Expression tree is too large", and the backfill never ended)."""
    env = {**ENV, "EVALUATOR_HOST_ONLINE_BACKFILL_MAX_TARGETS": "5000"}
    with serving(tmp_path, "process", env=env) as (client, _proc):
        engine = make_engine(f"sqlite:///{tmp_path / 'evaluator-host.db'}")
        put_traces(engine, [chat_spans() for _ in range(1_100)], state="routed")
        ev = client.post("/v1/evaluators", json={"name": "rv", "language": "python", "code": _code("v1")}).json()["id"]
        rule_id = client.post("/v1/online-rules", json={"evaluator_id": ev}).json()["id"]
        url = f"/v1/online-rules/{rule_id}/backfill"
        first = client.post(url, json={}).json()
        done = wait_until(lambda: _finished(client, rule_id, first["id"]), 300, 0.1, what="revision 1 done")
        assert (done["total"], done["done"]) == (1_100, 1_100)
        client.put(f"/v1/evaluators/{ev}", json={"name": "rv", "language": "python", "code": _code("v2")})
        dry = client.post(url, json={"dry_run": True}).json()
        assert (dry["revision"], dry["targets"], dry["already_scored"]) == (2, 1_100, 0)
        newer = client.post(url, json={}).json()
        redone = wait_until(lambda: _ended(client, rule_id, newer["id"]), 300, 0.1, what="revision 2 ended")
        assert (redone["status"], redone["total"], redone["done"]) == ("done", 1_100, 1_100), redone
        rows = score_rows(engine)
        assert len(rows) == 2_200 and {r.revision for r in rows if r.superseded_by is None} == {2}
        assert all(r.superseded_by == f"{r.target_id}@r2" for r in rows if r.revision == 1)
        engine.dispose()


def _ended(client: httpx.Client, rule_id: str, backfill_id: str) -> dict[str, Any] | None:
    got = _backfill(client, rule_id, backfill_id)
    return got if got["status"] != "running" else None


@pytest.mark.slow
def test_a_backfill_whose_every_target_failed_ends_failed_with_the_first_error_and_one_with_some_failures_done(
    tmp_path: Path,
) -> None:
    """An evaluator that raises on every stored trace: the backfill is ``failed`` with a reason (never
    ``done``, which reads as success); one that fails on some only is ``done`` with ``failed`` counted."""
    with serving(tmp_path, "process", env=ENV) as (client, _proc):
        engine = make_engine(f"sqlite:///{tmp_path / 'evaluator-host.db'}")
        for question in ("a", "b", "boom"):
            chat_trace(engine, question=question, state="routed")
        code = (
            "def evaluate(inputs, outputs, trace):\n"
            "    if {all} or inputs['q'] == 'boom':\n"
            "        raise ValueError('no score for ' + inputs['q'])\n"
            "    return 1.0\n"
        )
        broken = client.post(
            "/v1/evaluators", json={"name": "broken", "language": "python", "code": code.format(all=True)}
        )
        rule_id = client.post("/v1/online-rules", json={"evaluator_id": broken.json()["id"]}).json()["id"]
        started = client.post(f"/v1/online-rules/{rule_id}/backfill", json={}).json()
        ended = wait_until(lambda: _ended(client, rule_id, started["id"]), 300, 0.1, what="the backfill ended")
        assert ended["status"] == "failed", ended
        assert (ended["total"], ended["done"], ended["failed"]) == (3, 3, 3)
        assert ended["reason"].startswith("every one of its 3 target(s) failed; the most common error (")
        assert "ValueError: no score for " in ended["reason"]

        some = client.post(
            "/v1/evaluators", json={"name": "some", "language": "python", "code": code.format(all=False)}
        )
        rule_id = client.post("/v1/online-rules", json={"evaluator_id": some.json()["id"]}).json()["id"]
        started = client.post(f"/v1/online-rules/{rule_id}/backfill", json={}).json()
        ended = wait_until(lambda: _ended(client, rule_id, started["id"]), 300, 0.1, what="the backfill ended")
        assert (ended["status"], ended["done"], ended["failed"], ended["reason"]) == ("done", 3, 1, None)
        assert client.get("/healthz").status_code == 200
        engine.dispose()


def _store_traces(engine: Any, n: int) -> list[str]:
    """``n`` chat traces stored (routed before any rule), in one transaction."""
    spans: list[dict[str, Any]] = []
    heads: list[dict[str, Any]] = []
    now = datetime.now(UTC) - timedelta(minutes=5)
    for i in range(n):
        trace_id = hex_id(16)
        root = span(trace_id, "chat", attributes={"ag.data.inputs": {"q": f"q{i}"}, "ag.data.outputs": "4"})
        for s in (root, span(trace_id, "llm", parent=root.span_id)):
            spans.append(
                {"workspace_id": WS, "trace_id": trace_id, "span_id": s.span_id, "parent_span_id": s.parent_id,
                 "name": s.name, "service_name": "chat-api", "start_ns": s.start_ns, "end_ns": s.end_ns,
                 "body": encode(s), "received_at": now}
            )  # fmt: skip
        at = now + timedelta(milliseconds=i)
        heads.append(
            {"workspace_id": WS, "trace_id": trace_id, "service_name": "chat-api", "root_span_id": root.span_id,
             "root_name": "chat", "span_count": 2, "first_seen_at": at, "last_span_at": at, "root_ended_at": at,
             "state": "routed", "ready_at": at, "routed_at": at}
        )  # fmt: skip
    with engine.begin() as conn:
        conn.execute(insert(OnlineSpanRow), spans)
        conn.execute(insert(OnlineTraceRow), heads)
    return [h["trace_id"] for h in heads]


@pytest.mark.slow
def test_a_fast_backfill_scored_in_pages_by_two_services_survives_a_sigkill_of_its_holder_each_target_once(
    tmp_path: Path, database_url: str
) -> None:
    env = {**ENV, "EVALUATOR_HOST_ONLINE_CLAIM_S": "3", "EVALUATOR_HOST_ONLINE_BACKFILL_MAX_TARGETS": "10000"}
    dirs = [tmp_path / "a", tmp_path / "b"]
    with (
        serving(dirs[0], "process", database_url=database_url, env=env) as (client_a, proc_a),
        serving(dirs[1], "process", database_url=database_url, env=env) as (client_b, proc_b),
    ):
        engine = make_engine(database_url)
        traces = _store_traces(engine, 4000)
        ids = [(d / "service-id").read_text().strip() for d in dirs]
        code = "def evaluate(inputs, outputs, trace):\n    return {'score': 1.0, 'label': inputs['q']}\n"
        ev = client_a.post("/v1/evaluators", json={"name": "fast", "language": "python", "code": code}).json()["id"]
        rule_id = client_a.post("/v1/online-rules", json={"evaluator_id": ev}).json()["id"]
        started = client_a.post(f"/v1/online-rules/{rule_id}/backfill", json={}).json()
        assert started["total"] == 4000

        def holder_scored() -> str | None:  # a page stored by the service holding the backfill, more to come
            with engine.connect() as conn:
                held = conn.scalar(select(OnlineBackfillRow.claimed_by).where(OnlineBackfillRow.id == started["id"]))
                by = select(OnlineScoreRow.claimed_by, func.count()).where(OnlineScoreRow.rule_id == rule_id)
                counts = dict(conn.execute(by.group_by(OnlineScoreRow.claimed_by)).all())
            return held if held in ids and 0 < counts.get(held, 0) < 4000 else None

        killed = wait_until(holder_scored, 120, 0.02, what="a page stored by the backfill's holder")
        victim, survivor = (proc_a, client_b) if killed == ids[0] else (proc_b, client_a)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
        done = wait_until(lambda: _finished(survivor, rule_id, started["id"]), 300, 0.1, what="the backfill done")
        assert (done["total"], done["done"], done["skipped"], done["queued"]) == (4000, 4000, 0, 0)
        rows = [r for r in score_rows(engine) if r.rule_id == rule_id]
        assert sorted(r.target_id for r in rows) == sorted(traces)  # each target exactly once
        assert {r.state for r in rows} == {"done"} and {r.label for r in rows} == {f"q{i}" for i in range(4000)}
        assert {r.claimed_by for r in rows} == set(ids)  # the survivor took the rest over from the killed holder
        assert survivor.get("/healthz").status_code == 200
        engine.dispose()


@pytest.mark.slow
def test_a_backfill_whose_every_target_failed_ends_failed_naming_the_most_common_error(tmp_path: Path) -> None:
    with serving(tmp_path, "process", env=ENV) as (client, _proc):
        engine = make_engine(f"sqlite:///{tmp_path / 'evaluator-host.db'}")
        for _ in range(6):
            chat_trace(engine, state="routed")
        failing = "def evaluate(inputs, outputs, trace):\n    raise ValueError('no judge today')\n"
        some = "def evaluate(inputs, outputs, trace):\n    if outputs == '4':\n        raise ValueError('x')\n"
        some += "    return 1.0\n"
        chat_trace(engine, "3+3?", "6", state="routed")  # the one trace the second evaluator scores ok

        def backfilled(code: str) -> dict[str, Any]:
            ev = client.post("/v1/evaluators", json={"name": "f", "language": "python", "code": code}).json()["id"]
            rule_id = client.post("/v1/online-rules", json={"evaluator_id": ev}).json()["id"]
            started = client.post(f"/v1/online-rules/{rule_id}/backfill", json={}).json()

            def ended() -> dict[str, Any] | None:
                got = _backfill(client, rule_id, started["id"])
                return got if got["status"] != "running" else None

            return wait_until(ended, 300, 0.1, what="the backfill ended")

        failed = backfilled(failing)
        assert (failed["status"], failed["total"], failed["done"]) == ("failed", 7, 7)
        assert "ValueError: no judge today" in failed["reason"] and "(7 of 7)" in failed["reason"]
        mixed = backfilled(some)  # one target scored ok: a backfill that scored something is done
        assert (mixed["status"], mixed["done"], mixed["reason"]) == ("done", 7, None)
        engine.dispose()


@pytest.mark.slow
def test_a_session_level_backfill_scores_the_sessions_stored_before_the_rule_once_each(tmp_path: Path) -> None:
    with serving(tmp_path, "process", env=ENV) as (client, _proc):
        base = str(client.base_url)
        sent = _send_turns(base, {"conv-a": 3, "conv-b": 2})  # no rule yet: stored, routed, grouped in sessions
        wait_until(lambda: _routed(client, sent), 120, 0.1, what="the turns routed")
        code = "def evaluate(inputs, outputs, trace):\n    return {'score': 1.0, 'label': str(trace['num_traces'])}\n"
        ev = client.post("/v1/evaluators", json={"name": "s", "language": "python", "code": code}).json()["id"]
        rule = client.post("/v1/online-rules", json={"evaluator_id": ev, "target": {"level": "session", "quiet_s": 1}})
        rule_id = rule.json()["id"]
        url = f"/v1/online-rules/{rule_id}/backfill"
        dry = client.post(url, json={"dry_run": True}).json()
        assert (dry["targets"], dry["already_scored"]) == (2, 0)
        started = client.post(url, json={})
        assert started.status_code == 202 and started.json()["total"] == 2, started.text
        done = wait_until(lambda: _finished(client, rule_id, started.json()["id"]), 300, 0.1, what="the backfill")
        assert (done["total"], done["done"], done["skipped"]) == (2, 2, 0)
        scores = client.get(f"/v1/online-rules/{rule_id}/scores").json()["data"]
        assert sorted((s["target_id"], s["label"]) for s in scores) == [("conv-a#3", "3"), ("conv-b#2", "2")]
        session = client.get("/v1/sessions/conv-a").json()
        assert session["num_traces"] == 3 and [s["target_id"] for s in session["scores"]] == ["conv-a#3"]
        again = client.post(url, json={}).json()  # every session scored with the revision: skipped
        skipped = wait_until(lambda: _finished(client, rule_id, again["id"]), 120, 0.1, what="nothing to do")
        assert (skipped["total"], skipped["done"], skipped["skipped"]) == (0, 0, 2)
