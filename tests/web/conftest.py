"""A real browser (Debian's chromium, driven by Playwright) against the real service.

The service is ``evaluator-host serve`` on the process backend with a fresh data dir (one per
test module); the page is the bundle ``make install`` built into web/dist. Chromium is the
system one (``/usr/bin/chromium``, or ``EVALUATOR_HOST_TEST_CHROMIUM``): Playwright downloads
no browser. Without it the tests skip, unless ``EVALUATOR_HOST_TEST_BROWSER=required`` (set by
``.ci/run``, which installs it). Screenshots go to the test's tmp dir, or to
``$EVALUATOR_HOST_SCREENSHOTS`` (``docs/screenshots`` refreshes the README's pictures).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from evaluator_host.api.routes.web import WEB_DIST
from tests.support.service import serving

CHROMIUM = os.environ.get("EVALUATOR_HOST_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
BROWSER_REQUIRED = os.environ.get("EVALUATOR_HOST_TEST_BROWSER") == "required"
SHOTS = os.environ.get("EVALUATOR_HOST_SCREENSHOTS")
TIMEOUT_MS = 30_000


def _missing() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"no chromium at {CHROMIUM} (apt install chromium)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "playwright is not installed (make install)"
    return None


MISSING = _missing()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/web/" in str(item.path).replace(os.sep, "/"):
            if MISSING and not BROWSER_REQUIRED:
                item.add_marker(pytest.mark.skip(reason=MISSING))


@pytest.fixture(scope="package")
def browser() -> Iterator[object]:
    """One headless chromium for this package's tests (Playwright's sync API keeps an event loop
    running in the main thread while it is open: other packages' ``asyncio.run`` must not see it)."""
    if MISSING:
        pytest.fail(f"EVALUATOR_HOST_TEST_BROWSER=required but {MISSING}")
    assert (WEB_DIST / "index.html").is_file(), "the playground is not built: run make install"
    from playwright.sync_api import expect, sync_playwright

    # an assertion waits as long as an action does (its own default is 5 s: a loaded machine's page may
    # take longer to show what the test then requires, as a full `make test` run showed)
    expect.set_options(timeout=TIMEOUT_MS)
    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """The real service for one test module (process backend, fresh data dir)."""
    with serving(tmp_path_factory.mktemp("web-service"), backend="process") as (client, _proc):
        yield client


@pytest.fixture
def page(browser: object, service: httpx.Client) -> Iterator[object]:
    """A fresh browser context (no stored key or theme) on the service's page, light scheme, 1400×900
    (a laptop's window: what is below 900 px is out of sight until the page scrolls to it);
    fails the test on any uncaught error in the page."""
    context = browser.new_context(  # type: ignore[attr-defined]
        base_url=str(service.base_url), viewport={"width": 1400, "height": 900}, color_scheme="light"
    )
    context.set_default_timeout(TIMEOUT_MS)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    yield opened
    context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


@pytest.fixture
def shot(tmp_path: Path):  # type: ignore[no-untyped-def]
    """``shot(page, name)`` saves a full-page screenshot (see the module docstring for where)."""
    folder = Path(SHOTS) if SHOTS else tmp_path
    folder.mkdir(parents=True, exist_ok=True)

    def take(page: object, name: str) -> Path:
        path = folder / f"{name}.png"
        page.evaluate("window.scrollTo(0, 0)")  # type: ignore[attr-defined]  # else the sticky header is drawn mid-page
        page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
        return path

    return take
