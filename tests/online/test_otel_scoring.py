"""Done-when of online evaluation, end to end over real OTLP: an app instrumented with the
OpenTelemetry Python SDK exports to the real service (``evaluator-host serve``); rules with a
pinned-package Python evaluator, a JavaScript and a TypeScript one score its traces, visible in
``GET /v1/traces/{id}``, ``/scores`` and ``/stats``; and every trace the service accepted is scored
exactly once per rule across a SIGKILL of the service mid-stream."""

from __future__ import annotations

import functools
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
from evaluator_host.store.online.rows import OnlineScoreRow, OnlineTraceRow
from tests.support.service import serving
from tests.support.wait import wait_until

ENV = {
    "EVALUATOR_HOST_ONLINE_QUIET_PERIOD_S": "0.2",
    "EVALUATOR_HOST_ONLINE_ASSEMBLY_S": "0.05",
    "EVALUATOR_HOST_ONLINE_POLL_S": "0.05",
}
PY = (
    "import six\ndef evaluate(inputs, outputs, trace):\n"
    "    return {'score': 1.0 if outputs == '4' else 0.0, 'label': six.__version__}\n"
)
JS = "function evaluate(inputs, outputs, trace) {\n  return outputs === '4' ? 1 : 0;\n}\nmodule.exports = {evaluate};\n"
TS = "export function evaluate(inputs: any, outputs: string, trace: any): number {\n  return outputs.length;\n}\n"


class App:
    """A chat app instrumented with the OpenTelemetry SDK, exporting each span as it ends (OTLP/HTTP)."""

    def __init__(self, base: str) -> None:
        exporter = OTLPSpanExporter(endpoint=f"{base}/v1/traces", timeout=5)
        self.provider = TracerProvider(resource=Resource.create({"service.name": "chat-api"}))
        self.provider.add_span_processor(SimpleSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer("tests.online.app")

    def request(self, question: str = "2+2?", answer: str = "4") -> str:
        """One request's trace (a SERVER root with ag.data, an LLM CLIENT child); its hex id."""
        attributes = {"ag.data.inputs.question": question, "ag.data.outputs": answer}
        with self.tracer.start_as_current_span("chat", kind=SpanKind.SERVER, attributes=attributes) as root:
            with self.tracer.start_as_current_span(
                "llm", kind=SpanKind.CLIENT, attributes={"gen_ai.request.model": "m"}
            ):
                pass
            return format(root.get_span_context().trace_id, "032x")

    def close(self) -> None:
        self.provider.shutdown()


def _evaluator(client: httpx.Client, language: str, code: str, **body: Any) -> str:
    made = client.post("/v1/evaluators", json={"name": language, "language": language, "code": code, **body})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


@pytest.mark.slow
def test_an_instrumented_app_is_scored_by_python_javascript_and_typescript_rules(tmp_path: Path) -> None:
    with serving(tmp_path, "process", env=ENV) as (client, _proc):
        rules = {}
        for language, code, extra in (
            ("python", PY, {"packages": {"six": "1.16.0"}, "settings": {"timeout_s": 60}}),
            ("javascript", JS, {}),
            ("typescript", TS, {}),
        ):
            ev = _evaluator(client, language, code, **extra)
            rules[language] = client.post("/v1/online-rules", json={"evaluator_id": ev, "sampling_rate": 1.0}).json()[
                "id"
            ]
        app = App(str(client.base_url))
        sent = [app.request() for _ in range(3)]
        app.close()

        def done(trace_id: str) -> bool:
            scores = client.get(f"/v1/traces/{trace_id}").json().get("scores", [])
            return len([s for s in scores if s["state"] == "done"]) == 3

        for trace_id in sent:
            wait_until(functools.partial(done, trace_id), 180, 0.1, what=f"three scores of {trace_id}")
            found = client.get(f"/v1/traces/{trace_id}").json()
            by = {s["rule_id"]: s for s in found["scores"]}
            assert by[rules["python"]]["score"] == 1.0 and by[rules["python"]]["label"] == "1.16.0"
            assert by[rules["javascript"]]["score"] == 1.0 and by[rules["typescript"]]["score"] == 1.0
            assert found["inputs"] == {"question": "2+2?"} and found["outputs"] == "4"
            (root,) = found["trace"]["spans"].values()
            assert root["name"] == "chat" and [c["name"] for c in root["children"].values()] == ["llm"]
        for rule_id in rules.values():
            assert client.get(f"/v1/online-rules/{rule_id}/scores").json()["count"] == 3
            stats = client.get(f"/v1/online-rules/{rule_id}/stats").json()
            assert sum(b["count"] for b in stats["buckets"]) == 3


def _states(engine: Any) -> dict[str, int]:
    with engine.connect() as conn:
        query = select(OnlineScoreRow.state, func.count()).group_by(OnlineScoreRow.state)
        return {state: int(n) for state, n in conn.execute(query)}


@pytest.mark.slow
def test_every_accepted_trace_is_scored_exactly_once_across_a_sigkill(tmp_path: Path) -> None:
    slowish = "import time\ndef evaluate(inputs, outputs, trace):\n    time.sleep(0.05)\n    return 1.0\n"
    # a trace the kill cut before its root was exported is made ready by the trace timeout
    env = {**ENV, "EVALUATOR_HOST_ONLINE_SCORING_BATCH": "8", "EVALUATOR_HOST_ONLINE_TRACE_TIMEOUT_S": "1"}
    stop = threading.Event()
    with serving(tmp_path, "process", env=env) as (client, proc):
        rules = [
            client.post("/v1/online-rules", json={"evaluator_id": _evaluator(client, "python", slowish)}).json()["id"]
            for _ in range(2)
        ]
        engine = make_engine(f"sqlite:///{tmp_path / 'evaluator-host.db'}")
        app = App(str(client.base_url))

        def stream() -> None:
            for _ in range(400):
                if stop.is_set():
                    return
                app.request()

        sender = threading.Thread(target=stream, daemon=True)
        sender.start()
        wait_until(
            lambda: _states(engine).get("done", 0) >= 20 and _states(engine).get("running", 0) > 0,
            120,
            0.02,
            what="scores done and running",
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        at_kill = _states(engine)
        stop.set()
        sender.join(timeout=60)
        app.close()
    assert at_kill.get("running", 0) > 0

    with serving(tmp_path, "process", env=env) as (client, _proc):
        with engine.connect() as conn:
            accepted_roots = conn.scalar(select(func.count()).select_from(OnlineTraceRow)) or 0

        def all_scored() -> bool:
            with engine.connect() as conn:
                routed = conn.scalar(select(func.count()).where(OnlineTraceRow.state == "routed")) or 0
            return routed == accepted_roots and _states(engine) == {"done": 2 * accepted_roots}

        wait_until(all_scored, 180, 0.2, what="every accepted trace scored")
        with engine.connect() as conn:
            rows = conn.execute(select(OnlineScoreRow.rule_id, OnlineScoreRow.trace_id, OnlineScoreRow.attempts)).all()
            traces = [t for (t,) in conn.execute(select(OnlineTraceRow.trace_id))]
        assert sorted((r, t) for r, t, _ in rows) == sorted((r, t) for r in rules for t in traces)
        assert max(a for _, _, a in rows) >= 2  # the rows the killed service held were claimed again
    engine.dispose()
