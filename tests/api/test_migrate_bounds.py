"""The migration's differential run is bounded in bytes: a dataset sample costs no more memory
than an inline body may (``max_body_bytes``), refused with a clear 422 before its rows are parsed,
and an inline body over the bound answers 413; the service stays healthy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from tests.support.service import assert_healthy, make_settings

LEGACY_CODE = "def evaluate(app_params, inputs, output, correct_answer):\n    return 1.0\n"
BOUND = 1024 * 1024


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_settings(tmp_path_factory.mktemp("migrate-bounds"), backend="process", max_body_bytes=BOUND)
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def test_a_migration_sample_over_the_byte_bound_is_refused_before_its_rows_are_parsed(client: TestClient) -> None:
    evaluator = client.post("/v1/evaluators", json={"name": "legacy", "language": "python", "code": LEGACY_CODE})
    assert evaluator.status_code == 201, evaluator.text
    row = b'{"outputs": "' + b"x" * 400_000 + b'"}\n'  # 150 rows: 60 MB on disk
    dataset = client.post("/v1/datasets", content=row * 150, headers={"content-type": "text/jsonl"})
    assert dataset.status_code == 201, dataset.text
    before = _rss()
    path = f"/v1/evaluators/{evaluator.json()['id']}/migrate"
    refused = client.post(path, json={"dataset_id": dataset.json()["id"], "sample": 150, "dry_run": True})
    grown = _rss() - before
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["type"] == "LimitError" and "max_body_bytes" in error["message"], error
    assert grown < 48 * 1024 * 1024, f"RSS grew by {grown / 2**20:.0f} MiB"  # the sample itself is 60 MB
    fits = client.post(path, json={"dataset_id": dataset.json()["id"], "sample": 2, "dry_run": True})
    assert fits.status_code == 200 and fits.json()["compared"] == 2, fits.text
    assert_healthy(client)


def test_an_inline_migration_body_over_the_byte_bound_answers_413(client: TestClient) -> None:
    evaluator = client.post("/v1/evaluators", json={"name": "legacy-inline", "language": "python", "code": LEGACY_CODE})
    path = f"/v1/evaluators/{evaluator.json()['id']}/migrate"
    big = {"cases": [{"outputs": "x" * 100_000}] * 20, "dry_run": True}  # 2 MB of JSON
    refused = client.post(path, json=big)
    assert refused.status_code == 413, refused.text
    assert refused.json()["error"]["type"] == "PayloadTooLarge"
    assert_healthy(client)
