"""The editor's run feedback at 1400×900 (issue 34, points 2 and 9): the outcome is brought into view,
every case erroring is not green, results of other code go, a package build shows its log and a failed
one is said once and marked in the Packages panel, and switching the language offers its template."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.support.web import set_cases, set_code

ALL_FAIL = "def evaluate(inputs, outputs, trace):\n    return inputs['missing']\n"
FINE = "def evaluate(inputs, outputs, trace):\n    return outputs == inputs['correct_answer']\n"
TWO = [
    {"inputs": {"correct_answer": "Paris"}, "outputs": "Paris"},
    {"inputs": {"correct_answer": "Paris"}, "outputs": "Lyon"},
]


def test_the_outcome_is_brought_into_view_all_errors_are_not_green_and_stale_results_go(page: Page) -> None:
    page.goto("/")
    set_code(page, ALL_FAIL)
    set_cases(page, TWO)
    page.evaluate("window.scrollTo(0, 0)")
    top = page.locator(".results-box").bounding_box()
    assert top and top["y"] > 850  # the outcome starts at the 900-px fold: out of sight unless scrolled to
    page.get_by_role("button", name="▶ Run").click()
    state = page.locator(".run-state")
    expect(page.locator("table.results tbody tr")).to_have_count(2)
    expect(state).to_be_in_viewport()
    expect(page.locator("table.results tbody tr").first).to_be_in_viewport()
    header = page.locator("header.top").bounding_box()
    heading = page.locator("#run-outcome h3").bounding_box()
    assert header and heading and heading["y"] >= header["y"] + header["height"]  # not under the sticky header
    expect(state).to_contain_text("every case errored")
    expect(state).to_have_class("run-state bad")

    set_code(page, FINE)  # other code: the results shown are not its results
    expect(page.locator("table.results")).to_have_count(0)
    expect(state).to_contain_text("changed since the last run")
    page.get_by_role("button", name="▶ Run").click()
    expect(page.locator("table.results tbody tr")).to_have_count(2)
    expect(state).to_have_class("run-state done")
    expect(state).not_to_contain_text("errored")


def test_switching_the_language_offers_its_template_for_code_of_the_other_language(page: Page) -> None:
    page.goto("/")
    language = page.get_by_label("language", exact=True)
    editor = page.get_by_label("evaluator code", exact=True)
    language.select_option("javascript")  # the untouched template: replaced at once
    expect(editor).to_contain_text("function evaluate(inputs, outputs, trace) {")
    expect(page.locator(".language-offer")).to_be_hidden()
    language.select_option("python")
    expect(editor).to_contain_text("def evaluate(inputs, outputs, trace):")

    set_code(page, FINE)  # edited: kept, and the template is offered
    language.select_option("typescript")
    offer = page.locator(".language-offer")
    expect(offer).to_contain_text("your Python code, which will not run as TypeScript")
    expect(editor).to_contain_text("outputs == inputs['correct_answer']")
    offer.get_by_role("button", name="Replace it with the TypeScript template").click()
    expect(editor).to_contain_text("export function evaluate(inputs: { correct_answer: string }")
    expect(offer).to_be_hidden()
    expect(page.locator(".interface")).to_contain_text("evaluate(inputs, outputs, trace)")

    set_code(page, "export function evaluate(inputs: unknown, outputs: string) { return outputs.length > 0 }\n")
    language.select_option("python")
    offer.get_by_role("button", name="Keep my code").click()
    expect(offer).to_be_hidden()
    expect(editor).to_contain_text("outputs.length > 0")


@pytest.mark.network
def test_a_failed_build_is_said_once_and_marked_in_the_packages_panel(page: Page) -> None:
    page.goto("/")
    page.get_by_role("button", name="+ Add package").click()
    page.get_by_label("package 1 name").fill("evaluator-host-no-such-package-34")
    page.get_by_label("package 1 version").fill("1.0.0")
    pin = page.locator("tr[data-pin='0'] .pin-state")
    expect(pin).to_contain_text("✓")  # a well-formed pin
    expect(page.locator(".runtime")).to_contain_text("not built yet")
    page.get_by_role("button", name="▶ Run").click()
    box = page.locator(".error-box")
    expect(box).to_contain_text("BuildError", timeout=240_000)
    expect(page.locator(".run-state")).to_be_in_viewport()
    text = box.inner_text()
    line = next(ln for ln in text.splitlines()[1:] if ln.strip())  # the installer's first line of output
    assert text.count(line) == 1, text
    expect(pin).to_contain_text("✗ build failed")
    expect(page.locator(".runtime")).to_contain_text("failed to build")
    expect(page.locator(".runtime code.runtime-id")).to_have_css("white-space", "nowrap")


def test_the_key_dialog_on_an_open_service_says_no_key_is_needed(page: Page) -> None:
    """Issue 34 point 6: the service has no keys, so the dialog is not "API key required"."""
    page.goto("/")
    expect(page.locator(".interface")).to_contain_text("evaluate(inputs, outputs, trace)")  # /v1 answered
    page.get_by_role("button", name="API key", exact=True).click()
    dialog = page.get_by_role("dialog", name="API key (optional)")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("This service is open")
    expect(dialog).not_to_contain_text("required")
