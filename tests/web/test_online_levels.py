"""The Online page's issue-50 flows in a real browser against the real service, with traffic from the real
OpenTelemetry SDK over OTLP/HTTP: the New rule form switches level (trace / span / session, with the
session's key and quiet period), tries the form's rule on stored traces before creating it (a results
table; "no stored trace matches" when none does; a 422 shown in the form), and creates it; a rule's
Backfill shows the dry run's numbers, starts, follows the progress to done (only while the screen is
shown) with its scored, skipped, cached (answered from the result cache) and failed counts, cancels, and
shows a backfill whose every target failed in red with the service's reason; sessions are listed and one opens with its
scores, conversation and traces, from the list, from a trace whose spans name it and from a trace's
session score.

Each test sends its traces under its own ``service.name`` and filters its rules on it, so what the other
tests of the module stored never counts.
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
from playwright.sync_api import Page, Request, expect

from tests.support.service import serving
from tests.support.wait import wait_until
from tests.support.web import open_screen

WAIT_MS = 60_000
SCORER = (
    "def evaluate(inputs, outputs, trace):\n"
    "    if inputs == 'boom':\n"
    "        raise ValueError('cannot score ' + inputs)\n"
    "    return {'score': 0.5, 'passed': True, 'label': 'seen', 'reason': 'looked at ' + str(inputs)}\n"
)
BROKEN = "def evaluate(inputs, outputs, trace):\n    raise ValueError('always broken')\n"
SLOW = "import time\ndef evaluate(inputs, outputs, trace):\n    time.sleep(2)\n    return 1.0\n"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """The real service with short online timings and one scoring slot (a backfill takes a while)."""
    env = {
        "EVALUATOR_HOST_ONLINE_QUIET_PERIOD_S": "0.3",
        "EVALUATOR_HOST_ONLINE_ASSEMBLY_S": "0.1",
        "EVALUATOR_HOST_ONLINE_POLL_S": "0.1",
        "EVALUATOR_HOST_ONLINE_SCORING_CONCURRENCY": "1",
    }
    with serving(tmp_path_factory.mktemp("web-online-levels"), backend="process", env=env) as (client, _proc):
        yield client


def send(service: httpx.Client, app: str, turns: list[tuple[str, str]], session: str | None = None) -> list[str]:
    """One trace per turn from the app ``app`` (root ``chat`` with OpenInference input/output, a child ``llm``
    span with the same input/output), all in the session ``session`` when given; their trace ids, once each
    is routed."""
    provider = TracerProvider(resource=Resource.create({"service.name": app}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{service.base_url}/v1/traces")))
    tracer = provider.get_tracer("tests.web.online_levels")
    sent = []
    for question, answer in turns:
        attributes = {"input.value": question, "output.value": answer}
        if session:
            attributes["session.id"] = session
        with tracer.start_as_current_span("chat", attributes=attributes) as root:
            llm = {"openinference.span.kind": "LLM", "input.value": question, "output.value": answer}
            with tracer.start_as_current_span("llm", attributes=llm):
                pass
            sent.append(format(root.get_span_context().trace_id, "032x"))
    provider.shutdown()

    def routed() -> bool:
        states = {t["trace_id"]: t["state"] for t in service.get("/v1/traces", params={"limit": 200}).json()["data"]}
        return all(states.get(t) == "routed" for t in sent)

    wait_until(routed, WAIT_MS / 1000, 0.1, what="the traces routed")
    return sent


def evaluator(service: httpx.Client, name: str, code: str) -> str:
    made = service.post("/v1/evaluators", json={"name": name, "language": "python", "code": code})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def test_the_new_rule_form_switches_level_tries_the_rule_on_stored_traces_and_creates_it(
    page: Page, service: httpx.Client, shot: Callable[[Page, str], Path]
) -> None:
    traces = send(service, "form-app", [("hello", "HELLO"), ("boom", "?")])
    evaluator(service, "form-scorer", SCORER)
    page.goto("/#online")
    form = page.get_by_role("form", name="new rule")
    form.get_by_label("evaluator for the rule").select_option(label="form-scorer (python, r1)")
    form.get_by_label("rule name").fill("each-llm-call")
    form.get_by_label("filter: service name").fill("form-app")

    level = form.get_by_label("target level")
    expect(form.get_by_label("session key")).to_be_hidden()
    level.select_option("session")
    expect(form.get_by_label("session key")).to_be_visible()
    expect(form.get_by_label("session key")).to_have_attribute(
        "placeholder", "session.id, gen_ai.conversation.id, langfuse.session.id"
    )
    expect(form.get_by_label("quiet seconds")).to_have_attribute("placeholder", "300")
    form.get_by_label("quiet seconds").fill("0")  # the service's bound: 422, shown in the form
    form.get_by_role("button", name="Try on stored traces").click()
    error = form.locator(".form-error .error-box")
    expect(error).to_contain_text("Could not try the rule")
    expect(error).to_contain_text("quiet_s")
    expect(form.get_by_label("try results")).to_have_count(0)

    level.select_option("span")
    expect(form.get_by_label("session key")).to_be_hidden()
    expect(form.locator("legend", has_text="Span filter")).to_be_visible()
    form.get_by_label("filter: span name").fill("llm")
    form.get_by_role("button", name="+ attribute condition").click()
    form.get_by_label("attribute key").fill("openinference.span.kind")
    form.get_by_label("attribute value").fill("LLM")
    form.get_by_role("button", name="Try on stored traces").click()
    expect(form.locator(".form-error .error-box")).to_have_count(0)
    results = form.get_by_label("try results")
    rows = results.locator("tbody tr")
    expect(rows).to_have_count(2, timeout=WAIT_MS)
    expect(results.locator("thead")).to_have_text(
        re.compile("trace.*span.*session.*status.*score.*passed.*label.*reason.*duration")
    )
    good = results.locator(f"tr[data-trace='{traces[0]}']")
    expect(good).to_have_attribute("data-status", "ok")
    expect(good).to_contain_text("0.5")
    expect(good).to_contain_text("seen")
    expect(good).to_contain_text("looked at hello")
    expect(good.locator("td").nth(1)).to_have_text(re.compile(r"^[0-9a-f]{16}$"))  # the scored span
    expect(results.locator(f"tr[data-trace='{traces[1]}']")).to_have_attribute("data-status", "error")
    expect(form.locator(".try-box")).to_contain_text("Scored 2 of 2 matching target(s)")
    assert service.get("/v1/online-rules").json()["count"] == 0  # a try stores nothing
    shot(page, "online-try")

    form.get_by_label("filter: span name").fill("no-such-span")
    form.get_by_role("button", name="Try on stored traces").click()
    none = form.locator(".try-none")
    expect(none).to_contain_text("No stored trace matches this rule yet")
    expect(form.get_by_label("try results")).to_have_count(0)

    form.get_by_label("filter: span name").fill("llm")
    form.get_by_role("button", name="Create rule").click()
    expect(page.locator("#toast")).to_contain_text("Rule each-llm-call created")
    row = page.locator(".rules-list tr[data-rule]", has_text="each-llm-call")
    expect(row.locator(".badge.level")).to_have_text("span")
    expect(row).to_contain_text('span = llm, openinference.span.kind = "LLM"')
    [rule] = service.get("/v1/online-rules").json()["data"]
    assert rule["target"] == {"level": "span"} and rule["filter"]["span_name"] == "llm"

    form.get_by_label("rule name").fill("conversations")
    level.select_option("session")
    form.get_by_label("session key").fill("app.conversation")
    form.get_by_label("quiet seconds").fill("5")
    form.get_by_role("button", name="Create rule").click()
    session_row = page.locator(".rules-list tr[data-rule]", has_text="conversations")
    expect(session_row.locator(".badge.level")).to_have_text("session (app.conversation, quiet 5 s)")
    expect(session_row.get_by_role("button", name="backfill conversations")).to_be_enabled()  # its stored sessions
    inside = (
        "t => { const p = t.closest('.panel'); const pad = parseFloat(getComputedStyle(p).paddingRight);"
        " return t.getBoundingClientRect().right <= p.getBoundingClientRect().right - pad + 1; }"
    )
    # the level and three actions fit the 1400 px window (the Review screen's queue list shares the class)
    assert page.locator(".rules-list:not(.queue-list)").evaluate(inside)
    made = {r["name"]: r for r in service.get("/v1/online-rules").json()["data"]}
    assert made["conversations"]["target"] == {"level": "session", "session_key": "app.conversation", "quiet_s": 5}
    for r in made.values():
        service.delete(f"/v1/online-rules/{r['id']}")


def _rule(service: httpx.Client, name: str, evaluator_id: str, app: str) -> str:
    body = {"name": name, "evaluator_id": evaluator_id, "filter": {"service_name": app}}
    made = service.post("/v1/online-rules", json=body)
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def test_a_backfill_shows_the_dry_run_first_then_starts_follows_progress_to_done_and_cancels(
    page: Page, service: httpx.Client, shot: Callable[[Page, str], Path]
) -> None:
    missed = send(service, "backfill-app", [(f"q{i}", f"a{i}") for i in range(4)])  # before any rule
    rule_id = _rule(service, "history", evaluator(service, "bf-scorer", SCORER), "backfill-app")
    page.goto("/#online")
    page.get_by_role("button", name="backfill history").click()
    panel = page.get_by_label("backfill of history")
    start = panel.get_by_role("button", name="Start backfill")
    expect(start).to_be_disabled()  # the dry run's numbers first
    panel.get_by_role("button", name="Dry run").click()
    numbers = panel.get_by_label("dry run")
    stored = service.post(f"/v1/online-rules/{rule_id}/backfill", json={"dry_run": True}).json()["traces"]
    assert stored >= 4  # every stored trace in the range is read, the other tests' too; 4 are the rule's
    for key, value in (("traces", str(stored)), ("targets", "4"), ("already-scored", "0"), ("to-score", "4")):
        expect(numbers.locator(f"dd[data-key='{key}']")).to_have_text(value)
    expect(numbers.locator("dd[data-key='estimate']")).to_have_text(re.compile(r"second|s$|min|h$"))
    assert service.get(f"/v1/online-rules/{rule_id}/scores").json()["count"] == 0  # the dry run stored nothing
    expect(start).to_be_enabled()
    start.click()
    state = panel.get_by_label("backfill progress").locator(".backfill-state")
    expect(state).to_have_attribute("data-status", "done", timeout=WAIT_MS)
    expect(state).to_contain_text("4/4 scored · 0 skipped")
    expect(state.locator(".badge")).to_have_class(re.compile(r"\bstatus-ok\b"))
    for trace_id in missed:  # the feed shows the backfill's scores
        chip = page.locator(f"table.feed tr[data-trace='{trace_id}'] .chip[data-rule='{rule_id}']")
        expect(chip).to_have_attribute("data-state", "done")
    shot(page, "online-backfill")
    scores = service.get(f"/v1/online-rules/{rule_id}/scores").json()["data"]
    assert len(scores) == 4 and {s["label"] for s in scores} == {"seen"}

    panel.get_by_role("button", name="Dry run").click()  # again: everything is scored now
    expect(numbers.locator("dd[data-key='already-scored']")).to_have_text("4")
    expect(numbers).to_contain_text("Nothing to score")
    expect(start).to_be_disabled()
    panel.get_by_role("button", name="close the backfill").click()

    send(service, "slow-app", [(f"s{i}", "x") for i in range(5)])
    slow_id = _rule(service, "slow-history", evaluator(service, "bf-slow", SLOW), "slow-app")
    page.get_by_role("button", name="Refresh").click()
    page.get_by_role("button", name="backfill slow-history").click()
    panel = page.get_by_label("backfill of slow-history")
    panel.get_by_role("button", name="Dry run").click()
    expect(panel.get_by_label("dry run").locator("dd[data-key='to-score']")).to_have_text("5")
    panel.get_by_role("button", name="Start backfill").click()
    state = panel.get_by_label("backfill progress").locator(".backfill-state")
    expect(state).to_have_attribute("data-status", "running")

    def followed(request: Request) -> bool:
        return "/backfills/" in request.url and request.method == "GET"

    polls: list[str] = []
    page.on("request", lambda r: polls.append(r.url) if followed(r) else None)
    open_screen(page, "Datasets & jobs")  # left: the backfill is not followed in the background
    page.wait_for_timeout(500)  # a poll already in flight may still land
    left = len(polls)
    page.wait_for_timeout(2500)  # what is under test: more than two poll intervals pass with nothing sent
    assert len(polls) == left, polls[left:]
    with page.expect_request(followed, timeout=15_000):  # shown again: followed again
        open_screen(page, "Online")
    expect(state).to_have_attribute("data-status", "running")
    panel.get_by_role("button", name="Cancel backfill").click()
    expect(state).to_have_attribute("data-status", "cancelled")
    expect(state).to_contain_text("cancelled")
    expect(panel.get_by_role("button", name="Cancel backfill")).to_be_hidden()
    backfill_id = state.get_attribute("data-backfill")
    got = service.get(f"/v1/online-rules/{slow_id}/backfills/{backfill_id}").json()
    assert got["status"] == "cancelled"
    for rid in (rule_id, slow_id):
        service.delete(f"/v1/online-rules/{rid}")


def test_a_backfill_whose_every_target_failed_is_shown_red_with_the_services_reason(
    page: Page, service: httpx.Client, shot: Callable[[Page, str], Path]
) -> None:
    send(service, "broken-app", [("x", "y"), ("z", "w")])
    rule_id = _rule(service, "always-broken", evaluator(service, "bf-broken", BROKEN), "broken-app")
    page.goto("/#online")
    page.get_by_role("button", name="backfill always-broken").click()
    panel = page.get_by_label("backfill of always-broken")
    panel.get_by_role("button", name="Dry run").click()
    expect(panel.get_by_label("dry run").locator("dd[data-key='to-score']")).to_have_text("2")
    panel.get_by_role("button", name="Start backfill").click()
    state = panel.get_by_label("backfill progress").locator(".backfill-state")
    expect(state).to_have_attribute("data-status", "failed", timeout=WAIT_MS)
    expect(state).to_have_class(re.compile(r"\bbad-box\b"))
    expect(state.locator(".badge")).to_have_class(re.compile(r"\bstatus-failed\b"))
    expect(state).to_contain_text("2 failed")
    expect(state.locator(".backfill-reason")).to_contain_text("every one of its 2 target(s) failed")
    expect(state.locator(".backfill-reason")).to_contain_text("ValueError: always broken")
    color = state.locator(".badge").evaluate("e => getComputedStyle(e).color")
    ok_color = page.evaluate(
        "() => { const b = document.createElement('span'); b.className = 'badge status-ok'; document.body.append(b);"
        " const c = getComputedStyle(b).color; b.remove(); return c; }"
    )
    assert color != ok_color  # not the success colour
    shot(page, "online-backfill-failed")
    service.delete(f"/v1/online-rules/{rule_id}")


def test_a_backfill_answered_from_the_result_cache_shows_its_cached_count_beside_scored_and_skipped(
    page: Page, service: httpx.Client, shot: Callable[[Page, str], Path]
) -> None:
    send(service, "cached-app", [(f"c{i}", f"d{i}") for i in range(3)])
    made = service.post(
        "/v1/evaluators",
        json={"name": "bf-cached", "language": "python", "code": SCORER, "settings": {"cache": True}},
    )
    assert made.status_code == 201, made.text
    first_id = _rule(service, "cached-first", made.json()["id"], "cached-app")
    started = service.post(f"/v1/online-rules/{first_id}/backfill", json={}).json()

    def ended() -> dict[str, object] | None:
        got = dict(service.get(f"/v1/online-rules/{first_id}/backfills/{started['id']}").json())
        return got if got["status"] != "running" else None

    first = wait_until(ended, WAIT_MS / 1000, 0.1, what="the first backfill ended")
    assert (first["status"], first["done"], first["cached"]) == ("done", 3, 0)  # ran: its results are cached now
    second_id = _rule(service, "cached-again", made.json()["id"], "cached-app")  # the same evaluator and cases
    page.goto("/#online")
    page.get_by_role("button", name="backfill cached-again").click()
    panel = page.get_by_label("backfill of cached-again")
    panel.get_by_role("button", name="Dry run").click()
    expect(panel.get_by_label("dry run").locator("dd[data-key='to-score']")).to_have_text("3")
    panel.get_by_role("button", name="Start backfill").click()
    state = panel.get_by_label("backfill progress").locator(".backfill-state")
    expect(state).to_have_attribute("data-status", "done", timeout=WAIT_MS)
    counts = state.locator(".backfill-counts")
    expect(counts).to_have_text("3/3 scored · 0 skipped · 3 cached")
    expect(counts.locator("[data-key='cached']")).to_have_attribute("title", re.compile("result cache"))
    shot(page, "online-backfill-cached")
    for rid in (first_id, second_id):
        service.delete(f"/v1/online-rules/{rid}")


def test_a_session_level_rules_backfill_counts_and_scores_its_stored_sessions(
    page: Page, service: httpx.Client, shot: Callable[[Page, str], Path]
) -> None:
    send(service, "bf-session-app", [("hi", "HI"), ("bye", "BYE")], session="bf-conv/1")  # before any rule
    turns = "def evaluate(inputs, outputs, trace):\n    return float(trace['num_traces'])\n"
    body = {"name": "bf-sessions", "evaluator_id": evaluator(service, "bf-turns", turns),
            "filter": {"service_name": "bf-session-app"}, "target": {"level": "session", "quiet_s": 1}}  # fmt: skip
    made = service.post("/v1/online-rules", json=body)
    assert made.status_code == 201, made.text
    rule_id = made.json()["id"]
    page.goto("/#online")
    page.get_by_role("button", name="backfill bf-sessions").click()
    panel = page.get_by_label("backfill of bf-sessions")
    panel.get_by_role("button", name="Dry run").click()
    numbers = panel.get_by_label("dry run")
    expect(numbers.locator("dd[data-key='targets']")).to_have_text("1")
    expect(numbers.locator("dd[data-key='to-score']")).to_have_text("1")
    expect(numbers).to_contain_text("stored sessions in the range")  # a session-level dry run reads sessions
    expect(numbers).to_contain_text("matching sessions")
    expect(numbers).not_to_contain_text("traces")
    panel.get_by_role("button", name="Start backfill").click()
    state = panel.get_by_label("backfill progress").locator(".backfill-state")
    expect(state).to_have_attribute("data-status", "done", timeout=WAIT_MS)
    expect(state.locator(".backfill-counts")).to_have_text("1/1 scored · 0 skipped · 0 cached")
    [score] = service.get(f"/v1/online-rules/{rule_id}/scores").json()["data"]
    assert (score["session_id"], score["score"], score["current"]) == ("bf-conv/1", 2.0, True)
    service.delete(f"/v1/online-rules/{rule_id}")


def test_sessions_are_listed_and_one_opens_with_its_scores_conversation_and_traces(
    page: Page, service: httpx.Client, shot: Callable[[Page, str], Path]
) -> None:
    code = "def evaluate(inputs, outputs, trace):\n    return {'score': trace['num_traces'], 'label': 'turns'}\n"
    body = {
        "name": "per-conversation",
        "evaluator_id": evaluator(service, "session-scorer", code),
        "filter": {"service_name": "session-app"},
        "target": {"level": "session", "quiet_s": 1},
    }
    rule_id = service.post("/v1/online-rules", json=body).json()["id"]
    traces = send(service, "session-app", [("hi", "hello"), ("how are you?", "fine")], session="conv-web-1")

    def scored() -> dict[str, object] | None:
        found = service.get("/v1/sessions/conv-web-1").json()
        return next((s for s in found["scores"] if s["rule_id"] == rule_id and s["state"] == "done"), None)

    score = wait_until(scored, WAIT_MS / 1000, 0.2, what="the session scored")
    page.goto("/#online")
    row = page.get_by_label("sessions").locator("tr[data-session='conv-web-1']")
    expect(row).to_contain_text("2")
    row.click()
    view = page.locator(".session-view[data-session='conv-web-1']")
    card = view.locator(f".score-card[data-rule='{rule_id}']")
    expect(card.locator(".score-value")).to_have_text("2")
    expect(card).to_contain_text("turns")
    conversation = view.get_by_label("conversation", exact=True)
    expect(conversation.locator("li")).to_have_count(4)
    expect(conversation).to_contain_text("how are you?")
    shot(page, "online-session")
    view.get_by_label("session traces").locator(f"button[data-trace='{traces[0]}']").click()
    first = page.locator(f".trace-view[data-trace='{traces[0]}']")
    expect(first).to_be_visible()
    expect(page.locator(".session-view")).to_have_count(0)
    first.get_by_role("button", name="open session conv-web-1").click()  # the session its spans name
    expect(page.locator(".session-view[data-session='conv-web-1']")).to_be_visible()

    holder = str(score["trace_id"])  # the trace the session's score is stored with: its score card links it
    page.locator(f"table.feed tr[data-trace='{holder}']").click()
    card = page.locator(f".trace-view[data-trace='{holder}'] .score-card[data-rule='{rule_id}']")
    card.get_by_role("button", name="open the scored session conv-web-1").click()
    expect(page.locator(".session-view[data-session='conv-web-1']")).to_be_visible()
    service.delete(f"/v1/online-rules/{rule_id}")
