"""/v1/migrate and /v1/evaluators/{id}/migrate: the codemod over HTTP, and the differential run."""

from __future__ import annotations

import json
import uuid

from fastapi.testclient import TestClient

LEGACY = (
    'def evaluate(app_params, inputs, output, correct_answer):\n    """Exact."""\n    return output == correct_answer\n'
)
READS_APP_PARAMS = (
    "def evaluate(app_params, inputs, output, correct_answer):\n"
    "    if app_params.get('strict'):\n"
    "        return output == correct_answer\n"
    "    return output.strip().lower() == str(correct_answer).lower()\n"
)
V2 = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"
CASES = [
    {"inputs": {"correct_answer": "Paris"}, "outputs": "Paris"},
    {"inputs": {"correct_answer": "Paris"}, "outputs": "Lyon"},
    {"inputs": {}, "outputs": "x"},
]


def _create(client: TestClient, code: str, language: str = "python", **extra: object) -> dict:  # type: ignore[type-arg]
    body = {"name": "legacy", "language": language, "code": code} | extra
    response = client.post("/v1/evaluators", json=body)
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def test_migrate_answers_the_code_diff_interfaces_and_notes(client: TestClient) -> None:
    response = client.post("/v1/migrate", json={"language": "python", "code": READS_APP_PARAMS})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["changed"] and (body["interface_before"], body["interface_after"]) == ("legacy", "evaluate")
    assert body["code"].startswith("def evaluate(inputs, outputs, trace):\n")
    assert body["diff"].startswith("--- a/evaluator\n+++ b/evaluator\n")
    assert body["rules"] == ["signature-prologue"]
    [note] = body["notes"]
    assert note["line"] == 2 and "app_params" in note["message"]
    assert "TODO[evaluator-migrate]" in body["code"].splitlines()[1]


def test_migrate_typescript_keeps_types(client: TestClient) -> None:
    code = "export function evaluate(p: object, i: object, output: string, c: string): number {\n  return 1\n}\n"
    body = client.post("/v1/migrate", json={"language": "typescript", "code": code}).json()
    assert body["code"].startswith("export function evaluate(inputs: object, outputs: string, trace: unknown):")


def test_migrate_uses_the_correct_answer_key_setting(client: TestClient) -> None:
    body = {"language": "python", "code": LEGACY, "settings": {"correct_answer_key": "expected"}}
    assert 'inputs.get("expected")' in client.post("/v1/migrate", json=body).json()["code"]


def test_v2_and_main_code_comes_back_unchanged(client: TestClient) -> None:
    for code, interface in ((V2, "evaluate"), ("def main(completion):\n    return {'score': 1}\n", "main")):
        body = client.post("/v1/migrate", json={"language": "python", "code": code}).json()
        assert (body["changed"], body["code"], body["diff"], body["notes"]) == (False, code, "", [])
        assert body["interface_before"] == body["interface_after"] == interface


def test_a_syntax_error_is_a_422_with_line_and_column(client: TestClient) -> None:
    bad = (("python", "def evaluate(a, b, c, d)\n    return 1\n"), ("javascript", "function evaluate(a, b, c d) {}"))
    for language, code in bad:
        response = client.post("/v1/migrate", json={"language": language, "code": code})
        assert response.status_code == 422
        error = response.json()["error"]
        assert error["type"] == "SyntaxError" and error["line"] == 1 and error["column"] is not None


def test_what_the_tool_refuses_is_a_422_saying_why(client: TestClient) -> None:
    code = "def evaluate(a, b, c, d):\n    return evaluate(a, b, c, d) if d else 0.0\n"
    response = client.post("/v1/migrate", json={"language": "python", "code": code})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["type"] == "MigrationRefused" and error["line"] == 2 and "refers to itself" in error["message"]


def test_migrating_a_stored_evaluator_saves_a_revision_when_every_row_agrees(client: TestClient) -> None:
    ev = _create(client, LEGACY)
    response = client.post(f"/v1/evaluators/{ev['id']}/migrate", json={"cases": CASES})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["saved"] and body["compared"] == 3 and not body["dry_run"]
    assert body["evaluator"]["revision"] == 2 and body["evaluator"]["interface"] == "evaluate"
    latest = client.get(f"/v1/evaluators/{ev['id']}").json()
    assert latest["code"] == body["code"] and latest["revision"] == 2
    results = client.post(f"/v1/evaluators/{ev['id']}/evaluate", json={"cases": CASES}).json()["results"]
    assert [r["score"] for r in results] == [1.0, 0.0, 0.0]


def test_a_dry_run_compares_and_saves_nothing(client: TestClient) -> None:
    ev = _create(client, LEGACY)
    body = client.post(f"/v1/evaluators/{ev['id']}/migrate", json={"cases": CASES, "dry_run": True}).json()
    assert (body["saved"], body["dry_run"], body["compared"], body["evaluator"]) == (False, True, 3, None)
    assert client.get(f"/v1/evaluators/{ev['id']}").json()["revision"] == 1


def test_rows_that_differ_are_a_409_with_the_rows_and_no_revision(client: TestClient) -> None:
    ev = _create(client, READS_APP_PARAMS)
    cases = [{**CASES[0], "outputs": " paris "}, {**CASES[0], "outputs": " paris ", "app_params": {"strict": True}}]
    response = client.post(f"/v1/evaluators/{ev['id']}/migrate", json={"cases": cases})
    assert response.status_code == 409, response.text
    error = response.json()["error"]
    assert error["type"] == "MigrationMismatch" and error["compared"] == 2
    [row] = error["rows"]  # only the row that passed app_params differs: v2 has none
    assert row["index"] == 1 and row["fields"] == ["score", "passed"]
    assert (row["before"]["score"], row["after"]["score"]) == (0.0, 1.0)
    assert "TODO[evaluator-migrate]" in error["code"]
    assert client.get(f"/v1/evaluators/{ev['id']}").json()["revision"] == 1


def test_a_dataset_sample_feeds_the_differential_run(client: TestClient) -> None:
    code = "function evaluate(p, i, output, expected) {\n  return String(output.length);\n}\n"
    ev = _create(client, code, "javascript")
    rows = "\n".join(json.dumps({"q": n, "correct_answer": "a", "outputs": "x" * n}) for n in range(5))
    ds = client.post("/v1/datasets", content=rows, headers={"content-type": "application/jsonl"}).json()
    body = client.post(f"/v1/evaluators/{ev['id']}/migrate", json={"dataset_id": ds["id"], "sample": 3}).json()
    assert body["saved"] and body["compared"] == 3 and "numeric-string-returns" in body["rules"]


def test_an_evaluator_already_v2_is_not_run_nor_revised(client: TestClient) -> None:
    ev = _create(client, V2)
    body = client.post(f"/v1/evaluators/{ev['id']}/migrate", json={"cases": CASES}).json()
    assert (body["changed"], body["saved"], body["compared"]) == (False, False, 0)


def test_the_rows_come_from_exactly_one_source(client: TestClient) -> None:
    ev = _create(client, LEGACY)
    for bad in ({}, {"cases": CASES, "dataset_id": "ds_x"}):
        response = client.post(f"/v1/evaluators/{ev['id']}/migrate", json=bad)
        assert response.status_code == 422 and response.json()["error"]["type"] == "ValidationError"
    assert client.post("/v1/evaluators/ev_missing/migrate", json={"cases": CASES}).status_code == 404


def test_a_dataset_sample_is_read_only_up_to_the_body_bound(client: TestClient) -> None:
    ev = _create(client, LEGACY)
    limit = client.app.state.services.settings.max_body_bytes  # type: ignore[attr-defined]
    row = json.dumps({"correct_answer": "a", "outputs": "x" * 200_000}) + "\n"
    rows = row * (limit // len(row) + 2)  # the first rows alone are over the bound
    ds = client.post("/v1/datasets", content=rows, headers={"content-type": "application/jsonl"})
    assert ds.status_code == 201, ds.text
    response = client.post(f"/v1/evaluators/{ev['id']}/migrate", json={"dataset_id": ds.json()["id"], "sample": 1000})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["type"] == "LimitError" and "max_body_bytes" in error["message"] and "sample=" in error["message"]
    fewer = client.post(f"/v1/evaluators/{ev['id']}/migrate", json={"dataset_id": ds.json()["id"], "sample": 2})
    assert fewer.status_code == 200 and fewer.json()["compared"] == 2, fewer.text


def test_a_typescript_evaluator_with_an_enum_is_migrated_and_both_versions_agree_in_the_sandbox(
    client: TestClient,
) -> None:
    """Issue 34 point 10: the migration refused an enum (strip-only parse). Now the stored legacy revision and
    the migrated code both run (Node's transform keeps the enum, namespace and parameter property) and agree."""
    from tests.support.migrate_fixtures import ROOT

    code = (ROOT / "node" / "enum_namespace.before.ts").read_text()
    ev = _create(client, code, "typescript", name=f"enum-{uuid.uuid4().hex[:8]}")
    cases = [
        {"inputs": {"correct_answer": "Paris"}, "outputs": " paris "},
        {"inputs": {"correct_answer": "Paris"}, "outputs": "Lyon"},
    ]
    body = client.post(f"/v1/evaluators/{ev['id']}/migrate", json={"cases": cases}).json()
    assert body["saved"] and body["compared"] == 2, body
    assert body["code"] == (ROOT / "node" / "enum_namespace.after.ts").read_text()
    scores = [
        r["score"] for r in client.post(f"/v1/evaluators/{ev['id']}/evaluate", json={"cases": cases}).json()["results"]
    ]
    assert scores == [1.0, 0.0]
