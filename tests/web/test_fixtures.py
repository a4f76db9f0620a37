"""The evaluators screen's fixtures and compare (issue 35), in a real browser: a revision's code beside its
fixtures with each one's outcome, a draft marked and never the latest, the fixtures run again, and two
revisions compared on the editor's cases shown as a diff of exactly the rows that flipped."""

from __future__ import annotations

import httpx
from playwright.sync_api import Page, expect

from tests.support.web import open_screen, set_cases

CODE = (
    "THRESHOLD = {t}\n"
    "def evaluate(inputs, outputs, trace):\n"
    "    x = float(outputs)\n"
    "    return {{'score': x, 'passed': x >= THRESHOLD, 'label': 'high' if x >= THRESHOLD else 'low'}}\n"
)
FIXTURES = [
    {"name": "clearly high", "outputs": 0.9, "expect": {"passed": True, "label": "high"}},
    {"name": "in the middle", "outputs": 0.6, "expect": {"passed": True}},
]
CASES = [{"outputs": x} for x in (0.1, 0.55, 0.65, 0.9)]  # 0.55 and 0.65 flip between 0.5 and 0.7


def test_fixtures_beside_the_code_a_draft_and_a_compare_shown_as_a_diff(  # type: ignore[no-untyped-def]
    page: Page, service: httpx.Client, shot
) -> None:
    body = {"name": "gate", "language": "python", "code": CODE.format(t=0.5), "fixtures": FIXTURES}
    ev = service.post("/v1/evaluators", json=body)
    assert ev.status_code == 201, ev.text
    ev_id = ev.json()["id"]
    draft = service.put(f"/v1/evaluators/{ev_id}", json=body | {"code": CODE.format(t=0.7)})
    assert draft.status_code == 409, draft.text  # revision 2: a draft ('in the middle' fails)

    page.goto("/")
    set_cases(page, CASES)
    open_screen(page, "Evaluators")
    page.locator(".evaluator-list tr", has_text="gate").click()
    expect(page.locator(".revisions tr[data-revision='2']")).to_contain_text("draft")
    # the code beside its fixtures: the newest revision (the draft) with each fixture's outcome on save
    expect(page.get_by_label("revision shown")).to_have_value("2")
    expect(page.get_by_label("revision code")).to_contain_text("THRESHOLD = 0.7")
    fixtures = page.locator("table.fixtures")
    expect(fixtures.locator("tr[data-fixture='clearly high']")).to_contain_text("pass")
    expect(fixtures.locator("tr[data-fixture='in the middle']")).to_contain_text("passed false, expected true")
    expect(page.locator(".code-fixtures").locator("..")).to_contain_text("1 of 2 fixtures passed on save")
    page.get_by_label("revision shown").select_option("1")
    expect(page.get_by_label("revision code")).to_contain_text("THRESHOLD = 0.5")
    page.get_by_role("button", name="Run fixtures").click()
    expect(page.locator(".code-fixtures").locator("..")).to_contain_text("2 of 2 fixtures passed (run now)")
    expect(fixtures.locator("tr[data-fixture='in the middle']")).to_contain_text("pass")

    # compare revision 1 with the draft on the editor's cases: exactly rows 1 and 2 flip
    page.get_by_label("compare base revision").select_option("1")
    page.get_by_label("compare head revision").select_option("2")
    page.get_by_role("button", name="Compare on rows").click()
    expect(page.locator(".compare-summary")).to_contain_text("2 of 4 rows flipped (revision 1 → 2)")
    flipped = page.locator("table.compare-rows tbody.flipped")
    expect(flipped).to_have_count(2)
    assert [flipped.nth(i).get_attribute("data-index") for i in range(2)] == ["1", "2"]
    expect(flipped.nth(0).locator(".diff-del")).to_contain_text("passed true")
    expect(flipped.nth(0).locator(".diff-add")).to_contain_text("passed false")
    expect(flipped.nth(0)).to_contain_text("passed, label")
    expect(page.locator(".compare-deltas")).to_contain_text("pass rate 0.75 → 0.25 (-0.5)")
    page.get_by_label("only flipped rows").uncheck()
    page.get_by_role("button", name="Compare on rows").click()
    expect(page.locator("table.compare-rows tbody")).to_have_count(4)
    shot(page, "evaluators-fixtures-compare")


def test_the_evaluators_code_viewer_takes_the_width_and_scrolls_long_lines_instead_of_wrapping(  # type: ignore[no-untyped-def]
    page: Page, service: httpx.Client, shot
) -> None:
    """Issue 48: at 1400x900 the code viewer was ~370 px wide and soft-wrapped Python; it gets the detail's
    width (>= 600 px) and a long line stays one line (the viewer scrolls sideways)."""
    long_line = "    return {'score': 1.0, 'reason': " + repr("a long explanation " * 8) + "}"
    code = "def evaluate(inputs, outputs, trace):\n" + long_line + "\n"
    ev = service.post("/v1/evaluators", json={"name": "wide-code", "language": "python", "code": code})
    assert ev.status_code == 201, ev.text
    page.goto("/")
    open_screen(page, "Evaluators")
    page.locator(".evaluator-list tr", has_text="wide-code").click()
    viewer = page.get_by_label("revision code")
    expect(viewer).to_contain_text("a long explanation")
    box = viewer.bounding_box()
    assert box is not None and box["width"] >= 600, box
    # the long line's text lays out in one line box (a soft wrap would give one rect per visual line)
    rects = viewer.evaluate(
        """(pre, line) => { const node = pre.firstChild; const start = node.textContent.indexOf(line);
        const range = document.createRange(); range.setStart(node, start); range.setEnd(node, start + line.length);
        return range.getClientRects().length; }""",
        long_line,
    )
    assert rects == 1, rects
    assert viewer.evaluate("(pre) => pre.scrollWidth > pre.clientWidth")  # scrolls sideways instead
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400
    shot(page, "evaluators-code-viewer")
