"""Score sinks on the page (issue 52), in a real browser against the real service: the Online screen's live
feed and trace view show each score's delivery to each sink of its rule — type and state, the attempts and
the error on hover (a sink delivered into the Langfuse stand-in, one refused by the host rule) — and the Jobs
screen shows a job with sinks' per-sink summary and each result row's delivery (a row without a trace id
skipped, saying why)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.support.langfuse import LangfuseStandIn, langfuse_stand_in
from tests.support.service import serving
from tests.support.sink_app import App, evaluator
from tests.support.wait import wait_until
from tests.support.web import open_screen

PK, SK = "pk-lf-web", "sk-lf-web-secret"
EVAL = "def evaluate(inputs, outputs, trace):\n    return {'score': 1.0 if outputs == '4' else 0.25}\n"
TRACE = "0af7651916cd43dd8448eb211c80319c"


@pytest.fixture(scope="module")
def langfuse() -> Iterator[LangfuseStandIn]:
    with langfuse_stand_in(PK, SK) as standing:
        yield standing


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, langfuse: LangfuseStandIn) -> Iterator[httpx.Client]:
    """The real service with short online timings, the stand-in's name pinned to loopback."""
    env = {
        "EVALUATOR_HOST_ONLINE_QUIET_PERIOD_S": "0.2",
        "EVALUATOR_HOST_ONLINE_ASSEMBLY_S": "0.05",
        "EVALUATOR_HOST_ONLINE_POLL_S": "0.05",
        "EVALUATOR_HOST_EGRESS_HOSTS": '{"langfuse.test": "127.0.0.1"}',
    }
    with serving(tmp_path_factory.mktemp("web-sinks"), backend="process", env=env) as (client, _proc):
        for name, value in (("LF_PK", PK), ("LF_SK", SK)):
            client.put(f"/v1/secrets/{name}", json={"value": value})
        yield client


def _sinks(port: int) -> list[dict[str, Any]]:
    keys = {"public_key": "{{secret:LF_PK}}", "secret_key": "{{secret:LF_SK}}"}
    return [
        {"type": "langfuse", "url": f"http://langfuse.test:{port}", **keys},
        {"type": "langfuse", "url": f"http://127.0.0.1:{port}", "name": "literal", **keys},  # an IP literal: refused
    ]


def test_the_online_screen_shows_each_scores_delivery_to_each_sink(
    page: Page, service: httpx.Client, langfuse: LangfuseStandIn
) -> None:
    body = {"evaluator_id": evaluator(service, EVAL), "name": "facts", "sinks": _sinks(langfuse.port)}
    rule = service.post("/v1/online-rules", json=body).json()
    app = App(str(service.base_url))
    trace_id, _root, _llm = app.request("4")
    app.provider.shutdown()

    def ended() -> bool:
        listed = service.get(f"/v1/online-rules/{rule['id']}/scores").json()["data"]
        return bool(listed) and [s["state"] for s in listed[0]["sinks"]] == ["delivered", "failed"]

    wait_until(ended, 120, 0.2, what="the score delivered to one sink and refused by the other")
    page.goto("/")
    open_screen(page, "Online")
    chip = page.locator(f"tr[data-trace='{trace_id}'] .chip[data-rule='{rule['id']}']")
    delivered = chip.locator(".badge.sink[data-sink-state='delivered']")
    expect(delivered).to_have_text("langfuse ✓ delivered")
    expect(delivered).to_have_attribute("title", "langfuse: delivered (1 attempt)")
    failed = chip.locator(".badge.sink[data-sink-state='failed']")
    expect(failed).to_contain_text("failed")
    expect(failed).to_have_attribute("title", re.compile(r"^langfuse: failed \(1 attempt\) — .*IP literal"))

    page.locator(f"tr[data-trace='{trace_id}']").click()  # the trace view's result card shows them too
    card = page.locator(f".score-card[data-rule='{rule['id']}']")
    expect(card.locator(".badge.sink")).to_have_count(2)


def test_the_jobs_screen_shows_a_jobs_sink_summary_and_each_rows_delivery(
    page: Page, service: httpx.Client, langfuse: LangfuseStandIn
) -> None:
    rows = [{"outputs": "4", "trace_id": TRACE}, {"outputs": "5"}]
    sink = _sinks(langfuse.port)[0] | {"name": "offline"}
    made = service.post("/v1/jobs", json={"evaluator_id": evaluator(service, EVAL), "rows": rows, "sinks": [sink]})
    assert made.status_code == 202, made.text
    job_id = made.json()["id"]

    def settled() -> bool:
        job = service.get(f"/v1/jobs/{job_id}").json()
        return job["status"] == "succeeded" and job["sinks"][0]["pending"] == 0

    wait_until(settled, 120, 0.2, what="the job's rows delivered")
    page.goto("/")
    open_screen(page, "Jobs")
    page.locator(f"[data-job-row='{job_id}']").click()
    panel = page.locator(f"[data-job='{job_id}']")
    expect(panel.locator(".sink-summary")).to_have_text("Sinks: langfuse offline: 1 delivered, 1 skipped")
    results = page.locator(".job-results")
    expect(results.locator("thead th", has_text="sinks")).to_have_count(1)
    first = results.locator("tbody tr[data-index='0'] .badge.sink")
    expect(first).to_have_attribute("data-sink-state", "delivered")
    second = results.locator("tbody tr[data-index='1'] .badge.sink")
    expect(second).to_have_attribute("data-sink-state", "skipped")
    expect(second).to_have_attribute("title", "langfuse: skipped (0 attempts) — row has no trace_id")
