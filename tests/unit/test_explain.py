"""Why a rule does not match a trace (issue 51): the first failed condition, in the order routing checks
them, each kind said plainly; a bool is never equal to a number; quoted values are cut at 80 characters
and a reason at 500, whatever a span carries; evaluation traffic and sampling say so."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from evaluator_host.online.deciding.explain import first_failure, why_not
from evaluator_host.store.online.refs import SpanRef, TraceRef
from evaluator_host.store.online.rules import RuleRecord

NOW = datetime(2026, 11, 25, tzinfo=UTC)


def _span(name: str = "chat", service: str | None = "chat-api", **attributes: Any) -> SpanRef:
    return SpanRef("a" * 16, name, service, 1, "", _attributes=attributes, _evaluation=False)


def _rule(flt: dict[str, Any], rate: float = 1.0) -> RuleRecord:
    return RuleRecord("rule_1", "ws", None, "ev", None, flt, rate, None, True, NOW, NOW)


def test_each_condition_kind_is_said_plainly_in_routing_order() -> None:
    span = _span(env="dev", n=True)
    assert first_failure({"service_name": "billing", "span_name": "x"}, span) == (
        'service_name is "chat-api", not "billing"'
    )
    assert first_failure({"service_name": "billing"}, _span(service=None)) == 'service_name is absent, not "billing"'
    assert first_failure({"span_name": "llm"}, span) == 'span_name is "chat", not "llm"'
    assert first_failure({"attributes": [{"key": "env", "equals": "prod"}]}, span) == (
        'attribute env is "dev", not "prod"'
    )
    assert first_failure({"attributes": [{"key": "n", "equals": 1}]}, span) == "attribute n is true, not 1"
    assert first_failure({"attributes": [{"key": "user.id", "exists": True}]}, span) == (
        "attribute user.id is absent, wanted present"
    )
    assert first_failure({"attributes": [{"key": "env", "exists": False}]}, span) == (
        'attribute env is present ("dev"), wanted absent'
    )
    assert first_failure({"service_name": "chat-api", "attributes": [{"key": "env", "equals": "dev"}]}, span) is None


def test_hostile_values_are_cut_and_a_reason_is_bounded() -> None:
    span = _span(name="<script>" + "x" * 10_000, env="y" * 100_000)
    said = first_failure({"attributes": [{"key": "env", "equals": "prod"}]}, span)
    assert said is not None and len(said) < 200 and said.endswith('…, not "prod"')
    decision, reason = why_not(TraceRef("ws", "b" * 32, None, [span]), _rule({"span_name": "llm"}))
    assert decision == "not_matched" and len(reason) <= 500


def test_sampling_and_evaluation_traffic_say_so() -> None:
    trace = TraceRef("ws", "c" * 32, None, [_span()])
    decision, reason = why_not(trace, _rule({}, rate=0.0))
    assert decision == "sampled_out" and reason.startswith("sampling_rate 0: this trace falls at ")
    marked = SpanRef("d" * 16, "chat", "chat-api", 1, "", _attributes={}, _evaluation=True)
    assert why_not(TraceRef("ws", "c" * 32, None, [marked]), _rule({})) == (
        "not_matched",
        "every span of the trace is evaluation traffic (evaluator_host.evaluation=true)",
    )


def test_a_session_level_rule_whose_filter_holds_says_no_session_was_named_never_a_trace_sampling() -> None:
    trace = TraceRef("ws", "t" * 32, None, [_span()])
    rule = RuleRecord("rule_1", "ws", None, "ev", None, {"service_name": "chat-api"}, 0.0, None, True, NOW, NOW,
                      None, {"level": "session", "session_key": "conversation"})  # fmt: skip
    decision, reason = why_not(trace, rule)
    assert decision == "not_matched"  # sampling_rate 0 is a session's sampling, not this trace's
    assert reason == "no session id under conversation on the trace's spans, or its session was sampled out"
    other = RuleRecord("rule_2", "ws", None, "ev", None, {"service_name": "billing"}, 1.0, None, True, NOW, NOW,
                       None, {"level": "session"})  # fmt: skip
    assert why_not(trace, other)[1].startswith('service_name is "chat-api", not "billing"')
