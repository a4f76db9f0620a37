"""Issue 35 on the page: a finished job shows its runtime and downloads its lock (requirements.txt and a
CycloneDX SBOM naming the pinned package); each result row replays on the job's revision and runtime, showing
"identical" for a deterministic evaluator and the changed field for a random one (real browser, real service)."""

from __future__ import annotations

import json
from typing import Any

import httpx
from playwright.sync_api import Page, expect

from tests.support.jobs import start, wait

STEADY = (
    "import six\n\n"
    "def evaluate(inputs, outputs, trace):\n"
    "    return {'score': float(outputs == inputs['expected']), 'label': six.__version__}\n"
)
RANDOM = "import random\n\ndef evaluate(inputs, outputs, trace):\n    return random.random()\n"


def _job(
    service: httpx.Client, name: str, code: str, packages: dict[str, str] | None = None, again: bool = False
) -> dict[str, Any]:
    """A finished job of a new evaluator over three rows (``again``: the second such job, cached: opted in)."""
    body: dict[str, Any] = {"name": name, "language": "python", "code": code, "packages": packages or {}}
    if again:
        body["settings"] = {"cache": True}
    evaluator = service.post("/v1/evaluators", json=body)
    assert evaluator.status_code == 201, evaluator.text
    rows = [{"outputs": str(i % 2), "expected": "1"} for i in range(3)]
    for _ in range(2 if again else 1):
        job = wait(service, start(service, evaluator.json()["id"], rows=rows)["id"])  # type: ignore[arg-type]
        assert job["status"] == "succeeded", job
    return job


def _open(page: Page, job_id: str) -> Any:
    page.goto("/#jobs")
    page.get_by_role("button", name="Refresh").click()  # "Recent jobs" as of now
    page.locator(f"tr[data-job-row='{job_id}']").click()
    job = page.locator(f"[data-job='{job_id}']")
    expect(job).to_have_attribute("data-status", "succeeded")
    return job


def test_a_job_downloads_its_runtime_lock_and_replays_a_row(page: Page, service: httpx.Client, shot) -> None:  # type: ignore[no-untyped-def]
    steady = _job(service, "steady", STEADY, {"six": "1.16.0"})
    job = _open(page, steady["id"])
    lock = job.locator(".runtime-lock")
    expect(lock).to_contain_text(steady["runtime_id"])
    with page.expect_download() as download:
        lock.get_by_role("button", name="requirements.txt").click()
    assert download.value.suggested_filename == "requirements.txt"
    text = open(download.value.path()).read()  # noqa: SIM115
    assert (
        "\nsix==1.16.0" in text
        and text == service.get(f"/v1/runtimes/{steady['runtime_id']}/lock", params={"format": "requirements"}).text
    )
    with page.expect_download() as download:
        lock.get_by_role("button", name="SBOM (CycloneDX)").click()
    sbom = json.loads(open(download.value.path()).read())  # noqa: SIM115
    assert any(c["purl"] == "pkg:pypi/six@1.16.0" for c in sbom["components"])

    rows = page.locator(f".job-results[data-results-of='{steady['id']}'] tbody tr")
    expect(rows).to_have_count(3)
    rows.nth(1).get_by_role("button", name="Replay").click()
    expect(rows.nth(1).locator(".replay-verdict")).to_have_text("✓ identical")
    shot(page, "job-replay-light")

    randomly = _job(service, "random", RANDOM)
    job = _open(page, randomly["id"])
    # this job's rows, not the previous job's still shown while its own load (a Replay there replays that job)
    rows = page.locator(f".job-results[data-results-of='{randomly['id']}'] tbody tr")
    expect(rows).to_have_count(3)
    rows.nth(0).get_by_role("button", name="Replay").click()
    verdict = rows.nth(0).locator(".replay-verdict")
    expect(verdict).to_contain_text("✗ differs: score: ")
    expect(job.locator(".runtime-lock")).to_contain_text("requirements.txt")  # no pins: still a lock (empty)
    with page.expect_download() as download:
        job.locator(".runtime-lock").get_by_role("button", name="requirements.txt").click()
    bare = open(download.value.path()).read()  # noqa: SIM115
    assert bare.startswith(f"# runtime {randomly['runtime_id']}: python "), bare  # the interpreter alone

    cached = _job(service, "cached", STEADY, {"six": "1.16.0"}, again=True)
    assert cached["progress"]["cached"] == 3
    _open(page, cached["id"])
    expect(page.locator(".progress-text .cached")).to_have_text(" · 3 from the cache")
