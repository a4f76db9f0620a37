"""online/scoring/export.py against a real OTLP/HTTP receiver on loopback (tests/support/otlp.py): each score
arrives as a span of the evaluated trace, parented to the evaluated span, carrying the
gen_ai.evaluation.result event and the same attributes; failures, a missing span id, bad ids, the
configured headers, a dead endpoint, and no endpoint at all (a no-op)."""

from __future__ import annotations

import socket
from typing import Any

from opentelemetry import trace as otel_trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from evaluator_host.online.scoring.export import EVENT_NAME, ScoreExporter
from evaluator_host.settings import Settings
from tests.support.otlp import Collector, collector

T = "4bf92f3577b34da6a3ce929d0e0e4736"
LLM = "b7ad6b7169203331"
RULE = {"id": "rule_1", "name": "helpfulness", "evaluator_id": "ev_1"}
OK = {
    "status": "ok",
    "score": 0.8,
    "passed": True,
    "label": None,
    "reason": "Answers the question, briefly.",
    "duration_ms": 12.5,
    "revision": 3,
    "evaluator_id": "ev_1",
}


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


def _spans(got: Collector) -> list[dict[str, Any]]:
    """Every span the collector received, with its events' attributes (Received keeps names only)."""
    out = []
    with got.lock:
        bodies = list(got.bodies)
    for body in bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for rs in request.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    out.append(
                        {
                            "name": s.name,
                            "trace_id": s.trace_id.hex(),
                            "parent": s.parent_span_id.hex(),
                            "status": s.status.code,
                            "attributes": {a.key: _value(a.value) for a in s.attributes},
                            "events": [(e.name, {a.key: _value(a.value) for a in e.attributes}) for e in s.events],
                            "duration_ns": s.end_time_unix_nano - s.start_time_unix_nano,
                            "scope": ss.scope.name,
                            "resource": resource,
                        }
                    )
    return out


def test_a_score_arrives_as_an_evaluation_span_parented_to_the_evaluated_span() -> None:
    with collector() as got:
        exporter = ScoreExporter(Settings(online_export_endpoint=got.endpoint, online_export_headers="x-team=evals"))
        assert exporter.enabled
        exporter.export(T, LLM, RULE, OK)
        exporter.export(T, LLM, {"id": "rule_2"}, {"status": "ok", "score": 0.0, "passed": False})
        exporter.shutdown()  # sends what is queued
        spans = _spans(got)
        headers = list(got.headers)
    assert [s["name"] for s in spans] == ["evaluation helpfulness", "evaluation rule_2"]
    first, second = spans
    assert first["trace_id"] == T and first["parent"] == LLM
    assert first["scope"] == "evaluator_host.online" and first["resource"]["service.name"] == "evaluator-host"
    expected = {
        "gen_ai.evaluation.name": "helpfulness",
        "gen_ai.evaluation.score.value": 0.8,
        "gen_ai.evaluation.score.label": "pass",
        "gen_ai.evaluation.explanation": "Answers the question, briefly.",
    }
    assert first["events"] == [(EVENT_NAME, expected)]
    assert expected.items() <= first["attributes"].items()
    assert first["attributes"]["evaluator_host.rule_id"] == "rule_1"
    assert first["attributes"]["evaluator_host.revision"] == 3 and first["attributes"]["evaluator_host.passed"] is True
    assert first["duration_ns"] == 12_500_000 and first["status"] == 0  # the evaluator's own duration; not failed
    assert second["events"][0][1] == {
        "gen_ai.evaluation.name": "rule_2",
        "gen_ai.evaluation.score.value": 0.0,
        "gen_ai.evaluation.score.label": "fail",
    }
    assert headers and all(h.get("x-team") == "evals" for h in headers)


def test_a_failed_evaluation_a_label_and_a_trace_without_span_id() -> None:
    failed = {"status": "error", "score": None, "error": {"type": "ZeroDivisionError", "message": "division by zero"}}
    with collector() as got:
        exporter = ScoreExporter(Settings(online_export_endpoint=got.endpoint + "/v1/traces"))
        exporter.export(T, LLM, RULE, failed)
        exporter.export(T, None, RULE, {"status": "ok", "label": "relevant", "score": 1})
        exporter.shutdown()
        spans = _spans(got)
    by_label = {s["events"][0][1].get("gen_ai.evaluation.score.label"): s for s in spans}
    error = by_label[None]
    assert error["status"] == 2 and error["attributes"]["error.type"] == "ZeroDivisionError"
    assert error["events"][0][1] == {"gen_ai.evaluation.name": "helpfulness", "error.type": "ZeroDivisionError"}
    assert "division by zero" not in repr(error)  # the error's message (user output) is not sent
    rootless = by_label["relevant"]
    assert rootless["trace_id"] == T and rootless["parent"] == ""  # a root span of the evaluated trace


def test_unusable_ids_send_nothing_and_raise_nothing() -> None:
    with collector() as got:
        exporter = ScoreExporter(Settings(online_export_endpoint=got.endpoint))
        for trace_id, span_id in [("xyz", LLM), ("0" * 32, LLM), (T[:-1], LLM), ("g" * 32, None)]:
            exporter.export(trace_id, span_id, RULE, OK)
        exporter.export(T, "not-hex-at-all!!", RULE, OK)  # a bad span id: a root span of the trace
        exporter.export(T, LLM, RULE, {"status": "ok", "score": "high", "passed": "yes", "duration_ms": -5})
        exporter.shutdown()
        spans = _spans(got)
    assert [(s["trace_id"], s["parent"]) for s in spans] == [(T, ""), (T, LLM)]
    assert "gen_ai.evaluation.score.value" not in spans[1]["attributes"]  # not a number: left out


def test_no_endpoint_is_a_no_op_and_the_global_provider_is_never_touched() -> None:
    before = otel_trace.get_tracer_provider()
    exporter = ScoreExporter(Settings(online_export_endpoint=None))
    assert not exporter.enabled
    exporter.export(T, LLM, RULE, OK)
    exporter.shutdown()
    with collector() as got:
        on = ScoreExporter(Settings(online_export_endpoint=got.endpoint))
        on.export(T, LLM, RULE, OK)
        on.shutdown()
        on.export(T, LLM, RULE, OK)  # after shutdown: a no-op
        assert len(_spans(got)) == 1
    assert otel_trace.get_tracer_provider() is before


def test_a_dead_endpoint_costs_the_caller_nothing_and_a_later_exporter_works() -> None:
    with socket.socket() as closed:  # a loopback port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    exporter = ScoreExporter(Settings(online_export_endpoint=f"http://127.0.0.1:{port}"))
    for _ in range(100):
        exporter.export(T, LLM, RULE, OK)  # queued: never waits for the endpoint
    exporter.shutdown()  # bounded (5 s at most), never raises
    with collector() as got:
        again = ScoreExporter(Settings(online_export_endpoint=got.endpoint))
        again.export(T, LLM, RULE, OK)
        again.shutdown()
        assert [s["parent"] for s in _spans(got)] == [LLM]
