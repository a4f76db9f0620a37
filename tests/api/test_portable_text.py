"""What one database keeps and another refuses is answered alike on both (SQLite and PostgreSQL).

PostgreSQL refuses a NUL character in text, and counts a name's length; SQLite does neither. So a
NUL in what is stored as text (an evaluator's name, description or code, a dataset's name) is a
422 on both, before anything is stored; a NUL inside rows and results (JSON, escaped) round-trips
on both; names past their length are cut, revisions past the column's range are 422s, never a 500.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.wait import wait_until

pytestmark = pytest.mark.databases  # on SQLite and on PostgreSQL

CODE = "def evaluate(inputs, outputs, trace):\n    return {'score': 1.0, 'reason': 'a\\x00b'}\n"


@pytest.fixture(scope="module")
def client(process_client: TestClient) -> TestClient:
    return process_client


def evaluator(client: TestClient, **body: Any) -> Any:
    return client.post("/v1/evaluators", json={"name": "n", "language": "python", "code": CODE, **body})


@pytest.mark.parametrize(
    "body",
    [
        {"name": "a\x00b"},
        {"description": "d\x00"},
        {"language": "javascript", "code": "function evaluate(i, o, t) { return '\x00' ? 1 : 0 }\n"},
    ],
    ids=["name", "description", "javascript-code"],
)
def test_a_nul_in_an_evaluators_stored_text_is_a_422_and_stores_nothing(client: TestClient, body: Any) -> None:
    before = client.get("/v1/evaluators").json()["count"]
    answer = evaluator(client, **body)
    assert answer.status_code == 422 and "NUL" in answer.text, answer.text
    ok = evaluator(client).json()
    patched = client.patch(f"/v1/evaluators/{ok['id']}", json=body if "code" not in body else {"code": body["code"]})
    assert patched.status_code == 422
    assert client.get("/v1/evaluators").json()["count"] == before + 1


def test_a_nul_in_a_datasets_name_is_a_422_and_long_names_are_cut(client: TestClient) -> None:
    rows = b'{"a": 1}\n'
    named = client.post("/v1/datasets", content=rows, params={"name": "a\x00b"}, headers={"content-type": "text/csv"})
    assert named.status_code == 422 and "NUL" in named.text
    multipart = client.post("/v1/datasets", files={"file": ("x.jsonl", rows)}, data={"name": "n" * 1000})
    from_file = client.post("/v1/datasets", files={"file": ("é" * 600 + ".jsonl", rows)})
    assert multipart.status_code == from_file.status_code == 201, (multipart.text, from_file.text)
    assert multipart.json()["name"] == "n" * 200 and from_file.json()["name"] == "é" * 200


def test_nul_characters_inside_rows_and_results_round_trip(client: TestClient) -> None:
    ev = evaluator(client).json()
    job = client.post("/v1/jobs", json={"evaluator_id": ev["id"], "rows": [{"a\x00": "\x00", "outputs": 1}]}).json()
    wait_until(lambda: client.get(f"/v1/jobs/{job['id']}").json()["status"] not in ("queued", "running"), 60)
    [item] = client.get(f"/v1/jobs/{job['id']}/results").json()["data"]
    assert item["row"] == {"a\x00": "\x00", "outputs": 1} and item["result"]["reason"] == "a\x00b"


def test_revisions_past_a_revision_columns_range_are_422_not_500(client: TestClient) -> None:
    ev = evaluator(client).json()
    answer = client.post("/v1/jobs", json={"evaluator_id": ev["id"], "revision": 2**70, "rows": [{}]})
    assert answer.status_code == 422, answer.text
    answer = client.post(f"/v1/evaluators/{ev['id']}/evaluate", json={"revision": 2**31, "outputs": 1})
    assert answer.status_code == 422, answer.text
    answer = client.post(f"/v1/evaluators/{ev['id']}/evaluate", json={"revision": 2**31 - 1, "outputs": 1})
    assert answer.status_code == 404, answer.text
