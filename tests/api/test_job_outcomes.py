"""Issue 48 points 3 and 4: a job's outcome says what it checked.

A job whose every row errored checked nothing: it ends ``failed`` with ``AllRowsErrored`` (how many rows,
the most common error type and its count, one example row with its line), never ``succeeded``; a job with
one good row still succeeds. A mapped ``outputs`` / ``inputs`` column that some rows lack is a warning
of the job (how many rows, which column), said when the job is created, not an ``AttributeError`` per row.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.support.jobs import create_evaluator, jsonl, start, upload, wait

pytestmark = pytest.mark.databases  # on SQLite and on PostgreSQL

MIXED = (
    "def evaluate(inputs, outputs, trace):\n"
    "    if inputs['i'] % 3 == 0:\n"
    "        return {}['missing']\n"
    "    return 1 / 0\n"
)


def test_a_job_whose_every_row_errored_fails_with_the_common_error_and_an_example(client: TestClient) -> None:
    ev = create_evaluator(client, MIXED)
    job = wait(client, start(client, ev["id"], rows=[{"i": i, "outputs": "x"} for i in range(1, 7)])["id"])
    assert job["status"] == "failed", job
    assert job["progress"] == {"total": 6, "done": 6, "failed": 6, "cached": 0}
    error = job["error"]
    assert error["type"] == "AllRowsErrored" and error["code"] == "all_rows_errored" and error["rows"] == 6
    assert error["most_common"] == {"type": "ZeroDivisionError", "count": 4}  # rows 1, 2, 4, 5; KeyError: 3, 6
    assert error["example"] == {"index": 0, "line": 4, "message": "division by zero"}
    assert "every one of the job's 6 rows errored" in error["message"]
    assert "ZeroDivisionError on 4 of 6 rows (e.g. row 0, line 4: division by zero)" in error["message"]
    listed = client.get("/v1/jobs", params={"evaluator_id": ev["id"]}).json()["data"]
    assert [j["status"] for j in listed] == ["failed"]


def test_a_job_with_one_row_that_ran_still_succeeds(client: TestClient) -> None:
    ev = create_evaluator(
        client, MIXED.replace("    return 1 / 0\n", "    return 1 / inputs['i'] if inputs['i'] == 1 else 1 / 0\n")
    )
    job = wait(client, start(client, ev["id"], rows=[{"i": i, "outputs": "x"} for i in range(1, 5)])["id"])
    assert job["status"] == "succeeded" and job["error"] is None, job
    assert job["progress"] == {"total": 4, "done": 4, "failed": 3, "cached": 0}


def test_mapped_columns_some_rows_lack_are_warnings_naming_the_column_and_the_rows(client: TestClient) -> None:
    ev = create_evaluator(client, "def evaluate(inputs, outputs, trace):\n    return len(outputs or '') > 0\n")
    rows = [{"question": f"q{i}", "response": "a"} for i in range(15)]
    rows += [{"question": f"q{i}"} for i in range(4)] + [{"response": None}]
    ds = upload(client, jsonl(rows))
    job = start(client, ev["id"], dataset_id=ds["id"], field_mapping={"outputs": "response", "inputs": ["question"]})
    assert job["warnings"] == [
        "field_mapping.outputs column 'response' is missing or null on 5 of the 20 rows: outputs is null there",
        "field_mapping.inputs column 'question' is missing or null on 1 of the 20 rows: inputs['question'] is null "
        "there",
    ]
    assert wait(client, job["id"])["warnings"] == job["warnings"]
    default = start(client, ev["id"], rows=[{"outputs": "a"}, {"outputs": None}, {"q": 1}])
    assert default["warnings"] == [
        "the 'outputs' column (outputs by default) is missing or null on 2 of the 3 rows: outputs is null there"
    ]
    complete = start(client, ev["id"], dataset_id=ds["id"], field_mapping={"outputs": "question"})
    assert complete["warnings"] == [
        "field_mapping.outputs column 'question' is missing or null on 1 of the 20 rows: outputs is null there"
    ]
    whole = start(client, ev["id"], rows=[{"outputs": "a"}, {"outputs": "b"}])
    assert whole["warnings"] == []


def test_testing_a_revision_without_fixtures_is_a_422_not_zero_passed(client: TestClient) -> None:
    """Issue 48, "think as a demanding user": ``/test`` of a revision without fixtures answered 200
    ``{passed: 0, failed: 0}``, a green report of nothing."""
    ev = create_evaluator(client, "def evaluate(inputs, outputs, trace):\n    return 1.0\n")
    response = client.post(f"/v1/evaluators/{ev['id']}/test", json={})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["type"] == "NothingCompared" and error["field"] == "fixtures" and "nothing to test" in error["message"]


def test_comparing_revisions_on_a_dataset_of_no_rows_is_a_422_not_zero_flipped(client: TestClient) -> None:
    ev = create_evaluator(client, "def evaluate(inputs, outputs, trace):\n    return 1.0\n")
    empty = upload(client, b"")
    body = {"base_revision": 1, "head_revision": 1, "dataset_id": empty["id"]}
    response = client.post(f"/v1/evaluators/{ev['id']}/compare", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["type"] == "NothingCompared" and response.json()["error"]["field"] == "rows"


def test_comparing_revisions_whose_every_row_errors_on_both_is_a_422_naming_the_error(client: TestClient) -> None:
    """Rows that are an error on both revisions compare nothing: every row so is a 422, not "0 flipped";
    some rows so still compare the rest."""
    ev = create_evaluator(client, "def evaluate(inputs, outputs, trace):\n    return 1 / inputs['d']\n")
    broken = {"base_revision": 1, "head_revision": 1, "cases": [{"inputs": {"d": 0}}] * 3}
    response = client.post(f"/v1/evaluators/{ev['id']}/compare", json=broken)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["type"] == "NothingCompared" and error["field"] == "errors" and error["rows"] == 3
    assert "ZeroDivisionError on 3 of 3 rows" in error["message"]
    mixed = {**broken, "cases": [{"inputs": {"d": 0}}, {"inputs": {"d": 2}}]}
    answer = client.post(f"/v1/evaluators/{ev['id']}/compare", json=mixed)
    assert answer.status_code == 200 and answer.json()["compared"] == 2, answer.text
