"""Session-level rules end to end (issue 50), over real OTLP from the OpenTelemetry SDK to the real service
(``evaluator-host serve``) on each backend:

* a chat app's turns carry ``session.id`` (GenAI message attributes); a session-level rule with
  ``quiet_s`` 1 scores each conversation once it is quiet, with the session dict (``messages`` the whole
  conversation in order, ``num_traces``, ``traces``), ``inputs`` the first turn's and ``outputs`` the last
  turn's; a turn arriving after the score scores the session again: the new score is current, the
  earlier one superseded, and the stats count current scores only; ``GET /v1/sessions`` lists the
  sessions and ``GET /v1/sessions/{id}`` shows one with its scores; a trial at session level scores the
  stored sessions and stores nothing;
* a multi-turn chat app made with the ``openai`` SDK and instrumented with OpenInference
  (``openinference-instrumentation-openai``, ``using_session``), talking to a loopback OpenAI-compatible
  server, gets its sessions scored by a Python evaluator that reads ``trace["messages"]``;
* exactly once per (rule, session, generation) across a SIGKILL of the service.
"""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind
from sqlalchemy import func, select

from evaluator_host.store.db import make_engine
from evaluator_host.store.online.rows import OnlineScoreRow
from tests.support.backends import BACKENDS
from tests.support.llm_server import llm_server
from tests.support.online import hex_id, put_trace, score_rows, span
from tests.support.service import serving
from tests.support.wait import wait_until

ENV = {
    "EVALUATOR_HOST_ONLINE_QUIET_PERIOD_S": "0.2",
    "EVALUATOR_HOST_ONLINE_ASSEMBLY_S": "0.05",
    "EVALUATOR_HOST_ONLINE_POLL_S": "0.05",
}
# what the evaluator got: the conversation's roles and texts, the number of traces, first inputs, last outputs
EVALUATOR = (
    "def evaluate(inputs, outputs, trace):\n"
    "    said = [f\"{m['role']}:{m['content']}\" for m in trace['messages']]\n"
    "    first = inputs.get('prompt') if isinstance(inputs, dict) else inputs\n"
    "    ok = len(trace['traces']) == trace['num_traces'] and trace['duration_ms'] >= 0\n"
    "    return {'score': float(trace['num_traces']), 'passed': ok, 'label': '|'.join(said),\n"
    "            'reason': f\"{trace['session_id']}:{first}->{outputs}\"}\n"
)


class ChatApp:
    """A chat app instrumented with the OpenTelemetry SDK (GenAI attributes), one trace per turn, each
    turn's root carrying ``session.id``; exports each span as it ends (OTLP/HTTP protobuf)."""

    def __init__(self, base: str) -> None:
        exporter = OTLPSpanExporter(endpoint=f"{base}/v1/traces", timeout=10)
        self.provider = TracerProvider(resource=Resource.create({"service.name": "chat"}))
        self.provider.add_span_processor(SimpleSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer("tests.online.chat")

    def turn(self, session_id: str, question: str) -> str:
        """One turn: a SERVER span with ``session.id`` and a ``chat`` CLIENT child with the messages."""
        answer = f"re:{question}"
        with self.tracer.start_as_current_span("turn", kind=SpanKind.SERVER, attributes={"session.id": session_id}):
            attributes = {
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps([{"role": "user", "content": question}]),
                "gen_ai.output.messages": json.dumps([{"role": "assistant", "content": answer}]),
            }
            with self.tracer.start_as_current_span("chat", kind=SpanKind.CLIENT, attributes=attributes) as call:
                return format(call.get_span_context().trace_id, "032x")

    def close(self) -> None:
        self.provider.shutdown()


def _scores(client: httpx.Client, rule_id: str) -> list[dict[str, Any]]:
    return list(client.get(f"/v1/online-rules/{rule_id}/scores").json()["data"])


def _current(client: httpx.Client, rule_id: str, session_id: str, generation: int) -> dict[str, Any] | None:
    for s in _scores(client, rule_id):
        if s["session_id"] == session_id and s["state"] == "done" and s["current"] and s["generation"] == generation:
            return s
    return None


def _evaluator(client: httpx.Client, code: str = EVALUATOR) -> str:
    made = client.post("/v1/evaluators", json={"name": "conversation", "language": "python", "code": code})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_session_level_rule_scores_each_quiet_conversation_and_again_when_it_grows(
    tmp_path: Path, backend: str
) -> None:
    with serving(tmp_path, backend, env=ENV) as (client, _proc):
        ev = _evaluator(client)
        target = {"level": "session", "quiet_s": 1}
        made = client.post("/v1/online-rules", json={"evaluator_id": ev, "target": target})
        assert made.status_code == 201 and made.json()["target"] == target, made.text
        rule_id = made.json()["id"]

        app = ChatApp(str(client.base_url))
        app.turn("conv-a", "hello")
        app.turn("conv-a", "what is 2+2?")
        app.turn("conv-b", "bonjour")
        wait_until(lambda: _current(client, rule_id, "conv-a", 2) is not None, 300, 0.1, what="conv-a scored")
        wait_until(lambda: _current(client, rule_id, "conv-b", 1) is not None, 300, 0.1, what="conv-b scored")
        a = _current(client, rule_id, "conv-a", 2)
        assert a is not None and a["status"] == "ok" and a["passed"] is True and a["score"] == 2.0
        assert a["label"] == "user:hello|assistant:re:hello|user:what is 2+2?|assistant:re:what is 2+2?"
        assert a["result"]["reason"] == "conv-a:hello->re:what is 2+2?"  # inputs: the first turn's, outputs: the last's
        assert a["target_id"] == "conv-a#2" and a["span_id"] is None and a["superseded_by"] is None

        app.turn("conv-a", "thanks")  # after the score: the session is scored again once quiet
        wait_until(lambda: _current(client, rule_id, "conv-a", 3) is not None, 300, 0.1, what="conv-a again")
        app.close()
        again = _current(client, rule_id, "conv-a", 3)
        assert (
            again is not None and again["score"] == 3.0 and again["label"].endswith("user:thanks|assistant:re:thanks")
        )
        of_a = [s for s in _scores(client, rule_id) if s["session_id"] == "conv-a" and s["state"] == "done"]
        superseded = [s for s in of_a if not s["current"]]
        assert superseded and all(s["superseded_by"] == "conv-a#3" for s in superseded)
        assert [s for s in of_a if s["current"]] == [again]

        stats = client.get(f"/v1/online-rules/{rule_id}/stats", params={"bucket": 3600}).json()
        assert sum(b["count"] for b in stats["buckets"]) == 2  # conv-a's current score and conv-b's
        assert sum(b["mean_score"] or 0 for b in stats["buckets"]) == 2.0  # (3 + 1) / 2

        listed = client.get("/v1/sessions", params={"limit": 1}).json()
        assert listed["count"] == 1 and listed["next_cursor"]
        rest = client.get("/v1/sessions", params={"limit": 5, "cursor": listed["next_cursor"]}).json()
        assert {s["session_id"]: s["num_traces"] for s in listed["data"] + rest["data"]} == {"conv-a": 3, "conv-b": 1}
        detail = client.get("/v1/sessions/conv-a").json()
        assert detail["num_traces"] == 3 and len(detail["traces"]) == 3
        assert [m["content"] for m in detail["messages"] if m["role"] == "user"] == ["hello", "what is 2+2?", "thanks"]
        assert detail["outputs"] == "re:thanks" and {s["target_id"] for s in detail["scores"]} >= {"conv-a#3"}
        assert client.get("/v1/sessions/no-such-session").status_code == 404

        engine = make_engine(f"sqlite:///{tmp_path / 'evaluator-host.db'}")
        stored = len(score_rows(engine))
        trial = client.post("/v1/online-rules/test", json={"evaluator_id": ev, "target": {"level": "session"}})
        assert trial.status_code == 200, trial.text
        results = {r["session_id"]: r for r in trial.json()["results"]}
        assert set(results) == {"conv-a", "conv-b"} and results["conv-a"]["score"] == 3.0
        assert results["conv-a"]["outputs"] == "re:thanks" and results["conv-b"]["inputs"]["prompt"] == "bonjour"
        assert len(score_rows(engine)) == stored  # the trial stored nothing
        assert client.get("/healthz").status_code == 200
        engine.dispose()


OI_EVALUATOR = (
    "def evaluate(inputs, outputs, trace):\n"
    "    msgs = trace['messages']\n"
    "    users = [m['content'] for m in msgs if m['role'] == 'user']\n"
    "    answers = [m['content'] for m in msgs if m['role'] == 'assistant']\n"
    "    # the loopback model answers 'A: <question>': every question answered, in order, once\n"
    "    right = answers == [f'A: {q}' for q in users]\n"
    "    return {'score': float(len(users)), 'passed': right, 'label': ' / '.join(users)}\n"
)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_an_openinference_chat_app_gets_its_sessions_scored_from_its_messages(tmp_path: Path, backend: str) -> None:
    import openai
    from openinference.instrumentation import using_session
    from openinference.instrumentation.openai import OpenAIInstrumentor

    conversations = {"user-1": ["hi", "what is the capital of France?", "thanks"], "user-2": ["2+2?", "and 3+3?"]}
    with serving(tmp_path, backend, env=ENV) as (client, _proc), llm_server() as model:
        ev = _evaluator(client, OI_EVALUATOR)
        rule_id = client.post(
            "/v1/online-rules", json={"evaluator_id": ev, "target": {"level": "session", "quiet_s": 1}}
        ).json()["id"]
        exporter = OTLPSpanExporter(endpoint=f"{client.base_url}/v1/traces", timeout=10)
        provider = TracerProvider(resource=Resource.create({"service.name": "oi-chat"}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        try:
            llm = openai.OpenAI(base_url=f"http://127.0.0.1:{model.port}/v1", api_key="sk-test")
            for session_id, questions in conversations.items():
                history: list[dict[str, str]] = [{"role": "system", "content": "You are brief."}]
                for question in questions:  # the app sends the whole conversation each turn
                    history.append({"role": "user", "content": question})
                    with using_session(session_id):
                        answer = llm.chat.completions.create(model="gpt-test", messages=history)  # type: ignore[arg-type]
                    history.append({"role": "assistant", "content": answer.choices[0].message.content or ""})
        finally:
            instrumentor.uninstrument()
            provider.shutdown()
        for session_id, questions in conversations.items():
            wait_until(
                lambda: _current(client, rule_id, session_id, len(questions)) is not None,  # noqa: B023
                300,
                0.1,
                what=f"{session_id} scored",
            )
            got = _current(client, rule_id, session_id, len(questions))
            assert got is not None and got["status"] == "ok", got
            assert (got["score"], got["passed"], got["label"]) == (float(len(questions)), True, " / ".join(questions))
        detail = client.get("/v1/sessions/user-1").json()
        assert [m["role"] for m in detail["messages"]] == ["system"] + ["user", "assistant"] * 3


SLOWISH = "import time\ndef evaluate(inputs, outputs, trace):\n    time.sleep(0.1)\n    return 1.0\n"
SESSIONS = 60


def _states(engine: Any) -> dict[str, int]:
    with engine.connect() as conn:
        query = select(OnlineScoreRow.state, func.count()).group_by(OnlineScoreRow.state)
        return {state: int(n) for state, n in conn.execute(query)}


def _turn(engine: Any, session_id: str) -> None:
    trace_id = hex_id(16)
    root = span(trace_id, "turn", attributes={"session.id": session_id, "ag.data.inputs": {"q": session_id}})
    put_trace(engine, [root])


@pytest.mark.slow
def test_every_session_generation_is_scored_exactly_once_across_a_sigkill(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = {"EVALUATOR_HOST_ONLINE_POLL_S": "0.05", "EVALUATOR_HOST_ONLINE_SCORING_BATCH": "4"}
    with serving(data_dir, "process", env=env) as (client, proc):
        ev = _evaluator(client, SLOWISH)
        target = {"level": "session", "quiet_s": 1}
        rule_id = client.post("/v1/online-rules", json={"evaluator_id": ev, "target": target}).json()["id"]
        engine = make_engine(f"sqlite:///{data_dir / 'evaluator-host.db'}")
        for i in range(SESSIONS):
            _turn(engine, f"s-{i}")
        wait_until(
            lambda: _states(engine).get("done", 0) >= 5 and _states(engine).get("running", 0) > 0,
            120,
            0.02,
            what="session scores done and running",
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        at_kill = _states(engine)
        grown = threading.Thread(target=lambda: [_turn(engine, f"s-{i}") for i in range(0, SESSIONS, 3)])
        grown.start()  # a second turn for every third session while the service is down
        grown.join(60)
    assert at_kill.get("running", 0) > 0

    with serving(data_dir, "process", env=env) as (client, _proc):

        def all_current() -> bool:
            rows = [r for r in score_rows(engine) if r.state == "done" and r.superseded_by is None]
            want = {f"s-{i}": 2 if i % 3 == 0 else 1 for i in range(SESSIONS)}
            return {r.session_id: r.generation for r in rows} == want and len(rows) == SESSIONS

        wait_until(all_current, 300, 0.1, what="every session's last generation scored")
        rows = score_rows(engine)
        assert len({(r.rule_id, r.target_id) for r in rows}) == len(rows)  # never a second row
        assert {r.state for r in rows} == {"done"} and all(r.status == "ok" for r in rows)
        assert all(r.target_id == f"{r.session_id}#{r.generation}" for r in rows)
        assert max(r.attempts for r in rows) >= 2  # the rows the killed service held were scored again
        current = [r for r in rows if r.superseded_by is None]
        assert len(current) == SESSIONS and all(r.rule_id == rule_id for r in rows)
        stats = client.get(f"/v1/online-rules/{rule_id}/stats", params={"bucket": 3600}).json()
        assert sum(b["count"] for b in stats["buckets"]) == SESSIONS
    engine.dispose()
