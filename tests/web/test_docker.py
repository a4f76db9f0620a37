"""The docker backend behind the page: the first run of a new package set builds a runtime image
("building packages…" with the time), later runs are warm. Needs an engine and the base image."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.support.backends import docker_only
from tests.support.service import serving
from tests.support.web import set_code

pytestmark = [pytest.mark.docker, docker_only]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """The real service on the docker backend (fresh data dir: no runtime image of its own yet)."""
    with serving(tmp_path_factory.mktemp("web-docker"), backend="docker") as (client, _proc):
        assert client.get("/healthz").json()["backend"] == "docker"
        yield client


@pytest.mark.network
def test_building_packages_then_warm_runs_on_the_docker_backend(page: Page, shot, service: httpx.Client) -> None:  # type: ignore[no-untyped-def]
    code = "import six\n\ndef evaluate(inputs, outputs, trace):\n    return {'score': float(six.PY3)}\n"
    page.goto("/")
    expect(page.locator(".health")).to_have_text("docker sandbox")
    set_code(page, code)
    page.get_by_role("button", name="+ Add package").click()
    page.get_by_label("package 1 name").fill("six")
    page.get_by_label("package 1 version").fill("1.16.0")
    runtime = page.locator(".runtime")
    expect(runtime).to_contain_text(re.compile("not built yet|is built"))
    building = "not built yet" in runtime.inner_text()
    page.get_by_role("button", name="▶ Run").click()
    if building:  # another test session on this engine may have built the same image already
        expect(page.locator(".run-state")).to_contain_text(re.compile(r"Building packages… .* \d+(\.\d)? s"))
        shot(page, "editor-building-light")
    expect(page.locator("table.results tbody tr")).to_have_count(2, timeout=300_000)
    expect(page.locator("table.results tbody tr").first.locator(".badge").first).to_have_text("ok")
    try:
        expect(runtime).to_contain_text("is built")
    except AssertionError as exc:  # stop 67's full run saw "not built yet" here once: what did the service say?
        body = {"language": "python", "code": code, "packages": {"six": "1.16.0"}}
        said = service.post("/v1/inspect", json=body).json().get("runtime")
        lines = {s: page.locator(s).inner_text() for s in (".run-state", ".interface")}
        raise AssertionError(f"{exc}\nthe service's inspection now: {said}; the page: {lines}") from exc
    page.get_by_role("button", name="▶ Run").click()
    expect(page.locator(".run-state")).to_contain_text("2 case(s)")
    expect(page.locator(".run-state")).not_to_contain_text("Building")
