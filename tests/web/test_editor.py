"""The editor screen in a real browser: live inspection, pins, capabilities, Run, a runtime error's line,
the "building packages…" state, light and dark."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.support.web import set_cases, set_code

SYNTAX_ERROR = "def evaluate(inputs, outputs, trace):\n    return (1 +\n"
NETWORKED = "import socket\n\ndef evaluate(inputs, outputs, trace):\n    s = socket.socket()\n    return 1.0\n"
RICH = (
    "def evaluate(inputs, outputs, trace):\n"
    "    print('checking', outputs)\n"
    "    if outputs == 'boom':\n"
    "        return inputs['missing']\n"
    "    ok = outputs == inputs['correct_answer']\n"
    "    return {'exact': ok, 'length': len(outputs) / 10, 'label': 'good' if ok else 'bad', 'reason': 'compared'}\n"
)


def test_the_page_shows_the_detected_interface_errors_at_their_line_and_the_capability_report(page: Page, shot) -> None:  # type: ignore[no-untyped-def]
    page.goto("/")
    expect(page.locator(".interface")).to_contain_text("evaluate(inputs, outputs, trace)")
    shot(page, "editor-light")

    set_code(page, SYNTAX_ERROR)
    expect(page.locator(".interface")).to_have_text("No interface detected")
    problem = page.locator(".problems li").first
    expect(problem).to_contain_text("SyntaxError")
    expect(problem).to_contain_text(re.compile(r"line 2:\d+"))
    # issue 34 point 9: a space before the place, and the place said once (the message's own "(line …)" dropped)
    expect(problem).to_contain_text(re.compile(r"^SyntaxError line 2:\d+ — "))
    expect(problem).not_to_contain_text("(line 2")
    expect(page.locator(".cm-lintRange-error").first).to_be_visible()  # the underline in the editor

    set_code(page, NETWORKED)
    expect(page.locator(".interface")).to_contain_text("evaluate(inputs, outputs, trace)")
    expect(page.locator(".problems li")).to_have_count(0)
    expect(page.locator(".cm-lintRange-error")).to_have_count(0)
    network = page.locator(".cap-network")
    expect(network).to_contain_text("Network")
    expect(network).to_contain_text("line 1")
    expect(network).to_contain_text("import socket")

    page.get_by_label("language", exact=True).select_option("javascript")
    set_code(page, "function evaluate(app_params, inputs, output, correct_answer) { return 1 }\n")
    expect(page.locator(".interface")).to_contain_text("legacy")


def test_each_pin_is_checked_as_it_is_typed(page: Page) -> None:
    page.goto("/")
    page.get_by_role("button", name="+ Add package").click()
    page.get_by_label("package 1 name").fill("numpy")
    page.get_by_label("package 1 version").fill("^1.26")
    state = page.locator("tr[data-pin='0'] .pin-state")
    expect(state).to_contain_text("not an exact version")
    expect(page.locator(".problems")).to_contain_text("PackageSpecError")
    page.get_by_label("package 1 version").fill("1.26.4")
    expect(state).to_contain_text("✓")
    expect(page.locator(".runtime")).to_contain_text("not built yet")
    expect(page.locator(".problems li")).to_have_count(0)


def test_run_shows_every_case_and_highlights_the_line_of_a_runtime_error(page: Page, shot) -> None:  # type: ignore[no-untyped-def]
    page.goto("/")
    set_code(page, RICH)
    set_cases(
        page,
        [
            {"inputs": {"correct_answer": "Paris"}, "outputs": "Paris"},
            {"inputs": {"correct_answer": "Paris"}, "outputs": "Lyon"},
            {"inputs": {"correct_answer": "Paris"}, "outputs": "boom"},
        ],
    )
    page.get_by_label("evaluator code", exact=True).click()
    page.keyboard.press("Control+Enter")  # runs from the keyboard
    rows = page.locator("table.results tbody tr")
    expect(rows).to_have_count(3)
    first, second, third = rows.nth(0), rows.nth(1), rows.nth(2)
    expect(first.locator(".badge").first).to_have_text("ok")
    expect(first).to_contain_text("exact 1")
    expect(first).to_contain_text("length 0.5")
    expect(first).to_contain_text("good")
    expect(first).to_contain_text("compared")
    expect(first.locator("details", has_text="stdout")).to_contain_text("checking Paris")
    expect(second).to_contain_text("exact 0")
    expect(second).to_contain_text("bad")
    expect(third.locator(".badge").first).to_have_text("error")
    expect(third).to_contain_text("KeyError")
    expect(third).to_contain_text("line 4")
    highlighted = page.locator(".cm-runtime-error")
    expect(highlighted).to_have_count(1)
    expect(highlighted).to_contain_text("return inputs['missing']")
    expect(page.locator(".aggregate .stat", has_text="errors")).to_contain_text("1")
    rates = page.locator(".aggregate .outputs-rates")  # each named output's mean: a pass rate for booleans
    expect(rates.locator(".hbar", has_text="exact")).to_contain_text("50 %")
    expect(rates.locator(".hbar", has_text="length")).to_contain_text("45 %")
    expect(page.locator(".run-state")).to_contain_text("3 case(s)")
    shot(page, "editor-run-light")

    page.get_by_role("button", name="switch light/dark").click()
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    shot(page, "editor-run-dark")


@pytest.mark.network
def test_the_first_run_of_a_new_package_set_says_it_is_building_with_the_time(page: Page) -> None:
    page.goto("/")
    set_code(page, "import six\n\ndef evaluate(inputs, outputs, trace):\n    return float(six.PY3)\n")
    page.get_by_role("button", name="+ Add package").click()
    page.get_by_label("package 1 name").fill("six")
    page.get_by_label("package 1 version").fill("1.16.0")
    expect(page.locator(".runtime")).to_contain_text("not built yet")
    page.get_by_role("button", name="▶ Run").click()
    expect(page.locator(".run-state")).to_contain_text(re.compile(r"Building packages… .* \d+(\.\d)? s"))
    expect(page.locator(".run-state")).to_be_in_viewport()  # below the fold before: brought into view
    expect(page.locator(".build-status")).to_contain_text("package set")  # from GET /v1/runtimes/{id}
    expect(page.locator("table.results tbody tr")).to_have_count(2, timeout=240_000)
    expect(page.locator(".build-log")).to_contain_text("six")  # the build log's end, kept after the run
    expect(page.locator(".run-state")).to_contain_text("packages built")
    expect(page.locator("table.results tbody tr").first).to_contain_text("ok")
    expect(page.locator(".runtime")).to_contain_text("is built")
    page.get_by_role("button", name="▶ Run").click()  # warm now: no building state
    expect(page.locator(".run-state")).not_to_contain_text("Building")


@pytest.mark.network
def test_a_run_started_before_the_pins_were_inspected_leaves_the_packages_panel_saying_built(page: Page) -> None:
    """Stop 78's web flake: a run clicked before the page had inspected the new pins ran as "Running…" (the page
    knew of no build); the inspection of the pins, answered while the run built the set, said "not built yet",
    and nothing asked again: the panel said so of a set the run had just built. After any run with packages the
    page inspects again."""
    page.goto("/")
    set_code(page, "import six\n\ndef evaluate(inputs, outputs, trace):\n    return float(six.PY2 is False)\n")
    expect(page.locator(".interface")).to_contain_text("Detected interface")
    page.get_by_role("button", name="+ Add package").click()
    page.get_by_label("package 1 name").fill("six")
    page.get_by_label("package 1 version").fill("1.15.0")  # a set nothing in this module builds before
    page.get_by_role("button", name="▶ Run").click()  # at once: the pins' inspection (250 ms later) is not in yet
    expect(page.locator(".run-state")).to_contain_text("Running…")  # the page did not know it would build
    expect(page.locator(".runtime")).to_contain_text("not built yet")  # the pins' inspection, during the build
    expect(page.locator("table.results tbody tr")).to_have_count(2, timeout=240_000)
    expect(page.locator("table.results tbody tr").first).to_contain_text("ok")
    expect(page.locator(".runtime")).to_contain_text("is built")  # inspected again after the run


def test_definition_errors_on_run_are_readable_and_dark_mode_is_kept(page: Page, shot) -> None:  # type: ignore[no-untyped-def]
    page.goto("/")
    page.get_by_role("button", name="switch light/dark").click()
    set_code(page, "def main(x, /):\n    return {'score': 1}\n")
    expect(page.locator(".problems")).to_contain_text("InterfaceError")
    page.get_by_role("button", name="▶ Run").click()
    expect(page.locator(".error-box")).to_contain_text("InterfaceError")
    expect(page.locator(".error-box")).to_contain_text("line 1")
    shot(page, "editor-error-dark")
    page.reload()
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
