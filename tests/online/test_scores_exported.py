"""A stored online score goes back to a real OTLP receiver as a ``gen_ai.evaluation.result`` span in
the evaluated trace, parented to the evaluated span (the rule's filter picked the child span)."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from tests.support.online import chat_trace, score_rows
from tests.support.otlp import collector
from tests.support.service import make_settings
from tests.support.wait import wait_until

CODE = "def evaluate(inputs, outputs, trace):\n    return {'score': 0.9, 'label': 'good'}\n"


def test_a_score_is_exported_next_to_the_evaluated_span(tmp_path: Path) -> None:
    with collector() as got:
        settings = make_settings(tmp_path, backend="process", online_poll_s=0.05, online_export_endpoint=got.endpoint)
        with TestClient(create_app(settings)) as client:
            ev = client.post("/v1/evaluators", json={"name": "e", "language": "python", "code": CODE}).json()
            body = {"evaluator_id": ev["id"], "name": "quality", "filter": {"span_name": "llm"}}
            rule = client.post("/v1/online-rules", json=body).json()
            engine = client.app.state.services.store.engine  # type: ignore[attr-defined]
            trace_id = chat_trace(engine)
            wait_until(lambda: [r.state for r in score_rows(engine)] == ["done"], 60, 0.05)
            (row,) = score_rows(engine)
            spans = got.wait_for(lambda spans: any(s.trace_id == trace_id for s in spans), timeout=30)
    (sent,) = [s for s in spans if s.trace_id == trace_id]
    assert sent.name == "evaluation quality" and sent.parent_span_id == row.span_id
    assert "gen_ai.evaluation.result" in sent.events
    assert sent.attributes["gen_ai.evaluation.score.value"] == 0.9
    assert sent.attributes["evaluator_host.rule_id"] == rule["id"]
