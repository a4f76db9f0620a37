"""The data disk full (ENOSPC) during an upload, a build and a job's result commits.

The data dir is on a small tmpfs that the test fills to the last byte. Each write answers
507 ``StorageFull`` with ``Retry-After`` in the error envelope (nothing half-written is kept or
listed), a job waits for room instead of failing, the database stays intact, and everything
works again once space returns — without restarting the service.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.errors import ErrorBody
from tests.support.faults import SmallDisk, tiny_wheel
from tests.support.service import assert_healthy, make_settings
from tests.support.wait import wait_until

JSONL = {"content-type": "application/jsonl"}
CODE = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"


@pytest.fixture
def service(small_disk: SmallDisk, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[TestClient]:
    wheels = tmp_path / "wheels"
    tiny_wheel(wheels)
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # builds install the local wheel, offline
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))

    # the chunk executor's wait before writing again to a full disk: 0.2 s, not up to 10 s
    settings = make_settings(small_disk.root / "data", backend="process", job_backoff_max_s=0.2)
    with TestClient(create_app(settings)) as client:
        yield client


def _storage_full(answer: Any) -> None:
    assert answer.status_code == 507, answer.text
    assert int(answer.headers["Retry-After"]) > 0
    assert ErrorBody.model_validate(answer.json()).error.type == "StorageFull"
    assert "disk is full" in answer.json()["error"]["message"]


def _intact(data_dir: Path) -> None:
    with sqlite3.connect(data_dir / "evaluator-host.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_an_upload_to_a_full_disk_is_507_lists_nothing_and_works_once_space_returns(
    service: TestClient, small_disk: SmallDisk
) -> None:
    lines = [b'{"i": %d, "outputs": "%s"}\n' % (i, b"x" * 200) for i in range(2000)]
    rows = b"".join(lines)
    kept = service.post("/v1/datasets", content=b"".join(lines[:10]), headers={"content-type": "application/jsonl"})
    assert kept.status_code == 201
    small_disk.fill()
    _storage_full(service.post("/v1/datasets", content=rows, headers={"content-type": "application/jsonl"}))
    listed = service.get("/v1/datasets").json()["data"]
    assert [d["id"] for d in listed] == [kept.json()["id"]]  # no half dataset is ever listed
    leftovers = sorted(p.name for p in (small_disk.root / "data" / "datasets").iterdir())
    assert leftovers == sorted(f"{kept.json()['id']}{s}" for s in (".cols", ".idx", ".jsonl"))
    small_disk.free()
    again = service.post("/v1/datasets", content=rows, headers={"content-type": "application/jsonl"})
    assert again.status_code == 201 and again.json()["row_count"] == 2000
    _intact(small_disk.root / "data")


def test_a_build_on_a_full_disk_is_507_leaves_no_runtime_and_builds_once_space_returns(
    service: TestClient, small_disk: SmallDisk
) -> None:
    body = {
        "name": "pinned",
        "language": "python",
        "packages": {"evhtiny": "1.0"},
        "code": "import evhtiny\n\ndef evaluate(inputs, outputs, trace):\n    return evhtiny.VALUE / 42\n",
    }
    small_disk.fill()
    _storage_full(service.post("/v1/evaluators", json=body))
    assert service.get("/v1/evaluators").json()["data"] == []
    runtimes = small_disk.root / "data" / "runtimes"
    assert not [p.name for p in runtimes.iterdir() if not p.name.endswith(".lock")]  # no runtime, no partial
    small_disk.free()
    saved = service.post("/v1/evaluators", json=body)
    assert saved.status_code == 201, saved.text
    answer = service.post(f"/v1/evaluators/{saved.json()['id']}/evaluate", json={"inputs": {}, "outputs": None})
    assert answer.json()["score"] == 1.0
    _intact(small_disk.root / "data")


def test_a_job_whose_commits_meet_a_full_disk_waits_then_finishes_every_row_once(
    service: TestClient, small_disk: SmallDisk, caplog: pytest.LogCaptureFixture
) -> None:
    total = 600
    code = (
        "import time\n\ndef evaluate(inputs, outputs, trace):\n"
        "    time.sleep(0.005)\n    print('o' * 8000)\n    return {'score': 1.0, 'i': inputs['i']}\n"
    )
    ev = service.post("/v1/evaluators", json={"name": "loud", "language": "python", "code": code}).json()
    job = service.post("/v1/jobs", json={"evaluator_id": ev["id"], "rows": [{"i": i} for i in range(total)]}).json()
    wait_until(
        lambda: service.get(f"/v1/jobs/{job['id']}").json()["progress"]["done"] > 0, 120, what="the job to commit rows"
    )
    with caplog.at_level(logging.WARNING, logger="evaluator_host.jobs.running.executor"):
        small_disk.fill()
        wait_until(lambda: "waits for disk space" in caplog.text, 60, what="a commit to meet the full disk")
        during = service.get(f"/v1/jobs/{job['id']}").json()
        assert during["status"] == "running" and during["error"] is None  # waiting, not failed
        _storage_full(service.post("/v1/datasets", content=b'{"a": 1}\n', headers=JSONL))
        small_disk.free()
    finished = wait_until(
        lambda: (j := service.get(f"/v1/jobs/{job['id']}").json())["status"] not in ("queued", "running") and j,
        120,
        what="the job to finish",
    )
    assert finished["status"] == "succeeded", finished
    assert finished["progress"] == {"total": total, "done": total, "failed": 0, "cached": 0}
    with sqlite3.connect(small_disk.root / "data" / "evaluator-host.db") as db:
        stored = [i for (i,) in db.execute("SELECT idx FROM job_results WHERE job_id = ? ORDER BY idx", (job["id"],))]
    assert stored == list(range(total))  # every row exactly once
    _intact(small_disk.root / "data")
    assert_healthy(service)
