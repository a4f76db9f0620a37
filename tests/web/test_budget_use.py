"""The Online screen's rule row shows the rule's budget use (issue 51): scores this minute, sandbox seconds
this hour and model calls this minute (the egress proxy's count), each against its budget, in a real browser
against the real service."""

from __future__ import annotations

import httpx
from playwright.sync_api import Page, expect

CODE = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"


def test_a_rules_row_shows_its_scores_sandbox_seconds_and_model_calls_against_its_budgets(
    page: Page, service: httpx.Client
) -> None:
    ev = service.post("/v1/evaluators", json={"name": "budgeted", "language": "python", "code": CODE}).json()["id"]
    limits = {"scores_per_minute": 600, "sandbox_seconds_per_hour": 900, "model_calls_per_minute": 100}
    made = service.post("/v1/online-rules", json={"evaluator_id": ev, "name": "budgeted", "limits": limits})
    assert made.status_code == 201, made.text
    plain = service.post("/v1/online-rules", json={"evaluator_id": ev, "name": "unbounded"})
    assert plain.status_code == 201, plain.text
    page.goto("/#online")
    rules = page.locator(".rules-list")
    expect(rules.get_by_label("budget use of budgeted")).to_have_text(
        "0/600 scores a minute · 0/900 sandbox s an hour · 0/100 model calls a minute"
    )
    expect(rules.get_by_label("decisions of unbounded")).to_be_visible()
    expect(rules.get_by_label("budget use of unbounded")).to_have_count(0)  # no budget, not slowed: nothing shown
