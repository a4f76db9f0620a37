"""A NeMo metric class on the page, in a real browser: the editor names the `metric` interface and
the class, a run shows each case's named outputs, the evaluators list shows the `metric` badge."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.support.nemo import TUTORIAL_METRIC, cases
from tests.support.web import open_screen, set_cases, set_code


def test_the_editor_and_the_evaluators_list_show_a_metric_class(page: Page, shot) -> None:  # type: ignore[no-untyped-def]
    page.goto("/")
    set_code(page, TUTORIAL_METRIC)
    interface = page.locator(".interface")
    expect(interface).to_contain_text("NeMo Metric class")
    expect(interface.locator(".badge.iface-metric")).to_have_text("metric: ArithmeticExpressionCorrectnessMetric")
    set_cases(page, cases())
    page.get_by_role("button", name="▶ Run").click()
    expect(page.locator(".results-box")).to_contain_text("arithmetic-expression-correctness.valid_expression")
    shot(page, "editor-metric-light")
    page.get_by_label("evaluator name").fill("arithmetic")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#toast")).to_contain_text("Saved arithmetic, revision 1")
    open_screen(page, "Evaluators")
    row = page.locator(".evaluator-list tr", has_text="arithmetic")
    expect(row.locator(".badge.iface-metric")).to_have_text("metric")
