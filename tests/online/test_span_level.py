"""Span-level rules and try-before-live end to end (issue 50), over real OTLP: an agent instrumented with
the OpenTelemetry SDK (OpenInference attributes) exports to the real service (``evaluator-host serve``)
on each backend. A span-level rule filtered on ``openinference.span.kind=LLM`` scores each of the 3 LLM
calls of every trace exactly once — each score names its span, the evaluator got that span's
inputs/outputs and the whole trace — while a trace-level rule beside it scores each trace once, as
before. ``POST /v1/online-rules/test`` scores a rule body on the stored traces and stores nothing; a
body nothing matches answers ``matched: 0`` with a message; a session-level rule is made with its
default ``quiet_s``."""

from __future__ import annotations

import functools
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
from tests.support.service import serving
from tests.support.wait import wait_until

ENV = {
    "EVALUATOR_HOST_ONLINE_QUIET_PERIOD_S": "0.2",
    "EVALUATOR_HOST_ONLINE_ASSEMBLY_S": "0.05",
    "EVALUATOR_HOST_ONLINE_POLL_S": "0.05",
}
# the label shows what the evaluator got: the case's inputs and outputs, and how many spans its trace has
EVALUATOR = (
    "def evaluate(inputs, outputs, trace):\n"
    "    def walk(spans):\n"
    "        for s in spans.values():\n"
    "            yield s\n"
    "            yield from walk(s.get('children') or {})\n"
    "    n = len(list(walk(trace['spans'])))\n"
    "    return {'score': 1.0, 'passed': True, 'label': f'{inputs}|{outputs}|{n}', 'reason': 'seen'}\n"
)
LLM = {"attributes": [{"key": "openinference.span.kind", "equals": "LLM"}]}


class Agent:
    """An agent instrumented with the OpenTelemetry SDK (OpenInference attributes), exporting each span
    as it ends (OTLP/HTTP protobuf)."""

    def __init__(self, base: str) -> None:
        exporter = OTLPSpanExporter(endpoint=f"{base}/v1/traces", timeout=10)
        self.provider = TracerProvider(resource=Resource.create({"service.name": "agent"}))
        self.provider.add_span_processor(SimpleSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer("tests.online.agent")

    def run(self, task: str) -> tuple[str, dict[str, tuple[str, str]]]:
        """One agent run: a root AGENT span, 3 LLM calls and a tool call; (trace id, LLM span id -> (in, out))."""
        llm: dict[str, tuple[str, str]] = {}
        root_attributes = {"openinference.span.kind": "AGENT", "input.value": task, "output.value": "done"}
        with self.tracer.start_as_current_span("agent", kind=SpanKind.SERVER, attributes=root_attributes) as root:
            for i in range(3):
                question, answer = f"{task}-q{i}", f"{task}-a{i}"
                attributes = {"openinference.span.kind": "LLM", "input.value": question, "output.value": answer}
                with self.tracer.start_as_current_span("llm", kind=SpanKind.CLIENT, attributes=attributes) as call:
                    llm[format(call.get_span_context().span_id, "016x")] = (question, answer)
            with self.tracer.start_as_current_span("tool", attributes={"openinference.span.kind": "TOOL"}):
                pass
            return format(root.get_span_context().trace_id, "032x"), llm

    def close(self) -> None:
        self.provider.shutdown()


def _rows(engine: Any) -> int:
    with engine.connect() as conn:
        return int(conn.scalar(select(func.count()).select_from(OnlineScoreRow)) or 0)


def _done(client: httpx.Client, trace_id: str, n: int) -> bool:
    scores = client.get(f"/v1/traces/{trace_id}").json().get("scores", [])
    return len([s for s in scores if s["state"] == "done"]) == n


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_span_level_rule_scores_each_llm_call_once_and_a_trial_stores_nothing(tmp_path: Path, backend: str) -> None:
    with serving(tmp_path, backend, env=ENV) as (client, _proc):
        made = client.post("/v1/evaluators", json={"name": "llm-calls", "language": "python", "code": EVALUATOR})
        assert made.status_code == 201, made.text
        ev = made.json()["id"]
        span_rule = client.post(
            "/v1/online-rules", json={"evaluator_id": ev, "filter": LLM, "target": {"level": "span"}}
        ).json()
        trace_rule = client.post("/v1/online-rules", json={"evaluator_id": ev}).json()
        assert span_rule["target"] == {"level": "span"} and trace_rule["target"] == {"level": "trace"}
        session = client.post("/v1/online-rules", json={"evaluator_id": ev, "target": {"level": "session"}})
        assert session.status_code == 201 and session.json()["target"] == {"level": "session", "quiet_s": 300}
        client.delete(f"/v1/online-rules/{session.json()['id']}")  # these agent traces name no session

        agent = Agent(str(client.base_url))
        runs = [agent.run(task) for task in ("t1", "t2")]
        agent.close()
        for trace_id, _ in runs:
            wait_until(functools.partial(_done, client, trace_id, 4), 300, 0.1, what=f"4 scores of {trace_id}")

        engine = make_engine(f"sqlite:///{tmp_path / 'evaluator-host.db'}")
        stored = _rows(engine)
        assert stored == 8  # exactly once per (rule, target): 3 LLM spans + 1 trace, per trace
        page = client.get(f"/v1/online-rules/{span_rule['id']}/scores").json()
        assert page["count"] == 6
        for trace_id, llm in runs:
            mine = [s for s in page["data"] if s["trace_id"] == trace_id]
            assert sorted(s["span_id"] for s in mine) == sorted(llm)
            for s in mine:
                question, answer = llm[s["span_id"]]
                assert s["target_id"] == f"{trace_id}/{s['span_id']}"
                assert (s["state"], s["status"], s["label"]) == ("done", "ok", f"{question}|{answer}|5")
        traced = client.get(f"/v1/online-rules/{trace_rule['id']}/scores").json()
        assert traced["count"] == 2 and {s["label"] for s in traced["data"]} == {"t1|done|5", "t2|done|5"}
        assert {s["target_id"] for s in traced["data"]} == {t for t, _ in runs}

        trial = client.post(
            "/v1/online-rules/test",
            json={"evaluator_id": ev, "filter": LLM, "target": {"level": "span"}, "limit": 4},
        )
        assert trial.status_code == 200, trial.text
        answer = trial.json()
        assert answer["matched"] == 4 and len(answer["results"]) == 4 and answer["message"] is None
        newest_trace, newest_llm = runs[-1]
        for result in answer["results"]:
            assert result["status"] == "ok" and result["passed"] is True and result["reason"] == "seen"
            if result["trace_id"] == newest_trace:  # the newest trace first: its 3 LLM calls
                assert (result["inputs"], result["outputs"]) == newest_llm[result["span_id"]]
        assert [r["trace_id"] for r in answer["results"]][:3] == [newest_trace] * 3
        nothing = client.post(
            "/v1/online-rules/test", json={"evaluator_id": ev, "filter": {"span_name": "no-such-span"}}
        ).json()
        assert nothing["matched"] == 0 and nothing["results"] == []
        assert nothing["scanned_traces"] == 2 and "nothing matched" in nothing["message"]
        assert _rows(engine) == stored  # the trials stored nothing
        assert client.get("/healthz").status_code == 200
        engine.dispose()
