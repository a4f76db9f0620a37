"""The Online page in a real browser against the real service: a rule created on the page, traffic
from the real OpenTelemetry Python SDK exported over OTLP/HTTP to ``POST /v1/traces``, then the
live feed shows each trace with its score, the trace view shows the span tree, the inputs/outputs
the evaluator got and each rule's result (a failed evaluation with its line), the chart renders,
pause stops scoring and resume/delete work; the feed polls only while the screen is shown; the trace view
says why each rule did or did not score the trace, and a rule's row counts its decisions and its budget use.

The service runs with a short quiet period (a trace is ready 0.3 s after its last span) and fast
assembly/routing polls, so a trace is scored within about a second of its root span ending.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Tracer
from playwright.sync_api import Page, Request, expect

from tests.support.service import serving
from tests.support.wait import wait_until
from tests.support.web import open_screen

SCORER = (
    "def evaluate(inputs, outputs, trace):\n"
    "    question = inputs['question']\n"
    "    if question == 'crash':\n"
    "        raise ValueError('cannot answer ' + question)\n"
    "    good = outputs == question.upper()\n"
    "    return {'score': 1.0 if good else 0.25, 'passed': good, 'label': 'upper' if good else 'other',\n"
    "            'reason': 'shouted back' if good else 'not shouted', 'spans': len(trace['spans'])}\n"
)
SCORE_WAIT_MS = 60_000  # the first scoring builds nothing (no packages) but starts a worker


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """The real service with short online timings (overrides the package's ``service``)."""
    env = {
        "EVALUATOR_HOST_ONLINE_QUIET_PERIOD_S": "0.3",
        "EVALUATOR_HOST_ONLINE_ASSEMBLY_S": "0.1",
        "EVALUATOR_HOST_ONLINE_POLL_S": "0.1",
    }
    with serving(tmp_path_factory.mktemp("web-online"), backend="process", env=env) as (client, _proc):
        yield client


@pytest.fixture(scope="module")
def tracer(service: httpx.Client) -> Iterator[Tracer]:
    """An application's tracer: the real SDK, exporting each span as it ends to the service."""
    provider = TracerProvider(resource=Resource.create({"service.name": "chat-api"}))
    exporter = OTLPSpanExporter(endpoint=f"{service.base_url}/v1/traces", timeout=10)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("tests.web.online")
    provider.shutdown()


def send_chat(tracer: Tracer, question: str, answer: str, env: str = "test") -> str:
    """One request of the instrumented app (a root span and a model-call child); its trace id (hex)."""
    with tracer.start_as_current_span("chat") as root:
        root.set_attribute("app.env", env)
        root.set_attribute("ag.data.inputs.question", question)
        with tracer.start_as_current_span("llm") as llm:
            llm.set_attribute("gen_ai.request.model", "tiny-echo")
            llm.set_attribute("gen_ai.usage.input_tokens", len(question))
        root.set_attribute("ag.data.outputs", answer)
        return format(root.get_span_context().trace_id, "032x")


def create_rule_on_page(page: Page, name: str, evaluator_name: str) -> str:
    """Fill the New rule form (service filter and an attribute condition) and create it; the rule id."""
    form = page.get_by_role("form", name="new rule")
    form.get_by_label("rule name").fill(name)
    form.get_by_label("evaluator for the rule").select_option(label=f"{evaluator_name} (python, r1)")
    form.get_by_label("sampling rate").fill("1")
    form.get_by_label("filter: service name").fill("chat-api")
    form.get_by_role("button", name="+ attribute condition").click()
    form.get_by_label("attribute key").fill("app.env")
    form.get_by_label("attribute value").fill("test")
    form.get_by_role("button", name="Create rule").click()
    expect(page.locator("#toast")).to_contain_text(f"Rule {name} created")
    row = page.locator(".rules-list tr[data-rule]", has_text=name)
    expect(row).to_contain_text('service = chat-api, app.env = "test"')
    return row.get_attribute("data-rule") or ""


def test_a_rule_made_on_the_page_scores_live_otlp_traffic_shown_in_the_feed_trace_view_and_chart(
    page: Page, service: httpx.Client, tracer: Tracer, shot: Callable[[Page, str], Path]
) -> None:
    created = service.post("/v1/evaluators", json={"name": "shouty", "language": "python", "code": SCORER})
    assert created.status_code == 201, created.text
    page.goto("/#online")
    expect(page.locator(".live-state")).to_have_text("live · every 3 s")
    rule_id = create_rule_on_page(page, "uppercase", "shouty")
    stored = service.get(f"/v1/online-rules/{rule_id}").json()
    assert stored["filter"]["service_name"] == "chat-api"
    [condition] = stored["filter"]["attributes"]
    assert (condition["key"], condition["equals"]) == ("app.env", "test")

    good = send_chat(tracer, "hello", "HELLO")
    bad = send_chat(tracer, "crash", "?")
    other = send_chat(tracer, "hello", "HELLO", env="prod")  # the filter does not match it

    feed = page.locator("table.feed")
    good_chip = feed.locator(f"tr[data-trace='{good}'] .chip[data-rule='{rule_id}']")
    expect(good_chip).to_have_attribute("data-state", "done", timeout=SCORE_WAIT_MS)
    expect(good_chip).to_contain_text("uppercase")
    expect(good_chip).to_contain_text("1 ✓")
    expect(good_chip).to_contain_text("upper")
    bad_chip = feed.locator(f"tr[data-trace='{bad}'] .chip[data-rule='{rule_id}']")
    expect(bad_chip).to_have_attribute("data-state", "done", timeout=SCORE_WAIT_MS)
    expect(bad_chip).to_contain_text("error")
    other_row = feed.locator(f"tr[data-trace='{other}']")
    expect(other_row).to_have_attribute("data-state", "routed", timeout=SCORE_WAIT_MS)
    expect(other_row.locator(".chips")).to_have_text("no rule matched")
    expect(feed.locator(f"tr[data-trace='{good}']")).to_contain_text("chat · chat-api")

    feed.locator(f"tr[data-trace='{good}']").click()
    view = page.locator(f".trace-view[data-trace='{good}']")
    tree = view.get_by_label("span tree")
    expect(tree.locator(".span-node[data-name='chat']")).to_have_count(1)
    child = tree.locator(".span-node[data-name='chat'] .span-node[data-name='llm']")
    expect(child).to_have_count(1)
    expect(child.locator(".span-row")).to_contain_text("gen_ai.request.model=tiny-echo")
    expect(child.locator(".span-duration")).to_have_text(re.compile(r"^[\d.]+ (µs|ms|s)$"))
    root = tree.locator(".span-node[data-name='chat'] > .span-row")
    expect(root).to_contain_text("evaluated")
    tree.locator(".span-node[data-name='chat'] > details > summary").click()
    expect(tree.locator(".span-node[data-name='chat'] > details dl")).to_contain_text("ag.data.outputs")
    expect(view.get_by_label("trace inputs")).to_contain_text('"question": "hello"')
    expect(view.get_by_label("trace outputs")).to_have_text('"HELLO"')
    card = view.locator(f".score-card[data-rule='{rule_id}']")
    expect(card).to_have_attribute("data-state", "done")
    expect(card.locator(".score-value")).to_have_text("1")
    expect(card).to_contain_text("✓ passed")
    expect(card).to_contain_text("shouted back")
    card.locator("summary", has_text="details").click()
    expect(card.locator("pre")).to_contain_text('"spans": 1')

    chart = page.locator("figure.chart")
    expect(chart).to_have_attribute(
        "aria-label", re.compile(r"scores of uppercase: 2 scores \(1 error\)"), timeout=15_000
    )
    svg = chart.locator("svg.chart-svg")
    expect(svg).to_have_attribute("data-points", re.compile(r"^[1-9]"))
    chart.locator("summary", has_text="as a table").click()
    expect(chart.locator(".stats-table tbody tr").first).to_contain_text("2")
    page.evaluate("window.scrollTo(0, 0)")
    expect(page.locator("#toast")).not_to_have_class(re.compile(r"\bshown\b"), timeout=10_000)
    shot(page, "online-light")

    feed.locator(f"tr[data-trace='{bad}']").click()
    failed = page.locator(f".trace-view[data-trace='{bad}'] .score-card[data-rule='{rule_id}']")
    expect(failed.locator(".error-box")).to_contain_text("ValueError: cannot answer crash")
    expect(failed.locator(".error-line")).to_have_text("(line 4)")
    expect(failed).to_contain_text("error")
    page.get_by_role("button", name="close the trace").click()
    expect(page.locator(".trace-view")).to_have_count(0)

    scored = service.get(f"/v1/traces/{good}").json()["scores"]
    assert [(s["rule_id"], s["score"], s["passed"]) for s in scored] == [(rule_id, 1.0, True)]


def test_pause_resume_and_delete_a_rule_and_the_apis_errors_on_the_page(
    page: Page, service: httpx.Client, tracer: Tracer
) -> None:
    evaluator = service.post("/v1/evaluators", json={"name": "pausable", "language": "python", "code": SCORER}).json()
    page.goto("/#online")
    rule_id = create_rule_on_page(page, "pausable-rule", "pausable")
    row = page.locator(f".rules-list tr[data-rule='{rule_id}']")

    row.get_by_role("button", name="Pause").click()
    expect(row).to_have_attribute("data-enabled", "false")
    expect(row).to_contain_text("paused")
    assert service.get(f"/v1/online-rules/{rule_id}").json()["enabled"] is False
    quiet = send_chat(tracer, "hello", "HELLO")
    quiet_row = page.locator(f"table.feed tr[data-trace='{quiet}']")
    expect(quiet_row).to_have_attribute("data-state", "routed", timeout=SCORE_WAIT_MS)
    expect(quiet_row.locator(f".chip[data-rule='{rule_id}']")).to_have_count(0)
    assert all(s["rule_id"] != rule_id for s in service.get(f"/v1/traces/{quiet}").json()["scores"])

    row.get_by_role("button", name="Resume").click()
    expect(row).to_have_attribute("data-enabled", "true")
    loud = send_chat(tracer, "hi", "HI")
    chip = page.locator(f"table.feed tr[data-trace='{loud}'] .chip[data-rule='{rule_id}']")
    expect(chip).to_have_attribute("data-state", "done", timeout=SCORE_WAIT_MS)

    # the API's own error message, shown on the page (a mapping path the service refuses)
    body = {"evaluator_id": evaluator["id"], "sampling_rate": 1.0, "mapping": {"inputs": "nowhere.question"}}
    refused = service.post("/v1/online-rules", json=body)
    assert refused.status_code == 422, refused.text
    form = page.get_by_role("form", name="new rule")
    form.get_by_label("evaluator for the rule").select_option(evaluator["id"])
    form.get_by_label("inputs path").fill("nowhere.question")
    form.get_by_role("button", name="Create rule").click()
    error = form.locator(".form-error .error-box")
    expect(error).to_contain_text("Could not create the rule")
    expect(error).to_contain_text(refused.json()["error"]["message"])

    row.get_by_role("button", name="Delete").click()
    row.get_by_role("button", name="Yes, delete").click()
    expect(page.locator(f".rules-list tr[data-rule='{rule_id}']")).to_have_count(0)
    assert service.get(f"/v1/online-rules/{rule_id}").status_code == 404
    kept = service.get(f"/v1/traces/{loud}").json()["scores"]
    assert any(s["rule_id"] == rule_id and s["state"] == "done" for s in kept)  # its scores stay


def test_the_feed_polls_only_while_the_online_screen_is_shown(page: Page) -> None:
    def feed_request(request: Request) -> bool:
        return "/v1/traces?" in request.url

    with page.expect_request(feed_request):  # the screen's refresh
        page.goto("/#online")
    with page.expect_request(feed_request, timeout=15_000):  # then the timer's poll
        pass
    polls: list[str] = []
    page.on("request", lambda r: polls.append(r.url) if feed_request(r) else None)
    open_screen(page, "Datasets & jobs")
    expect(page.locator("#screen-online")).to_be_hidden()
    page.wait_for_timeout(500)  # a poll already in flight may still land
    left = len(polls)
    page.wait_for_timeout(4500)  # what is under test: more than one poll interval passes with nothing sent
    assert len(polls) == left, polls[left:]
    with page.expect_request(feed_request):  # shown again: refreshed at once
        open_screen(page, "Online")
    with page.expect_request(feed_request, timeout=15_000):  # and polled again
        pass
    page.get_by_role("button", name="Pause live updates").click()
    expect(page.locator(".live-state")).to_have_text("paused")


def test_hostile_span_names_and_attributes_are_shown_as_text(page: Page, service: httpx.Client, tracer: Tracer) -> None:
    """What an application sends is data: markup in a span name or attribute is never run or parsed."""
    markup = '<img src=x onerror="window.pwned=1"><b>bold</b>'
    with tracer.start_as_current_span(markup) as root:
        root.set_attribute("ag.data.inputs.question", markup)
        root.set_attribute("ag.data.outputs", markup)
        root.set_attribute("x" * 200, "y" * 5000)
        trace_id = format(root.get_span_context().trace_id, "032x")
    page.goto("/#online")
    row = page.locator(f"table.feed tr[data-trace='{trace_id}']")
    expect(row).to_have_attribute("data-state", "routed", timeout=SCORE_WAIT_MS)
    expect(row).to_contain_text(markup)
    row.click()
    view = page.locator(f".trace-view[data-trace='{trace_id}']")
    expect(view.locator(".span-name")).to_have_text(markup)
    expect(view.get_by_label("trace outputs")).to_contain_text("onerror=")
    assert view.locator("img").count() == 0 and view.locator("b", has_text="bold").count() == 0
    assert page.evaluate("window.pwned") is None
    view.locator(".span-node > details > summary").first.click()
    long_value = view.locator(".attr-list dd", has_text="yyyy")
    expect(long_value).to_contain_text("…")  # a long value is cut for display


def test_a_trace_opened_from_the_bottom_of_a_long_feed_shows_beside_it_in_view(
    page: Page, service: httpx.Client, tracer: Tracer, shot: Callable[[Page, str], Path]
) -> None:
    """Issue 48: the trace view opened below a full feed (25 traces), far out of sight, with the left half of
    the screen empty; it shows in the left column, beside the feed, within the 1400x900 window."""
    sent = [send_chat(tracer, f"q{i}", f"Q{i}", env="feed") for i in range(25)]
    page.goto("/#online")
    feed = page.locator("table.feed")
    oldest = feed.locator(f"tr[data-trace='{sent[0]}']")
    expect(oldest).to_have_attribute("data-state", "routed", timeout=SCORE_WAIT_MS)
    expect(feed.locator("tr[data-trace]")).to_have_count(25)
    oldest.click()  # the last row: the page scrolls down to it
    view = page.locator(f".trace-view[data-trace='{sent[0]}']")
    expect(view.get_by_label("trace outputs")).to_have_text('"Q0"')
    box = view.bounding_box()
    feed_box = feed.bounding_box()
    assert box is not None and feed_box is not None
    assert 0 <= box["y"] < 900, box  # its top is in the window, not below the feed
    assert box["x"] + box["width"] <= feed_box["x"], (box, feed_box)  # beside the feed, not under it
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400
    shot(page, "online-trace-beside-feed")


def test_the_trace_view_says_why_each_rule_did_or_did_not_score_and_a_rules_row_counts_them_and_its_budget(
    page: Page, service: httpx.Client, tracer: Tracer
) -> None:
    code = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"
    ev = service.post("/v1/evaluators", json={"name": "why-one", "language": "python", "code": code}).json()["id"]
    made = [
        service.post("/v1/online-rules", json={"evaluator_id": ev, "name": name, **body}).json()["id"]
        for name, body in (
            ("why-scored", {"filter": {"span_name": "llm"}, "limits": {"scores_per_minute": 600}}),
            ("why-billing", {"filter": {"service_name": "billing"}}),
        )
    ]
    scored, billing = made
    trace_id = send_chat(tracer, "why", "WHY")

    def decided() -> dict[str, str]:
        found = service.get(f"/v1/traces/{trace_id}").json().get("decisions", [])
        return {d["rule_id"]: d["decision"] for d in found}

    wait_until(lambda: decided().get(scored) == "scored", SCORE_WAIT_MS / 1000, 0.1, what="the score")
    page.goto("/#online")
    page.locator(f"table.feed tr[data-trace='{trace_id}']").click()
    table = page.locator(f".trace-view[data-trace='{trace_id}']").get_by_label("decisions")
    expect(table.locator(f"tr[data-rule='{scored}']")).to_have_attribute("data-decision", "scored")
    miss = table.locator(f"tr[data-rule='{billing}']")
    expect(miss).to_have_attribute("data-decision", "not_matched")
    expect(miss).to_contain_text("why-billing")
    expect(miss).to_contain_text('service_name is "chat-api", not "billing"')
    rules = page.locator(".rules-list")
    expect(rules.get_by_label("decisions of why-scored")).to_have_text("scored 1")
    expect(rules.get_by_label("decisions of why-billing")).to_have_text("not matched 1")
    expect(rules.get_by_label("budget use of why-scored")).to_have_text(re.compile(r"^[01]/600 scores a minute$"))
    for rule_id in made:
        service.delete(f"/v1/online-rules/{rule_id}")
