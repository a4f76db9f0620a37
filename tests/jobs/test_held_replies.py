"""Job chunks let the harness hold fast replies back (``flush_ms``); every row's outcome is still its own.

A worker that dies or hangs while holding replies loses them: the pool runs the unanswered rows
again, one reply at a time, so the row that killed the worker gets the failure and every other
row its own result, each stored exactly once. Both harnesses, every backend.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.wait import wait_until

ROWS = 120
CULPRIT = 77

EXITS = {
    "python": (
        "import os\n"
        "def evaluate(inputs, outputs, trace):\n"
        f"    if inputs['i'] == {CULPRIT}:\n"
        "        os._exit(3)\n"
        "    return inputs['i'] % 2 == 0\n"
    ),
    "javascript": (
        "function evaluate(inputs, outputs, trace) {\n"
        f"  if (inputs.i === {CULPRIT}) process.reallyExit(3);\n"
        "  return inputs.i % 2 === 0;\n"
        "}\n"
    ),
}

# A hang the soft timeout cannot interrupt (SIGALRM blocked; a busy loop in JS): the host's own timer ends it.
HANGS = {
    "python": (
        "import signal\n"
        "def evaluate(inputs, outputs, trace):\n"
        f"    if inputs['i'] == {CULPRIT}:\n"
        "        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})\n"
        "        while True:\n"
        "            pass\n"
        "    return inputs['i'] % 2 == 0\n"
    ),
    "javascript": (
        "function evaluate(inputs, outputs, trace) {\n"
        f"  if (inputs.i === {CULPRIT}) {{ for (;;) {{}} }}\n"
        "  return inputs.i % 2 === 0;\n"
        "}\n"
    ),
}


def _job(client: TestClient, language: str, code: str, **settings: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    created = client.post(
        "/v1/evaluators", json={"name": "held", "language": language, "code": code, "settings": settings}
    )
    assert created.status_code == 201, created.text
    rows = [{"i": i, "outputs": None} for i in range(ROWS)]
    started = client.post("/v1/jobs", json={"evaluator_id": created.json()["id"], "rows": rows, "parallelism": 1})
    assert started.status_code in (200, 201, 202), started.text
    job_id = started.json()["id"]
    job = wait_until(
        lambda: (j := client.get(f"/v1/jobs/{job_id}").json())["status"] not in ("queued", "running") and j, 120
    )
    page = client.get(f"/v1/jobs/{job_id}/results", params={"limit": ROWS + 10}).json()
    return job, page["data"]


def _check(job: dict[str, Any], items: list[dict[str, Any]], culprit_status: str) -> dict[str, Any]:
    assert job["status"] == "succeeded", job
    failed = [(item["index"], item["result"]["status"], item["result"].get("error")) for item in items]
    failed = [row for row in failed if row[1] != "ok"]  # named in the message: which rows, and why
    assert job["progress"] == {"total": ROWS, "done": ROWS, "failed": 1, "cached": 0}, failed
    assert [item["index"] for item in items] == list(range(ROWS))  # every row once, in order
    for item in items:
        result = item["result"]
        if item["index"] == CULPRIT:
            assert result["status"] == culprit_status, result
        else:
            assert result["status"] == "ok", (item["index"], result)
            assert result["score"] == (1.0 if item["index"] % 2 == 0 else 0.0)
    culprit: dict[str, Any] = items[CULPRIT]["result"]
    return culprit


@pytest.mark.parametrize("language", sorted(EXITS))
def test_a_row_that_kills_its_worker_is_the_only_row_that_fails_when_replies_are_held(
    client: TestClient, language: str
) -> None:
    job, items = _job(client, language, EXITS[language])
    culprit = _check(job, items, "error")
    assert culprit["error"]["type"] == "WorkerExited"


@pytest.mark.parametrize("language", sorted(HANGS))
def test_a_row_that_hangs_past_the_soft_timeout_is_the_only_timeout_when_replies_are_held(
    client: TestClient, language: str
) -> None:
    job, items = _job(client, language, HANGS[language], timeout_s=0.5)
    culprit = _check(job, items, "timeout")
    assert culprit["error"]["type"] == "Timeout"
