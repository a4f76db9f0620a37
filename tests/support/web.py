"""What a person does on the page, as functions the browser tests share."""

from __future__ import annotations

import json
from typing import Any

from playwright.sync_api import Locator, Page


def set_code(page: Page, code: str, label: str = "evaluator code") -> None:
    """Replace the editor's text (typed as one paste: no auto-indent or bracket closing)."""
    editor = page.get_by_label(label, exact=True)
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(code)


def set_cases(page: Page, cases: list[dict[str, Any]], within: Locator | None = None) -> None:
    """Type ``cases`` into the cases editor's JSON view (of the screen ``within``, default the shown
    one), then go back to the table."""
    scope = within or page.locator(".screen:not([hidden])")
    scope.get_by_role("tab", name="JSON").click()
    scope.get_by_label("cases as JSON").fill(json.dumps(cases))
    scope.get_by_role("tab", name="Table").click()


def open_screen(page: Page, name: str) -> None:
    page.get_by_role("navigation", name="screens").get_by_role("link", name=name).click()
