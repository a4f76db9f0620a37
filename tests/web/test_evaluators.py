"""Save and revise, revisions and their diff, running a revision by id, and migrating a legacy
evaluator (the diff, the equivalence run, the new revision), in a real browser."""

from __future__ import annotations

import json
import re

import httpx
from playwright.sync_api import Page, expect

from tests.support.web import open_screen, set_cases, set_code

V1 = "def evaluate(inputs, outputs, trace):\n    return outputs == inputs['correct_answer']\n"
V2 = "def evaluate(inputs, outputs, trace):\n    return outputs.strip().lower() == inputs['correct_answer'].lower()\n"
LEGACY = (
    "def evaluate(app_params, inputs, output, correct_answer):\n"
    "    if output.strip().lower() == correct_answer.lower():\n"
    "        return 1.0\n"
    "    return 0.0\n"
)
CASES = [
    {"inputs": {"correct_answer": "Paris"}, "outputs": "Paris"},
    {"inputs": {"correct_answer": "Paris"}, "outputs": " paris "},
]


def test_save_revise_diff_two_revisions_and_run_an_old_one_by_id(page: Page, service: httpx.Client, shot) -> None:  # type: ignore[no-untyped-def]
    page.goto("/")
    set_code(page, V1)
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#toast")).to_contain_text("Name the evaluator first")
    page.get_by_label("evaluator name").fill("exact-match")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#toast")).to_contain_text("Saved exact-match, revision 1")
    expect(page.locator(".bound")).to_contain_text("editing exact-match")

    set_code(page, V2)
    page.get_by_role("button", name="Save revision").click()
    expect(page.locator("#toast")).to_contain_text("revision 2")
    stored = service.get("/v1/evaluators").json()["data"]
    # one evaluator of that name, at revision 2 (the module's other tests store theirs on the same service)
    assert [(e["name"], e["revision"]) for e in stored if e["name"] == "exact-match"] == [("exact-match", 2)]

    set_cases(page, CASES)
    open_screen(page, "Evaluators")
    page.locator(".evaluator-list tr", has_text="exact-match").click()
    expect(page.locator(".revisions tbody tr")).to_have_count(2)
    diff = page.locator(".diff")
    expect(diff.locator(".diff-del")).to_contain_text("return outputs == inputs['correct_answer']")
    expect(diff.locator(".diff-add")).to_contain_text("outputs.strip().lower()")
    expect(diff).to_contain_text("+1 −1 line(s)")
    shot(page, "evaluators-light")

    page.get_by_label("revision to run").select_option("1")
    page.get_by_role("button", name="▶ Run with the editor's cases").click()
    expect(page.locator(".run-state.done")).to_contain_text("revision 1: 2 case(s)")
    rows = page.locator(".detail table.results tbody tr")
    expect(rows.nth(0).locator(".score")).to_have_text("1")
    expect(rows.nth(1).locator(".score")).to_have_text("0")  # revision 1 does not strip

    page.get_by_label("revision to run").select_option("2")
    page.get_by_role("button", name="▶ Run with the editor's cases").click()
    expect(page.locator(".run-state.done")).to_contain_text("revision 2: 2 case(s)")
    expect(rows.nth(1).locator(".score")).to_have_text("1")

    page.locator(".revisions tr[data-revision='1']").get_by_role("button", name="Open").click()
    expect(page.locator(".bound")).to_contain_text("from revision 1")
    editor = page.get_by_label("evaluator code", exact=True)
    expect(editor).to_contain_text("return outputs == inputs['correct_answer']")


def test_migrate_a_pasted_legacy_evaluator_diff_equivalence_and_save_as_a_new_revision(
    page: Page, service: httpx.Client, shot
) -> None:  # type: ignore[no-untyped-def]
    page.goto("/")
    open_screen(page, "Migrate")
    set_cases(page, CASES)  # the Migrate screen's own cases
    set_code(page, LEGACY, label="legacy evaluator code")
    page.get_by_role("button", name="Migrate ▶").click()
    expect(page.locator(".migration")).to_contain_text("legacy")
    diff = page.locator(".migration .diff")
    expect(diff.locator(".diff-del").first).to_contain_text("def evaluate(app_params, inputs, output, correct_answer):")
    expect(diff.locator(".diff-add").first).to_contain_text("def evaluate(inputs, outputs, trace):")

    page.get_by_role("button", name="Equivalence run on these cases").click()
    expect(page.locator(".equivalence .ok-box")).to_have_text("All 2 case(s) agree")
    expect(page.locator(".equivalence-table tbody tr.agree")).to_have_count(2)
    shot(page, "migrate-light")

    page.get_by_label("new evaluator name").fill("legacy-exact")
    page.get_by_role("button", name="Save as a new evaluator").click()
    expect(page.locator("#toast")).to_contain_text("Saved legacy-exact revision 2 (2 case(s) agreed)")
    evaluator = next(e for e in service.get("/v1/evaluators").json()["data"] if e["name"] == "legacy-exact")
    assert evaluator["revision"] == 2 and evaluator["interface"] == "evaluate"
    revisions = service.get(f"/v1/evaluators/{evaluator['id']}/revisions").json()["data"]
    assert [r["interface"] for r in revisions] == ["legacy", "evaluate"]


def test_migrating_code_whose_answers_change_shows_the_differing_cases_and_saves_nothing(
    page: Page, service: httpx.Client
) -> None:
    """Issue 34 point 3: the Migrate screen runs on its own cases — prefilled from the evaluator's last
    job (or a dataset's rows; else examples with app_params) — so a legacy evaluator that reads
    ``app_params`` is seen to differ (the API would answer 409), and the rewrite opens in the editor."""
    legacy = "def evaluate(app_params, inputs, output, correct_answer):\n    return app_params['weight']\n"
    created = service.post("/v1/evaluators", json={"name": "weighted", "language": "python", "code": legacy}).json()
    rows = [{"correct_answer": "a", "outputs": "a", "app_params": {"weight": w}} for w in (0.5, 0.25)]
    body = "\n".join(json.dumps(r) for r in rows).encode()
    jsonl = {"content-type": "application/jsonl"}
    dataset = service.post("/v1/datasets", params={"name": "weights"}, content=body, headers=jsonl).json()
    job = service.post("/v1/jobs", json={"evaluator_id": created["id"], "dataset_id": dataset["id"]}).json()
    assert service.get(f"/v1/jobs/{job['id']}", params={"wait_s": 60}).json()["status"] == "succeeded"

    page.goto("/")
    open_screen(page, "Migrate")
    screen = page.locator("#screen-migrate")
    expect(screen.locator(".cases-table tbody tr")).to_have_count(3)  # examples with app_params
    expect(screen.get_by_label("case 1 app_params")).to_have_value('{"threshold":0.5}')
    screen.get_by_label("prefill cases from a dataset").select_option(dataset["id"])
    expect(screen.locator(".cases-source")).to_contain_text("2 row(s) of dataset weights")

    open_screen(page, "Evaluators")
    page.locator(".evaluator-list tr", has_text="weighted").click()
    page.get_by_role("button", name="Migrate…").click()
    expect(page.locator(".migrate .toolbar .muted").first).to_contain_text("from weighted, revision 1")
    expect(screen.locator(".cases-source")).to_contain_text(f"2 row(s) of weighted's last job {job['id']}")
    expect(screen.get_by_label("case 2 app_params")).to_have_value('{"weight":0.25}')
    page.get_by_role("button", name="Migrate ▶").click()
    expect(page.locator(".migration")).to_be_visible()
    page.get_by_role("button", name="Equivalence run on these cases").click()
    expect(page.locator(".equivalence .bad-box")).to_contain_text("2 of 2 case(s) differ")
    expect(page.get_by_role("button", name="Save as revision 2 of weighted")).to_have_count(0)
    assert service.get(f"/v1/evaluators/{created['id']}").json()["revision"] == 1

    page.get_by_role("button", name="Open the migrated code in the editor").click()
    expect(page).to_have_url(re.compile(r"#editor$"))
    expect(page.get_by_label("evaluator code", exact=True)).to_contain_text("def evaluate(inputs, outputs, trace):")
    expect(page.get_by_label("evaluator name")).to_have_value("weighted (migrated)")
    expect(page.locator(".bound")).to_contain_text("new evaluator (not saved)")


def test_each_revision_shows_its_own_time_and_repeated_names_show_ids(page: Page, service: httpx.Client) -> None:
    """Issue 34 point 5: the revision list shows when each revision was saved (not the evaluator's
    creation time for all), and two evaluators of one name are told apart by their ids."""
    first = service.post("/v1/evaluators", json={"name": "twin", "language": "python", "code": V1}).json()
    service.patch(f"/v1/evaluators/{first['id']}", json={"code": V2})
    second = service.post("/v1/evaluators", json={"name": "twin", "language": "python", "code": V1}).json()
    revisions = service.get(f"/v1/evaluators/{first['id']}/revisions").json()["data"]
    assert revisions[0]["updated_at"] != revisions[1]["updated_at"]  # the API gives each revision's time
    page.goto("/")
    open_screen(page, "Evaluators")
    rows = page.locator(".evaluator-list tr", has_text="twin")
    expect(rows).to_have_count(2)
    expect(rows.filter(has_text=first["id"])).to_have_count(1)
    expect(rows.filter(has_text=second["id"])).to_have_count(1)
    rows.filter(has_text=first["id"]).click()
    for revision in revisions:
        saved = page.locator(f".revisions tr[data-revision='{revision['revision']}'] td[data-saved]")
        expect(saved).to_have_attribute("data-saved", revision["updated_at"])


def test_the_example_cases_set_every_app_params_key_the_legacy_code_reads(page: Page) -> None:
    """The walkthrough's residue of issue 34 point 3: the examples set only ``threshold``, so pasted legacy
    code reading another key (``temperature``) "agreed" on them and was offered for saving. Migrating
    untouched examples gives each key the code reads a value, and the equivalence run shows the change."""
    legacy = (
        "def evaluate(app_params, inputs, output, correct_answer):\n"
        "    return float(output == correct_answer) * app_params.get('temperature', 1.0)\n"
    )
    page.goto("/")
    open_screen(page, "Migrate")
    screen = page.locator("#screen-migrate")
    set_code(page, legacy, label="legacy evaluator code")
    page.get_by_role("button", name="Migrate ▶").click()
    expect(page.locator(".migration")).to_be_visible()
    expect(screen.get_by_label("case 1 app_params")).to_have_value('{"threshold":0.5,"temperature":0.5}')
    page.get_by_role("button", name="Equivalence run on these cases").click()
    expect(page.locator(".equivalence .bad-box")).to_contain_text("case(s) differ")
    expect(page.get_by_role("button", name="Save as a new evaluator")).to_have_count(0)
