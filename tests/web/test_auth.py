"""With API keys configured, the page asks for one, says when it is refused, and then works."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.support.service import serving

KEY = "playground-test-key"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """The real service with an API key configured."""
    env = {"EVALUATOR_HOST_API_KEYS": KEY}
    with serving(tmp_path_factory.mktemp("keyed"), backend="process", env=env) as (client, _proc):
        yield client


def test_the_page_asks_for_the_key_refuses_a_wrong_one_and_then_works(page: Page, shot) -> None:  # type: ignore[no-untyped-def]
    page.goto("/")
    dialog = page.get_by_role("dialog", name="API key required")
    expect(dialog).to_be_visible()
    expect(dialog.locator(".workspace-note")).to_contain_text("ws_default")  # where the data made before keys is
    shot(page, "api-key-light")
    dialog.get_by_label("API key").fill("wrong")
    dialog.get_by_role("button", name="Use this key").click()
    expect(dialog.get_by_role("alert")).to_contain_text("That key was refused")
    dialog.get_by_label("API key").fill(KEY)
    dialog.get_by_role("button", name="Use this key").click()
    expect(dialog).to_be_hidden()
    expect(page.locator(".interface")).to_contain_text("evaluate(inputs, outputs, trace)")  # /v1/inspect answered
    page.get_by_role("button", name="▶ Run").click()
    expect(page.locator("table.results tbody tr")).to_have_count(2)

    page.reload()  # the key lives in this tab's session
    expect(page.get_by_role("dialog", name="API key required")).to_be_hidden()
    expect(page.locator(".interface")).to_contain_text("evaluate(inputs, outputs, trace)")
