"""A rule's sinks (sinks/models.py) and the requests that write a score into each tool (sinks/requests.py):
credentials are secret references only; each result kind becomes the tool's own value type; a failed
evaluation or a valueless result is skipped, never written as a zero; a retry's back-off (sinks/delivery.py)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from evaluator_host.settings import Settings
from evaluator_host.sinks.delivery import backoff_s
from evaluator_host.sinks.models import Sink
from evaluator_host.sinks.requests import Skip, build, recorded, secret_names
from evaluator_host.store.online.rules import RuleRecord
from evaluator_host.store.sinks.deliveries import Delivery, delivery_key

NOW = datetime(2026, 11, 25, tzinfo=UTC)
T, ROOT, LLM = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "b7ad6b7169203331"
LANGFUSE = {"type": "langfuse", "url": "http://lf.test", "public_key": "pk-1", "secret_key": "{{secret:LF_SK}}"}


def _delivery(sink: dict[str, Any], level: str = "trace", **score: Any) -> Delivery:
    rule = RuleRecord("rule_1", "ws", "facts", "ev_1", None, {}, 1.0, None, True, NOW, NOW, None,
                      {"level": level}, sinks=[sink])  # fmt: skip
    fields: dict[str, Any] = {"status": "ok", "score": None, "passed": None, "label": None, "result": {"reason": "why"}}
    fields.update(score)
    target = T if level == "trace" else f"{T}/{LLM}"
    return Delivery(
        "rule_1", target, 0, "ws", delivery_key("rule_1", target, 3), 1, rule, T, ROOT if level == "trace" else LLM,
        ROOT, fields["status"], fields["score"], fields["passed"], fields["label"], 3, "python-abc", "ev_1",
        fields["result"],
    )  # fmt: skip


@pytest.mark.parametrize(
    "sink",
    [
        {**LANGFUSE, "secret_key": "sk-lf-literal"},  # a literal secret would be stored and shown
        {"type": "langfuse", "url": "http://lf.test", "public_key": "pk"},  # no secret key
        {"type": "phoenix", "url": "http://phx.test", "api_key": "literal"},
        {"type": "phoenix", "url": "http://phx.test", **{k: LANGFUSE[k] for k in ("public_key", "secret_key")}},
        {"type": "phoenix", "url": "ftp://phx.test"},
        {"type": "phoenix", "url": "http://user:pw@phx.test"},
        {"type": "phoenix", "url": "http://phx.test", "headers": {"Authorization": "x"}},
        {"type": "zipkin", "url": "http://z.test"},
    ],
)
def test_a_sink_refuses_literal_credentials_and_shapes_it_cannot_send(sink: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Sink.model_validate(sink)


def test_the_delivery_key_is_one_per_rule_target_and_revision() -> None:
    assert delivery_key("r", "t", 1) == delivery_key("r", "t", 1)
    assert len({delivery_key("r", "t", 1), delivery_key("r", "t", 2), delivery_key("r", "u", 1)}) == 3


def test_langfuse_types_a_number_a_boolean_and_a_label_as_its_own_data_types() -> None:
    secrets = {"LF_SK": "sk-lf-9"}
    assert secret_names(LANGFUSE) == ["LF_SK"]
    numeric = build(_delivery(LANGFUSE, score=0.5), secrets)
    assert numeric.url == "http://lf.test/api/public/scores"
    assert numeric.headers["Authorization"] == "Basic " + base64.b64encode(b"pk-1:sk-lf-9").decode()
    assert {k: numeric.body[k] for k in ("traceId", "name", "value", "dataType", "comment")} == {
        "traceId": T, "name": "facts", "value": 0.5, "dataType": "NUMERIC", "comment": "why"
    }  # fmt: skip
    assert numeric.body["id"] == delivery_key("rule_1", T, 3) and "observationId" not in numeric.body
    boolean = build(_delivery(LANGFUSE, "span", passed=False), secrets).body
    assert (boolean["value"], boolean["dataType"], boolean["observationId"]) == (0, "BOOLEAN", LLM)
    label = build(_delivery(LANGFUSE, label="relevant"), secrets).body
    assert (label["value"], label["dataType"]) == ("relevant", "CATEGORICAL")


def test_phoenix_annotates_the_root_span_of_a_trace_score_and_the_span_of_a_span_score() -> None:
    sink = {"type": "phoenix", "url": "http://phx.test/", "name": "fact check"}
    out = build(_delivery(sink, score=1.0, passed=True), {})
    assert out.url == "http://phx.test/v1/span_annotations?sync=true"
    (annotation,) = out.body["data"]
    assert annotation["span_id"] == ROOT and annotation["annotator_kind"] == "CODE"
    assert annotation["result"] == {"score": 1.0, "label": "pass", "explanation": "why"}
    assert annotation["name"] == "fact check" and annotation["identifier"] == delivery_key("rule_1", T, 3)
    assert build(_delivery(sink, "span", score=0.0), {}).body["data"][0]["span_id"] == LLM


def test_mlflow_writes_feedback_from_code_and_finds_its_own_assessment_by_key() -> None:
    sink = {"type": "mlflow", "url": "http://mlflow.test", "api_key": "{{secret:MLF}}"}
    out = build(_delivery(sink, "span", passed=True), {"MLF": "tok"})
    assert out.url == f"http://mlflow.test/api/3.0/mlflow/traces/tr-{T}/assessments"
    assert out.recorded == f"http://mlflow.test/api/3.0/mlflow/traces/tr-{T}"
    assessment = out.body["assessment"]
    assert assessment["source"] == {"source_type": "CODE", "source_id": "evaluator-host"}
    assert (assessment["feedback"], assessment["span_id"], assessment["rationale"]) == ({"value": True}, LLM, "why")
    key = assessment["metadata"]["evaluator_host.key"]
    held = {"trace": {"trace_info": {"assessments": [{"metadata": {"evaluator_host.key": key}}]}}}
    assert recorded(held, key) and not recorded(held, "evh-other") and not recorded({}, key)
    assert out.headers["Authorization"] == "Bearer tok"


@pytest.mark.parametrize("kind", ["phoenix", "langfuse", "mlflow"])
def test_a_failed_or_valueless_result_is_skipped_never_written_as_a_value(kind: str) -> None:
    sink = LANGFUSE if kind == "langfuse" else {"type": kind, "url": "http://x.test"}
    with pytest.raises(Skip, match="ended error"):
        build(_delivery(sink, status="error", score=None), {"LF_SK": "s"})
    with pytest.raises(Skip, match="no score"):
        build(_delivery(sink, result={}), {"LF_SK": "s"})


def test_a_sink_retry_waits_sink_retry_s_doubling_to_five_minutes_jittered() -> None:
    assert all(1.0 <= backoff_s(1) <= 2.0 and 4.0 <= backoff_s(3) <= 8.0 for _ in range(50))  # the default: 2 s
    assert all(0.125 <= backoff_s(1, 0.25) <= 0.25 and 0.5 <= backoff_s(3, 0.25) <= 1.0 for _ in range(50))
    assert all(150.0 <= backoff_s(n) <= 300.0 for n in (9, 10, 20))  # capped at 5 min
    assert Settings().sink_retry_s == 2.0
    for wrong in (0, 0.01, 301):
        with pytest.raises(ValidationError):
            Settings(sink_retry_s=wrong)
