"""Scores as OTLP log records (issue 51), against a real OTLP/HTTP receiver on loopback that decodes
``ExportLogsServiceRequest`` with opentelemetry-proto (tests/support/otlp.py): each score is one
``gen_ai.evaluation.result`` event record, severity INFO, with the evaluated span's ids and the
``gen_ai.evaluation.*`` attributes; ``online_export_signals`` chooses spans, logs or both; both carry
the ``evaluator_host.evaluation`` marker."""

from __future__ import annotations

import pytest

from evaluator_host.online.scoring.export import EVENT_NAME, MARKER, ScoreExporter, logs_url
from evaluator_host.settings import Settings
from tests.support.otlp import collector

T = "4bf92f3577b34da6a3ce929d0e0e4736"
LLM = "b7ad6b7169203331"
RULE = {"id": "rule_1", "name": "helpfulness", "evaluator_id": "ev_1"}
OK = {"status": "ok", "score": 0.8, "passed": True, "reason": "Answers the question.", "revision": 3}
INFO = 9  # SeverityNumber.INFO


def test_each_score_arrives_as_a_gen_ai_evaluation_result_log_record_with_the_evaluated_span_s_ids() -> None:
    with collector() as got:
        exporter = ScoreExporter(Settings(online_export_endpoint=got.endpoint, online_export_headers="x-team=evals"))
        exporter.export(T, LLM, RULE, OK)
        exporter.export(T, None, {"id": "rule_2"}, {"status": "error", "error": {"type": "ZeroDivisionError"}})
        exporter.shutdown()
        records = got.wait_for_logs(2)
        spans = got.received()
    first, second = sorted(records, key=lambda r: r.attributes["gen_ai.evaluation.name"])
    assert (first.event_name, first.severity_number, first.severity_text) == (EVENT_NAME, INFO, "INFO")
    assert (first.trace_id, first.span_id) == (T, LLM)
    assert {
        "gen_ai.evaluation.name": "helpfulness",
        "gen_ai.evaluation.score.value": 0.8,
        "gen_ai.evaluation.score.label": "pass",
        "gen_ai.evaluation.explanation": "Answers the question.",
        "evaluator_host.rule_id": "rule_1",
    }.items() <= first.attributes.items()
    assert first.resource["service.name"] == "evaluator-host" and first.resource[MARKER] is True
    assert first.scope == "evaluator_host.online"
    assert second.trace_id == T and second.span_id == ""  # no evaluated span: the trace's id alone
    assert second.attributes["error.type"] == "ZeroDivisionError"
    # both (the default): the span export is kept for backends that read spans, marked too
    assert sorted(s.name for s in spans) == ["evaluation helpfulness", "evaluation rule_2"]
    assert all(s.attributes[MARKER] is True and s.resource[MARKER] is True for s in spans)


@pytest.mark.parametrize(("signals", "want_spans", "want_logs"), [("spans", 1, 0), ("logs", 0, 1)])
def test_the_signals_setting_sends_spans_or_logs_alone(signals: str, want_spans: int, want_logs: int) -> None:
    with collector() as got:
        settings = Settings(online_export_endpoint=got.endpoint, online_export_signals=signals)
        exporter = ScoreExporter(settings)
        assert exporter.enabled
        exporter.export(T, LLM, RULE, OK)
        exporter.shutdown()  # sends what is queued: after it, nothing else comes
        if want_logs:
            got.wait_for_logs(want_logs)
        if want_spans:
            got.wait_for(lambda s: len(s) >= want_spans)
        assert (len(got.received()), len(got.logs), got.other_requests) == (want_spans, want_logs, [])


def test_the_logs_url_follows_the_span_export_s_endpoint() -> None:
    assert logs_url("http://c:4318") == "http://c:4318/v1/logs"
    assert logs_url("http://c:6006/v1/traces") == "http://c:6006/v1/logs"
    assert logs_url("https://x/api/public/otel/v1/traces/") == "https://x/api/public/otel/v1/logs"
    assert logs_url("https://x/otel") == "https://x/otel/v1/logs"
