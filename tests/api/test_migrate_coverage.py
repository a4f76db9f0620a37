"""Issue 48 point 1: a differential run that compared nothing is never a saved migration.

A field the legacy code reads (``output``, ``correct_answer``, an ``app_params`` key) null on every row, or
every row an error on both versions, proves nothing: 422 ``NothingCompared`` naming the field, the rows'
columns and what looks meant; nothing is saved. Rows that lack a field only sometimes are warnings.
"""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

LEGACY = "def evaluate(app_params, inputs, output, correct_answer):\n    return output == correct_answer\n"


def _create(client: TestClient, code: str, language: str = "python") -> dict:  # type: ignore[type-arg]
    response = client.post("/v1/evaluators", json={"name": "legacy", "language": language, "code": code})
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def _dataset(client: TestClient, rows: list[dict]) -> str:  # type: ignore[type-arg]
    content = "\n".join(json.dumps(r) for r in rows)
    response = client.post("/v1/datasets", content=content, headers={"content-type": "application/jsonl"})
    assert response.status_code == 201, response.text
    return response.json()["id"]  # type: ignore[no-any-return]


# the dataset: the answer column is `response`; 5 of 20 answers are wrong
ROWS = [{"question": f"q{n}", "response": "Paris" if n % 4 else "Lyon", "correct_answer": "Paris"} for n in range(20)]


def test_a_dataset_whose_answer_column_is_not_mapped_is_a_422_naming_the_field_and_saves_nothing(
    client: TestClient,
) -> None:
    ev = _create(client, LEGACY)
    ds = _dataset(client, ROWS)
    response = client.post(f"/v1/evaluators/{ev['id']}/migrate", json={"dataset_id": ds, "sample": 20})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["type"] == "NothingCompared" and error["field"] == "outputs" and error["rows"] == 20
    assert error["columns"] == ["question", "response", "correct_answer"]
    assert error["did_you_mean"][0] == "response"
    assert (
        'field_mapping {"outputs": "response"}' in error["message"] and "every one of the 20 rows" in error["message"]
    )
    assert client.get(f"/v1/evaluators/{ev['id']}").json()["revision"] == 1
    mapped = client.post(
        f"/v1/evaluators/{ev['id']}/migrate",
        json={"dataset_id": ds, "sample": 20, "field_mapping": {"outputs": "response"}},
    )
    assert mapped.status_code == 200 and mapped.json()["compared"] == 20, mapped.text


def test_a_correct_answer_key_no_row_has_is_a_422_offering_the_column_that_looks_meant(client: TestClient) -> None:
    ev = _create(client, LEGACY)
    cases = [{"inputs": {"question": "q", "expected": "Paris"}, "outputs": "Paris"}] * 3
    response = client.post(f"/v1/evaluators/{ev['id']}/migrate", json={"cases": cases})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == 'inputs["correct_answer"]' and error["did_you_mean"] == ["expected"]
    assert error["columns"] == ["question", "expected"] and "correct_answer_key" in error["message"]
    assert client.get(f"/v1/evaluators/{ev['id']}").json()["revision"] == 1


def test_an_app_params_key_the_code_reads_and_no_row_sets_is_a_422(client: TestClient) -> None:
    code = "function evaluate(p, inputs, output, c) {\n  return output.length > p.min_length ? 1 : 0;\n}\n"
    ev = _create(client, code, "javascript")
    cases = [{"inputs": {"correct_answer": "a"}, "outputs": "abc"}, {"inputs": {}, "outputs": "a"}]
    response = client.post(f"/v1/evaluators/{ev['id']}/migrate", json={"cases": cases})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == 'app_params["min_length"]'


def test_every_row_an_error_on_both_versions_is_a_422_with_the_common_error(client: TestClient) -> None:
    code = "def evaluate(app_params, inputs, output, correct_answer):\n    return output.strip() == correct_answer\n"
    ev = _create(client, code)
    cases = [{"inputs": {"correct_answer": "a"}, "outputs": n} for n in range(3)]  # int has no strip()
    response = client.post(f"/v1/evaluators/{ev['id']}/migrate", json={"cases": cases})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["type"] == "NothingCompared" and error["field"] == "errors"
    assert "AttributeError on 3 of 3 rows" in error["message"] and "line 2" in error["message"]
    assert client.get(f"/v1/evaluators/{ev['id']}").json()["revision"] == 1


def test_rows_that_lack_a_read_field_only_sometimes_are_warnings_of_a_saved_migration(client: TestClient) -> None:
    ev = _create(client, LEGACY)
    cases = [
        {"inputs": {"correct_answer": "a"}, "outputs": "a"},
        {"inputs": {"correct_answer": "a"}, "outputs": None},
        {"inputs": {}, "outputs": "b"},
    ]
    response = client.post(f"/v1/evaluators/{ev['id']}/migrate", json={"cases": cases})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["saved"]
    assert "outputs (the legacy code's output) is null or missing on 1 of 3 rows" in body["warnings"][0]
    assert 'inputs["correct_answer"]' in body["warnings"][1] and "1 of 3 rows" in body["warnings"][1]


def test_the_codemod_answers_what_the_legacy_code_reads(client: TestClient) -> None:
    code = "def evaluate(p, inputs, output, correct_answer):\n    return float(p.get('t', 0.5) < len(output))\n"
    body = client.post("/v1/migrate", json={"language": "python", "code": code}).json()
    assert body["reads"] == {"output": True, "correct_answer": False, "app_params": ["t"]}
    v2 = client.post(
        "/v1/migrate", json={"language": "python", "code": "def evaluate(inputs, outputs, trace):\n  return 1\n"}
    )
    assert v2.json()["reads"] is None


def test_an_inputs_mapping_that_leaves_out_the_correct_answer_column_says_to_list_it(client: TestClient) -> None:
    ev = _create(client, LEGACY)
    ds = _dataset(client, ROWS)
    mapping = {"outputs": "response", "inputs": ["question"]}
    response = client.post(f"/v1/evaluators/{ev['id']}/migrate", json={"dataset_id": ds, "field_mapping": mapping})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == 'inputs["correct_answer"]' and "list it in field_mapping.inputs" in error["message"]
