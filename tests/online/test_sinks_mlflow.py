"""Score sinks (issue 52) into a REAL MLflow 3 tracking server (``mlflow`` from PyPI in a throwaway venv,
SQLite, on loopback: tests/support/mlflow_server.py): the app exports to evaluator-host only; its spans
reach MLflow's OTLP endpoint through forwarding (``x-mlflow-experiment-id``); each score is written as a
trace assessment (feedback, source CODE, the reason as rationale; a span-level score names its span) and
read back from MLflow's REST API; delivered again (the rows reset, as after a crash between the write and
its record), MLflow still holds one assessment each (MLflow has no idempotency key: the delivery key in
the assessment's metadata is looked up first)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.mlflow_server import mlflow_server
from tests.support.online import forget_deliveries
from tests.support.service import serving
from tests.support.sink_app import App, forwarding_env, settled, trace_and_span_rules
from tests.support.wait import wait_until

EVAL = (
    "def evaluate(inputs, outputs, trace):\n"
    "    return {'score': 1.0 if outputs == '4' else 0.0, 'reason': f'said {outputs}'}\n"
)
SPAN_EVAL = "def evaluate(inputs, outputs, trace):\n    return {'passed': True}\n"


def _assessments(mlflow: str, trace_id: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{mlflow}/api/3.0/mlflow/traces/tr-{trace_id}", timeout=30)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["trace"]["trace_info"].get("assessments") or [])


@pytest.mark.slow
def test_scores_appear_as_mlflow_assessments_on_the_forwarded_traces(tmp_path: Path) -> None:
    with mlflow_server(tmp_path / "mlflow") as mlflow:
        port = mlflow.rsplit(":", 1)[1]
        env = forwarding_env(
            f"{mlflow}/v1/traces", "mlflow.test", EVALUATOR_HOST_OTLP_FORWARD_HEADERS="x-mlflow-experiment-id=0"
        )
        data = tmp_path / "service"
        with serving(data, "process", env=env) as (client, _proc):
            sink = {"type": "mlflow", "url": f"http://mlflow.test:{port}"}
            trace_rule, span_rule = trace_and_span_rules(client, sink, EVAL, SPAN_EVAL)
            app = App(str(client.base_url))
            sent = [app.request(answer) for answer in ("4", "5")]
            app.provider.shutdown()
            by_trace = {s["trace_id"]: s for s in settled(client, trace_rule["id"], 2)}
            settled(client, span_rule["id"], 2)
            first: dict[str, list[str]] = {}
            for trace_id, _root, llm in sent:
                score = by_trace[trace_id]
                assert score["sinks"][0]["state"] == "delivered", score["sinks"]
                found = _assessments(mlflow, trace_id)
                first[trace_id] = sorted(a["assessment_id"] for a in found)
                (facts,) = [a for a in found if a["assessment_name"] == "facts"]
                assert facts["source"] == {"source_type": "CODE", "source_id": "evaluator-host"}
                assert facts["feedback"]["value"] == score["score"]
                assert facts["rationale"] == score["result"]["reason"]
                assert facts["metadata"]["rule_id"] == trace_rule["id"] and "span_id" not in facts
                (on_llm,) = [a for a in found if a["assessment_name"] == "llm-ok"]
                assert on_llm["span_id"] == llm and on_llm["feedback"]["value"] is True

            forget_deliveries(data)  # as if the service died between MLflow's answer and its record

            def resent() -> bool:
                scores = client.get(f"/v1/online-rules/{trace_rule['id']}/scores").json()["data"]
                return all(s["sinks"][0]["state"] == "delivered" and s["sinks"][0]["attempts"] >= 2 for s in scores)

            wait_until(resent, 60, 0.2, what="the deliveries sent again")
            for trace_id, _root, _llm in sent:
                assert sorted(a["assessment_id"] for a in _assessments(mlflow, trace_id)) == first[trace_id]
