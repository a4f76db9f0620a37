"""Issue 48 points 1 and 3 in the browser: a green result on the page always means something was checked.

The Migrate screen prefilled from a job that ran without a mapping (the answer column is ``response``, so
``outputs`` is null on every row) said "All N case(s) agree" (0 vs 0 on every row) and offered to save;
now it says nothing was compared, names the field and the column that looks meant, and offers no save.
A job whose every row errored is red (``failed``, ``AllRowsErrored``), and "Recent jobs" shows each job's
error count.
"""

from __future__ import annotations

import json

import httpx
from playwright.sync_api import Page, expect

from tests.support.web import open_screen

LEGACY = "def evaluate(app_params, inputs, output, correct_answer):\n    return float(output == correct_answer)\n"
STRIP = "def evaluate(inputs, outputs, trace):\n    return outputs.strip() == 'Paris'\n"
JSONL = {"content-type": "application/jsonl"}


def test_migrate_prefilled_from_a_job_without_a_mapping_says_nothing_was_compared_and_offers_no_save(
    page: Page, service: httpx.Client
) -> None:
    created = service.post("/v1/evaluators", json={"name": "unmapped", "language": "python", "code": LEGACY}).json()
    rows = [{"question": f"q{n}", "response": "Paris", "correct_answer": "Paris"} for n in range(10)]
    body = "\n".join(json.dumps(r) for r in rows).encode()
    dataset = service.post("/v1/datasets", params={"name": "answers"}, content=body, headers=JSONL).json()
    job = service.post("/v1/jobs", json={"evaluator_id": created["id"], "dataset_id": dataset["id"]}).json()
    assert service.get(f"/v1/jobs/{job['id']}", params={"wait_s": 60}).json()["status"] == "succeeded"

    page.goto("/")
    open_screen(page, "Evaluators")
    page.locator(".evaluator-list tr", has_text="unmapped").click()
    page.get_by_role("button", name="Migrate…").click()
    screen = page.locator("#screen-migrate")
    expect(screen.locator(".cases-source")).to_contain_text(f"10 row(s) of unmapped's last job {job['id']}")
    page.get_by_role("button", name="Migrate ▶").click()
    expect(page.locator(".migration")).to_be_visible()
    page.get_by_role("button", name="Equivalence run on these cases").click()
    verdict = page.locator(".equivalence [role=status]")
    expect(verdict).to_have_class("bad-box")
    expect(verdict).to_contain_text(
        "Nothing compared: outputs (the legacy code's output) is null or missing on every one"
    )
    expect(verdict).to_contain_text('Did you mean the column "response" as outputs')
    expect(verdict).not_to_contain_text("agree")
    expect(page.get_by_role("button", name="Save as revision 2 of unmapped")).to_have_count(0)
    assert service.get(f"/v1/evaluators/{created['id']}").json()["revision"] == 1


def test_a_job_whose_every_row_errored_is_red_and_recent_jobs_show_each_jobs_error_count(
    page: Page, service: httpx.Client
) -> None:
    created = service.post("/v1/evaluators", json={"name": "strips", "language": "python", "code": STRIP}).json()
    broken = [{"outputs": n} for n in range(5)]  # an int has no strip(): every row errors
    mixed = [{"outputs": "Paris"}, {"outputs": 1}, {"outputs": " Paris "}]
    jobs = [
        service.post("/v1/jobs", json={"evaluator_id": created["id"], "rows": rows}).json() for rows in (broken, mixed)
    ]
    finished = [service.get(f"/v1/jobs/{j['id']}", params={"wait_s": 60}).json() for j in jobs]
    assert [j["status"] for j in finished] == ["failed", "succeeded"]

    page.goto("/#jobs")
    failed_row = page.locator(f"tr[data-job-row='{jobs[0]['id']}']")
    expect(failed_row.locator(".badge")).to_have_text("failed")
    expect(failed_row.locator(".badge")).to_have_class("badge status-failed")
    expect(failed_row.locator("td[data-errors]")).to_have_text("5")
    expect(page.locator(f"tr[data-job-row='{jobs[1]['id']}'] td[data-errors]")).to_have_text("1")
    failed_row.click()
    box = page.locator(f"[data-job='{jobs[0]['id']}']")
    expect(box).to_have_attribute("data-status", "failed")
    expect(box.locator(".error-box")).to_contain_text("AllRowsErrored: every one of the job's 5 rows errored")
    expect(box.locator(".error-box")).to_contain_text("AttributeError on 5 of 5 rows (e.g. row 0, line 2")
    color = box.locator(".badge.status-failed").evaluate("el => getComputedStyle(el).color")
    ok = page.locator(".badge.status-succeeded").first
    assert color != "" and color != ok.evaluate("el => getComputedStyle(el).color")  # red, not the green of ok
