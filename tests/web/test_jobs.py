"""Datasets and jobs in a real browser: drop a file, map a column from the preview, start a job,
follow its progress, read the aggregate and its histogram, page the results, download them, cancel."""

from __future__ import annotations

import json
import re

import httpx
from playwright.sync_api import Page, expect

SCORER = (
    "def evaluate(inputs, outputs, trace):\n"
    "    if outputs == 'crash':\n"
    "        raise ValueError('bad row')\n"
    "    exact = outputs == inputs['answer']\n"
    "    return {'score': 1.0 if exact else 0.25, 'reason': 'exact' if exact else 'off'}\n"
)
SLOW = "import time\n\ndef evaluate(inputs, outputs, trace):\n    time.sleep(0.05)\n    return 1.0\n"
ROWS = 120


def _csv() -> str:
    lines = ["question,answer,prediction"]
    for i in range(ROWS):
        prediction = "crash" if i == 7 else str(i) if i % 4 else "wrong"
        lines.append(f"q{i},{i},{prediction}")
    return "\n".join(lines) + "\n"


def _drop(page: Page, name: str, text: str, mime: str) -> None:
    """Drag a file onto the drop zone, as a person would from their file manager."""
    transfer = page.evaluate_handle(
        "([name, text, mime]) => { const dt = new DataTransfer(); dt.items.add(new File([text], name, {type: mime})); "
        "return dt; }",
        [name, text, mime],
    )
    page.dispatch_event(".dropzone", "dragover", {"dataTransfer": transfer})
    page.dispatch_event(".dropzone", "drop", {"dataTransfer": transfer})


def test_drop_a_csv_map_a_column_run_a_job_and_read_its_aggregate_results_and_downloads(
    page: Page, service: httpx.Client, shot
) -> None:  # type: ignore[no-untyped-def]
    created = service.post("/v1/evaluators", json={"name": "scorer", "language": "python", "code": SCORER})
    assert created.status_code == 201, created.text
    page.goto("/#jobs")
    _drop(page, "answers.csv", _csv(), "text/csv")
    expect(page.locator("#toast")).to_contain_text(f"Uploaded answers: {ROWS} rows")
    preview = page.locator(".preview-table")
    expect(preview.locator("thead th")).to_have_count(3)
    expect(preview.locator("tbody tr")).to_have_count(8)

    preview.get_by_role("button", name="prediction").click()  # outputs ← prediction
    expect(page.locator("dd[data-mapped='outputs']")).to_have_text("prediction")
    expect(preview.locator("th.mapped")).to_contain_text("→ outputs")
    page.get_by_role("radio", name="inputs").click()
    preview.get_by_role("button", name="answer").click()
    expect(page.locator("dd[data-mapped='inputs']")).to_have_text("answer")

    page.get_by_label("evaluator for the job").select_option(label="scorer (r1)")
    page.get_by_role("button", name="▶ Start job").click()
    job = page.locator("[data-job]")
    expect(job).to_have_attribute("data-status", "succeeded", timeout=60_000)
    expect(page.locator(".progress-text")).to_contain_text(f"{ROWS} / {ROWS} rows")
    expect(page.locator(".progress-text")).to_contain_text("1 failed")
    expect(page.locator(".progress-text")).to_contain_text(re.compile(r"[\d.]+ rows/s"))
    aggregate = job.locator(".aggregate")
    expect(aggregate.locator(".stat", has_text="errors")).to_contain_text("1")
    histogram = aggregate.locator(".histogram .hist-col")
    expect(histogram).to_have_count(10)
    expect(histogram.nth(2)).to_have_attribute("title", "0.2–0.3: 30")  # the 0.25s: rows 0, 4, 8, … (not 7)
    expect(histogram.nth(9)).to_have_attribute("title", "0.9–1: 89")

    results = page.locator(".job-results")
    expect(results.locator(".page-label")).to_have_text(f"rows 1–50 of {ROWS}")
    expect(results.locator("tbody tr")).to_have_count(50)
    expect(results.locator("tbody tr").nth(7)).to_contain_text("ValueError: bad row")
    shot(page, "jobs-light")
    results.get_by_role("button", name="Next →").click()
    expect(results.locator(".page-label")).to_have_text(f"rows 51–100 of {ROWS}")
    results.get_by_role("button", name="Next →").click()
    expect(results.locator(".page-label")).to_have_text(f"rows 101–{ROWS} of {ROWS}")
    expect(results.get_by_role("button", name="Next →")).to_be_disabled()

    with page.expect_download() as download:
        job.get_by_role("button", name="Download NDJSON").click()
    lines = open(download.value.path()).read().splitlines()  # noqa: SIM115
    assert len(lines) == ROWS and json.loads(lines[1])["result"]["score"] == 1.0
    with page.expect_download() as download:
        job.get_by_role("button", name="Download CSV").click()
    assert download.value.suggested_filename.endswith(".csv")
    assert open(download.value.path()).read().startswith("index,")  # noqa: SIM115


def test_a_running_job_can_be_cancelled_from_the_page(page: Page, service: httpx.Client) -> None:
    evaluator = service.post("/v1/evaluators", json={"name": "slow", "language": "python", "code": SLOW}).json()
    rows = "\n".join(json.dumps({"outputs": i}) for i in range(2000))
    dataset = service.post("/v1/datasets", content=rows, headers={"content-type": "application/jsonl"}).json()
    page.goto("/#jobs")
    page.get_by_label("dataset", exact=True).select_option(dataset["id"])
    expect(page.locator(".preview-table")).to_be_visible()
    page.get_by_label("evaluator for the job").select_option(evaluator["id"])
    page.get_by_role("button", name="▶ Start job").click()
    job = page.locator("[data-job]")
    expect(job).to_have_attribute("data-status", "running", timeout=60_000)
    expect(page.locator(".progress-text")).to_contain_text(re.compile(r"ETA \d+ s"), timeout=30_000)
    recent = page.locator(f"tr[data-job-row='{job.get_attribute('data-job')}']")  # "Recent jobs" is live
    expect(recent).to_contain_text("running")
    expect(recent).to_contain_text(re.compile(r"[1-9]\d* / 2000"))
    job.get_by_role("button", name="Cancel job").click()
    expect(job).to_have_attribute("data-status", "cancelled")
    done = service.get(f"/v1/jobs/{job.get_attribute('data-job')}").json()
    assert done["status"] == "cancelled" and done["progress"]["done"] < 2000


LABELLED = (
    "def evaluate(inputs, outputs, trace):\n"
    "    if outputs is None:\n"
    "        raise ValueError('no text')\n"
    "    exact = outputs == inputs['answer']\n"
    "    return {'score': 1.0 if exact else len(outputs) / 10, 'passed': exact,\n"
    "            'label': 'good' if exact else 'bad', 'reason': f'got {outputs}'}\n"
)


def test_results_filter_sort_and_show_label_and_reason_after_mapping_a_nested_field(
    page: Page, service: httpx.Client
) -> None:
    """Issue 34 point 4: a field inside a column (``response.text``) is mapped by clicking it; the
    results filter by status, passed and label, sort by score, and show label and reason as columns."""
    evaluator = service.post("/v1/evaluators", json={"name": "labelled", "language": "python", "code": LABELLED}).json()
    texts = ["7", "abc", "7", "abcdefgh", None, "ab"]
    rows = [{"answer": "7", "response": {"text": t, "model": "m"}} for t in texts]
    body = "\n".join(json.dumps(r) for r in rows)
    dataset = service.post("/v1/datasets", content=body, headers={"content-type": "application/jsonl"}).json()
    assert dataset["name"].startswith("upload ")  # a raw body is named for when it came
    page.goto("/#jobs")
    page.get_by_label("dataset", exact=True).select_option(dataset["id"])
    nested = page.locator(".nested-fields")
    nested.get_by_role("button", name="response.text").click()  # outputs ← response.text
    expect(page.locator("dd[data-mapped='outputs']")).to_have_text("response.text")
    expect(nested.locator("[data-path='response.text']")).to_contain_text("→ outputs")
    page.get_by_label("evaluator for the job").select_option(evaluator["id"])
    page.get_by_role("button", name="▶ Start job").click()
    expect(page.locator("[data-job]")).to_have_attribute("data-status", "succeeded", timeout=60_000)

    results = page.locator(".job-results")
    table = results.locator("tbody tr")
    expect(table).to_have_count(6)
    expect(results.locator("thead")).to_contain_text("label")
    expect(table.nth(0).locator(".label-cell")).to_have_text("good")
    expect(table.nth(1).locator(".reason-cell")).to_have_text("got abc")
    expect(table.nth(4).locator(".reason-cell")).to_contain_text("ValueError: no text")

    results.get_by_label("filter by label").select_option("bad")
    expect(table).to_have_count(3)
    expect(results.locator(".page-label")).to_have_text("1–3 of 3 matching of 6 rows")
    results.get_by_label("sort results").select_option("score-desc")
    expect(table.locator(".score")).to_have_text(["0.8", "0.3", "0.2"])
    results.get_by_label("sort results").select_option("score-asc")
    expect(table.locator(".score")).to_have_text(["0.2", "0.3", "0.8"])
    results.get_by_label("filter by label").select_option("")
    results.get_by_label("filter by passed").select_option("true")
    expect(table).to_have_count(2)
    results.get_by_label("filter by passed").select_option("")
    results.get_by_label("filter by status").select_option("error")
    expect(table).to_have_count(1)
    expect(table.first).to_have_attribute("data-index", "4")
    results.get_by_label("filter by status").select_option("")
    results.get_by_label("sort results").select_option("index")
    expect(results.locator(".page-label")).to_have_text("rows 1–6 of 6")
