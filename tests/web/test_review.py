"""The Review screen in a real browser (issue 53): a queue made from a job in the page (its 422 shown in the
form), items reviewed with the keyboard only — p, f, s, a note with n and Enter, j/k and the arrows — with the
progress and the agreement so far following each verdict, a replaced verdict's history, the CSV export
downloaded, the verdicts turned into fixtures (the ones the code disagrees with named); the Evaluators screen's
agreement per revision, and "no verdicts yet" (the endpoint's 422 NothingCompared) rather than zeros."""

from __future__ import annotations

import csv
import io
import uuid
from typing import Any

import httpx
from playwright.sync_api import Page, expect

from tests.support.wait import wait_until

# score = the row's s; passed: s >= 0.5; label: its band
CODE = (
    "def evaluate(inputs, outputs, trace):\n"
    "    s = inputs['s']\n"
    "    return {'score': s, 'passed': s >= 0.5, 'label': 'high' if s >= 0.5 else 'low', 'reason': f'got {s}'}\n"
)
SCORES = [0.1, 0.2, 0.3, 0.6, 0.7, 0.8]


def _job(service: httpx.Client, name: str) -> tuple[str, str]:
    """An evaluator and a finished job of it over SCORES' rows."""
    made = service.post("/v1/evaluators", json={"name": name, "language": "python", "code": CODE})
    assert made.status_code == 201, made.text
    rows = "".join(f'{{"q": "q{i}", "s": {s}, "outputs": "a{i}"}}\n' for i, s in enumerate(SCORES))
    dataset = service.post("/v1/datasets", content=rows.encode(), headers={"content-type": "application/jsonl"})
    assert dataset.status_code == 201, dataset.text
    started = service.post("/v1/jobs", json={"evaluator_id": made.json()["id"], "dataset_id": dataset.json()["id"]})
    assert started.status_code == 202, started.text
    job_id = started.json()["id"]
    job = wait_until(
        lambda: (j := service.get(f"/v1/jobs/{job_id}").json())["status"] not in ("queued", "running") and j,
        120,
        0.05,
        what="the job",
    )
    assert job["status"] == "succeeded", job
    return made.json()["id"], job_id


def _items(service: httpx.Client, queue_id: str) -> list[dict[str, Any]]:
    got = service.get(f"/v1/review-queues/{queue_id}/items")
    assert got.status_code == 200, got.text
    return list(got.json()["data"])


def _stat(page: Page, name: str) -> Any:
    return page.locator(f".review-agreement [data-stat='{name}'] .stat-value")


def test_a_queue_made_in_the_page_is_reviewed_with_the_keyboard_exported_and_turned_into_fixtures(
    page: Page, service: httpx.Client, shot
) -> None:  # type: ignore[no-untyped-def]
    name = f"reviewed-{uuid.uuid4().hex[:6]}"
    evaluator_id, job_id = _job(service, name)
    page.goto("/#review")
    form = page.get_by_role("form", name="new review queue")
    form.get_by_label("queue name").fill("the misses")
    form.get_by_label("source kind").select_option("job")
    expect(form.get_by_label("source", exact=True).locator(f"option[value='{job_id}']")).to_have_count(1)
    form.get_by_label("source", exact=True).select_option(job_id)
    form.get_by_label("select", exact=True).select_option("score_below")
    form.get_by_label("select value").fill("0.75")
    form.get_by_label("sample").fill("2")  # over 1: the service's 422, shown in the form
    form.get_by_role("button", name="Create queue").click()
    expect(form.get_by_role("alert")).to_contain_text("ValidationError")
    expect(form.get_by_role("alert")).to_contain_text("sample")
    form.get_by_label("sample").fill("1")
    form.get_by_role("button", name="Create queue").click()
    expect(form.get_by_role("alert")).to_have_text("")

    queue = page.locator(".review-queue")
    queue_id = queue.get_attribute("data-queue")
    assert queue_id
    row = page.locator(f".queue-list tr[data-queue='{queue_id}']")
    expect(row).to_contain_text("the misses")
    expect(row).to_contain_text("score < 0.75")
    expect(row.locator("[data-col='progress']")).to_have_text("0 / 5")
    progress = queue.locator(".progress-text")
    expect(progress).to_have_text("0 / 5 reviewed")
    expect(queue.locator(".review-agreement")).to_contain_text("No verdicts yet")  # 422 NothingCompared, no toast
    expect(page.locator("#toast.error")).to_have_count(0)
    items = [i["id"] for i in _items(service, queue_id)]
    assert len(items) == 5
    card = page.locator(".item-card")
    expect(card).to_have_attribute("data-item", items[0])
    expect(card.get_by_label("the evaluator's answer")).to_contain_text("score 0.1")
    expect(card.get_by_label("the evaluator's answer")).to_contain_text("✗ fail")
    expect(card.get_by_label("the evaluator's answer")).to_contain_text("got 0.1")
    expect(card.get_by_label("the evaluator's answer")).to_contain_text("revision 1")
    expect(card.get_by_label("item inputs")).to_contain_text('"q": "q0"')

    page.keyboard.press("f")  # item 1: fail, as the evaluator said (tn)
    expect(progress).to_have_text("1 / 5 reviewed")
    expect(card).to_have_attribute("data-item", items[1])
    expect(_stat(page, "reviewed")).to_have_text("1")
    expect(_stat(page, "accuracy")).to_have_text("100%")
    page.keyboard.press("p")  # item 2: people say pass, the evaluator failed it (fn)
    expect(progress).to_have_text("2 / 5 reviewed")
    expect(_stat(page, "accuracy")).to_have_text("50%")
    page.keyboard.press("s")  # item 3: skipped, no verdict
    expect(card).to_have_attribute("data-item", items[3])
    expect(progress).to_have_text("2 / 5 reviewed")
    page.keyboard.press("n")  # item 4: a note, then pass
    expect(page.get_by_label("note", exact=True)).to_be_focused()
    page.keyboard.type("reads right")
    page.keyboard.press("Enter")
    expect(page.locator("#toast")).to_contain_text("Note kept")
    page.keyboard.press("p")
    expect(progress).to_have_text("3 / 5 reviewed")
    expect(card).to_have_attribute("data-item", items[4])
    expect(row.locator("[data-col='progress']")).to_have_text("3 / 5")
    assert service.get(f"/v1/review-queues/{queue_id}/items/{items[3]}/verdict").json()["data"][0]["note"] == (
        "reads right"
    )

    page.keyboard.press("k")  # back to item 4: replace its verdict with a fail and a note (n, Enter)
    expect(card).to_have_attribute("data-item", items[3])
    expect(card.locator(".current-verdict")).to_contain_text("reads right")
    page.keyboard.press("f")
    expect(card).to_have_attribute("data-item", items[4])
    page.keyboard.press("ArrowLeft")
    expect(card).to_have_attribute("data-item", items[3])
    history = card.locator(".history-list li")
    expect(history).to_have_count(2)
    expect(history.nth(0)).to_contain_text("✗ fail")
    expect(history.nth(0)).to_contain_text("current")
    expect(history.nth(1)).to_contain_text("reads right")
    expect(history.nth(1)).to_contain_text("replaced")
    page.keyboard.press("n")
    page.keyboard.type("says 0.6, is wrong")
    page.keyboard.press("Enter")  # the item has a verdict: Enter gives it again with the note
    expect(card).to_have_attribute("data-item", items[4])
    page.keyboard.press("ArrowUp")
    expect(history).to_have_count(3)
    expect(card.locator(".current-verdict")).to_contain_text("says 0.6, is wrong")
    expect(progress).to_have_text("3 / 5 reviewed")  # a replaced verdict is still one reviewed item
    # people: fail, pass, fail on answers fail, fail, pass — tn, fn, fp
    expect(_stat(page, "reviewed")).to_have_text("3")
    expect(_stat(page, "accuracy")).to_have_text("33.3%")
    expect(_stat(page, "confusion")).to_have_text("tp 0 · fp 1 · fn 1 · tn 1")
    page.keyboard.press("j")
    expect(card).to_have_attribute("data-item", items[4])
    shot(page, "review-light")

    with page.expect_download() as download:
        queue.get_by_role("button", name="Export CSV").click()
    exported = list(csv.DictReader(io.StringIO(open(download.value.path()).read())))  # noqa: SIM115
    assert [(r["item_id"], r["human_passed"], r["passed"], r["agree"]) for r in exported] == [
        (items[0], "False", "False", "True"),
        (items[1], "True", "False", "False"),
        (items[3], "False", "True", "False"),
    ]
    assert exported[2]["note"] == "says 0.6, is wrong"

    queue.get_by_role("button", name="Turn verdicts into fixtures").click()
    answer = queue.locator(".fixtures-answer")
    expect(answer).to_contain_text("Revision 2 holds 3 fixture(s): 3 added, 0 replaced.")
    expect(answer.locator(".disagreeing li")).to_have_text([f"review:{items[1]}", f"review:{items[3]}"])
    revision = service.get(f"/v1/evaluators/{evaluator_id}").json()
    assert revision["revision"] == 2 and {f["name"] for f in revision["fixtures"]} >= {f"review:{items[0]}"}

    page.goto("/#evaluators")
    page.locator(f".evaluator-list tr[data-id='{evaluator_id}']").click()
    table = page.locator(".agreement-table")
    for rev in (2, 1):
        line = table.locator(f"tr[data-revision='{rev}']")
        expect(line.locator("[data-col='reviewed']")).to_have_text("3")
        expect(line.locator("[data-col='accuracy']")).to_have_text("33.3%")
        expect(line.locator("[data-col='fp']")).to_have_text("1")
        expect(line.locator("[data-col='fn']")).to_have_text("1")
        expect(line.locator("[data-col='tn']")).to_have_text("1")


def test_an_evaluator_without_verdicts_says_no_verdicts_yet_and_no_zeros_or_error(
    page: Page, service: httpx.Client
) -> None:
    made = service.post(
        "/v1/evaluators", json={"name": f"unreviewed-{uuid.uuid4().hex[:6]}", "language": "python", "code": CODE}
    )
    assert made.status_code == 201, made.text
    evaluator_id = made.json()["id"]
    assert service.get(f"/v1/evaluators/{evaluator_id}/agreement").status_code == 422
    page.goto("/#evaluators")
    page.locator(f".evaluator-list tr[data-id='{evaluator_id}']").click()
    box = page.get_by_label("agreement per revision")
    expect(box).to_contain_text("No verdicts yet")
    expect(box).to_contain_text("has no reviewed items")
    expect(box.locator(".agreement-table")).to_have_count(0)
    expect(page.locator("#toast.error")).to_have_count(0)
