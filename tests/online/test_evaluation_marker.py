"""Evaluation traffic never evaluates itself (issue 51): spans carrying ``evaluator_host.evaluation=true``
(on the span or its resource) are never routed to rules — routing on SQLite and PostgreSQL, and the
real service receiving its own score export and a judge's marked spans while an unmarked trace is
scored; a judge's sandbox carries the marker in ``OTEL_RESOURCE_ATTRIBUTES`` for its SDK to read."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind
from sqlalchemy import Engine

from evaluator_host.observability.tracing import MARKER
from evaluator_host.online.deciding.router import decide
from evaluator_host.online.scoring.export import ScoreExporter
from evaluator_host.sandbox.base import SANDBOX_ENV
from evaluator_host.settings import Settings
from evaluator_host.store.online.rules import RuleStore
from evaluator_host.store.online.scores import ScoreQueue
from evaluator_host.tenancy.vault import RESERVED_NAMES
from tests.support.online import WS, hex_id, put_trace, score_rows, span
from tests.support.service import serving
from tests.support.wait import wait_until


def _rule(store: RuleStore, flt: dict[str, object]) -> str:
    fields = {"name": None, "revision": None, "filter": flt, "sampling_rate": 1.0, "mapping": None, "enabled": True}
    return store.create(WS, "ev_1", fields).id


def test_spans_carrying_the_marker_are_never_routed_to_rules(engine: Engine) -> None:
    rules, queue = RuleStore(engine), ScoreQueue(engine)
    every = _rule(rules, {})
    on_chat = _rule(rules, {"span_name": "chat"})
    only_marked = hex_id(16)  # a score export or a judge's call: its resource says so (as a string, from the env)
    marked = span(only_marked, "chat")
    put_trace(engine, [dataclasses.replace(marked, resource={**marked.resource, MARKER: "true"})])
    mixed = hex_id(16)  # a marked root (the span attribute) over an unmarked child
    root = span(mixed, "chat", attributes={MARKER: True})
    child = span(mixed, "llm", parent=root.span_id, start_ns=root.start_ns + 10)
    put_trace(engine, [root, child])
    plain = hex_id(16)
    plain_root = span(plain, "chat", attributes={MARKER: False})  # false is no marker
    put_trace(engine, [plain_root])

    routed = queue.route(100, 1000, decide)
    assert routed.traces == 3
    got = {(r.trace_id, r.rule_id): r.span_id for r in score_rows(engine)}
    assert got == {
        (mixed, every): child.span_id,  # the marked root gives way to the first unmarked span
        (plain, every): plain_root.span_id,
        (plain, on_chat): plain_root.span_id,
    }


def test_without_filters_the_marked_bodies_alone_are_read_and_still_never_routed(engine: Engine) -> None:
    rules, queue = RuleStore(engine), ScoreQueue(engine)
    every = _rule(rules, {})  # no rule filters: routing reads only the bodies that name the marker
    only_marked = hex_id(16)
    put_trace(engine, [span(only_marked, "evaluation x", attributes={MARKER: True})])
    mixed = hex_id(16)
    root = span(mixed, "chat", attributes={MARKER: "true"})
    child = span(mixed, "llm", parent=root.span_id, start_ns=root.start_ns + 10)
    put_trace(engine, [root, child])
    assert queue.route(100, 1000, decide).traces == 2
    assert {(r.trace_id, r.rule_id): r.span_id for r in score_rows(engine)} == {(mixed, every): child.span_id}


def _traced(base: str, resource: dict[str, str]) -> str:
    """One trace sent by the OpenTelemetry SDK over OTLP/HTTP; its hex id."""
    provider = TracerProvider(resource=Resource.create({"service.name": "chat-api", **resource}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces", timeout=10)))
    tracer = provider.get_tracer("tests.online.marker")
    attributes = {"ag.data.inputs.question": "2+2?", "ag.data.outputs": "4"}
    with tracer.start_as_current_span("chat", kind=SpanKind.SERVER, attributes=attributes) as root:
        trace_id = format(root.get_span_context().trace_id, "032x")
    provider.shutdown()
    return trace_id


def _routed(client: httpx.Client, trace_id: str) -> dict[str, object] | None:
    found = client.get(f"/v1/traces/{trace_id}")
    return found.json() if found.status_code == 200 and found.json()["state"] == "routed" else None


@pytest.mark.slow
def test_the_service_never_scores_its_own_score_export_nor_a_judge_s_marked_spans(tmp_path: Path) -> None:
    env = {
        "EVALUATOR_HOST_ONLINE_QUIET_PERIOD_S": "0.2",
        "EVALUATOR_HOST_ONLINE_ASSEMBLY_S": "0.05",
        "EVALUATOR_HOST_ONLINE_POLL_S": "0.05",
    }
    judge = (
        "import os\ndef evaluate(inputs, outputs, trace):\n"
        "    return {'score': 1.0, 'label': os.environ.get('OTEL_RESOURCE_ATTRIBUTES')}\n"
    )
    with serving(tmp_path, "process", env=env) as (client, _):
        made = client.post("/v1/evaluators", json={"name": "judge", "language": "python", "code": judge})
        assert made.status_code == 201, made.text
        rule = client.post("/v1/online-rules", json={"evaluator_id": made.json()["id"]}).json()
        base = str(client.base_url).rstrip("/")

        plain = _traced(base, {})  # the control: an application's trace is scored
        done = functools.partial(
            lambda t: next((s for s in (_routed(client, t) or {}).get("scores", []) if s["state"] == "done"), None),
            plain,
        )
        score = wait_until(done, 120, 0.1, what="the application's trace scored")
        assert score["label"] == f"{MARKER}=true"  # the judge's sandbox carries the marker for its SDK

        exported = hex_id(16)  # the service's own score export, sent back to itself
        exporter = ScoreExporter(Settings(online_export_endpoint=base, online_export_signals="spans"))
        exporter.export(exported, None, rule, {"status": "ok", "score": 1.0})
        exporter.shutdown()
        judged = _traced(base, {MARKER: "true"})  # a judge's instrumented call (OTEL_RESOURCE_ATTRIBUTES)
        for trace_id in (exported, judged):
            found = wait_until(functools.partial(_routed, client, trace_id), 60, 0.1, what="the marked trace routed")
            assert found["scores"] == []  # stored and shown, never scored
        assert client.get(f"/v1/online-rules/{rule['id']}/scores").json()["count"] == 1


def test_every_variable_the_sandbox_sets_is_a_reserved_secret_name() -> None:
    """A secret never replaces the sandbox's own environment (the evaluation marker among it)."""
    assert set(SANDBOX_ENV) <= RESERVED_NAMES and SANDBOX_ENV["OTEL_RESOURCE_ATTRIBUTES"] == f"{MARKER}=true"


def test_a_span_level_rule_never_scores_a_marked_span() -> None:
    """At span level too, evaluation traffic is never a target: of a trace's three LLM spans, the one
    carrying the marker (a judge's own call) gets no row; the two others get one each."""
    import json
    from datetime import UTC, datetime

    from evaluator_host.store.online.rules import RuleRecord
    from evaluator_host.store.online.scores import SpanRef, TraceRef

    def span(span_id: str, marked: bool) -> SpanRef:
        attributes = {"gen_ai.operation.name": "chat", **({MARKER: True} if marked else {})}
        return SpanRef(span_id, "chat", "app", int(span_id, 16), json.dumps({"attributes": attributes}))

    now = datetime.now(UTC)
    rule = RuleRecord(
        id="r1", workspace_id="default", name=None, evaluator_id="ev", revision=None,
        filter={}, sampling_rate=1.0, mapping=None, enabled=True, created_at=now, updated_at=now,
        target={"level": "span"},
    )  # fmt: skip
    trace = TraceRef("default", "t" * 32, "01", [span("01", False), span("02", True), span("03", False)])
    assert [(r.id, s) for r, s in decide(trace, [rule])] == [("r1", "01"), ("r1", "03")]


def test_a_trial_never_tries_a_rule_on_a_marked_span() -> None:
    """Try-before-live routes as live routing does: the decoded spans of a stored trace carry their
    marker into routing (a trial on the service's own exports would report scores no live rule makes)."""
    from datetime import UTC, datetime

    from evaluator_host.evaluation.trace_shape import SpanData
    from evaluator_host.online.candidates.trial import _refs
    from evaluator_host.online.levels.traces import LoadedTrace
    from evaluator_host.store.online.rules import RuleRecord

    def span(span_id: str, **marks: dict[str, object]) -> SpanData:
        return SpanData("t" * 32, span_id, None, "chat", int(span_id, 16), int(span_id, 16) + 1, **marks)  # type: ignore[arg-type]

    loaded = LoadedTrace(
        "t" * 32, "ready", "app", "01", {},
        [span("01"), span("02", attributes={MARKER: True}), span("03", resource={MARKER: "true"})],
    )  # fmt: skip
    now = datetime.now(UTC)
    rule = RuleRecord(
        id="r1", workspace_id="default", name=None, evaluator_id="ev", revision=None,
        filter={}, sampling_rate=1.0, mapping=None, enabled=True, created_at=now, updated_at=now,
        target={"level": "span"},
    )  # fmt: skip
    assert [s for _, s in decide(_refs(loaded, "default"), [rule])] == ["01"]
