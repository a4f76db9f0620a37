"""The Review screen on an online rule's queue in a real browser (issue 53): traffic from the real OpenTelemetry
SDK scored by a rule, a queue of its failures made in the page, an item shown with the trace it judged (the span
tree, as the trace view draws it) beside the evaluator's answer, and a verdict given with a key."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Tracer
from playwright.sync_api import Page, expect

from tests.support.service import serving
from tests.support.wait import wait_until

SCORER = (
    "def evaluate(inputs, outputs, trace):\n"
    "    good = outputs == inputs['question'].upper()\n"
    "    return {'score': 1.0 if good else 0.25, 'passed': good, 'label': 'upper' if good else 'other',\n"
    "            'reason': 'shouted back' if good else 'not shouted'}\n"
)


def send_chat(tracer: Tracer, question: str, answer: str) -> str:
    """One request of the instrumented app (a root span and a model-call child); its trace id (hex)."""
    with tracer.start_as_current_span("chat") as root:
        root.set_attribute("ag.data.inputs.question", question)
        with tracer.start_as_current_span("llm") as llm:
            llm.set_attribute("gen_ai.request.model", "tiny-echo")
        root.set_attribute("ag.data.outputs", answer)
        return format(root.get_span_context().trace_id, "032x")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """The real service with short online timings (overrides the package's ``service``)."""
    env = {
        "EVALUATOR_HOST_ONLINE_QUIET_PERIOD_S": "0.3",
        "EVALUATOR_HOST_ONLINE_ASSEMBLY_S": "0.1",
        "EVALUATOR_HOST_ONLINE_POLL_S": "0.1",
    }
    with serving(tmp_path_factory.mktemp("web-review-rule"), backend="process", env=env) as (client, _proc):
        yield client


@pytest.fixture(scope="module")
def tracer(service: httpx.Client) -> Iterator[Tracer]:
    """An application's tracer: the real SDK, exporting each span as it ends to the service."""
    provider = TracerProvider(resource=Resource.create({"service.name": "chat-api"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{service.base_url}/v1/traces")))
    yield provider.get_tracer("tests.web.review")
    provider.shutdown()


def test_a_rule_queue_made_in_the_page_shows_each_item_with_its_trace_and_takes_a_key_verdict(
    page: Page, service: httpx.Client, tracer: Tracer
) -> None:
    made = service.post("/v1/evaluators", json={"name": "shouty", "language": "python", "code": SCORER})
    assert made.status_code == 201, made.text
    rule = service.post(
        "/v1/online-rules", json={"evaluator_id": made.json()["id"], "name": "uppercase", "sampling_rate": 1.0}
    )
    assert rule.status_code == 201, rule.text
    rule_id = rule.json()["id"]
    traces = [send_chat(tracer, "hello", "hi"), send_chat(tracer, "hey", "HEY"), send_chat(tracer, "yo", "no")]

    def scored() -> bool:
        scores = service.get(f"/v1/online-rules/{rule_id}/scores", params={"limit": 100}).json()["data"]
        return {s["trace_id"] for s in scores if s["state"] == "done"} >= set(traces)

    wait_until(scored, 120, 0.05, what="the traces scored")
    page.goto("/#review")
    form = page.get_by_role("form", name="new review queue")
    form.get_by_label("queue name").fill("not shouted")
    form.get_by_label("source kind").select_option("rule")
    form.get_by_label("source", exact=True).select_option(rule_id)
    form.get_by_label("select", exact=True).select_option("failed")
    expect(form.get_by_label("select value")).to_be_hidden()
    form.get_by_role("button", name="Create queue").click()

    queue = page.locator(".review-queue")
    expect(queue).to_contain_text(f"rule {rule_id}")
    expect(queue).to_contain_text("failed only")
    expect(queue.locator(".progress-text")).to_have_text("0 / 2 reviewed")
    queue_id = queue.get_attribute("data-queue")
    items = service.get(f"/v1/review-queues/{queue_id}/items").json()["data"]
    assert {i["source"]["trace_id"] for i in items} == {traces[0], traces[2]}  # the two failures
    card = page.locator(".item-card")
    expect(card).to_have_attribute("data-item", items[0]["id"])
    expect(card).to_contain_text(items[0]["source"]["trace_id"])
    tree = card.get_by_label("span tree")
    expect(tree.locator(".span-node[data-name='chat'] .span-node[data-name='llm']")).to_have_count(1)
    answer = card.get_by_label("the evaluator's answer")
    expect(answer).to_contain_text("score 0.25")
    expect(answer).to_contain_text("not shouted")
    expect(answer).to_contain_text("other")
    question = "hello" if items[0]["source"]["trace_id"] == traces[0] else "yo"
    expect(card.get_by_label("item inputs")).to_contain_text(f'"question": "{question}"')
    page.keyboard.press("p")  # people: a fine answer the evaluator failed
    expect(queue.locator(".progress-text")).to_have_text("1 / 2 reviewed")
    expect(card).to_have_attribute("data-item", items[1]["id"])
    expect(card).to_contain_text(items[1]["source"]["trace_id"])
    expect(page.locator(".review-agreement [data-stat='confusion'] .stat-value")).to_have_text(
        "tp 0 · fp 0 · fn 1 · tn 0"
    )
