"""Every migrated fixture answers exactly as its legacy original, row by row, on each backend."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaluator_host.evaluation.models import EvaluationResult
from evaluator_host.migration.compare import differences
from tests.support.migrate_fixtures import Fixture, fixtures

_QUESTION = {"question": "Capital of France?", "correct_answer": "Paris", "answer": "Paris"}
CASES: list[dict[str, Any]] = [
    {"inputs": _QUESTION, "outputs": "Paris"},
    {"inputs": _QUESTION, "outputs": " paris "},
    {"inputs": _QUESTION, "outputs": "Lyon"},
    {"inputs": {"question": "2+2?"}, "outputs": "4"},  # no correct answer: legacy got null
]
MIGRATED = [f for f in fixtures() if f.before.read_text() != f.after.read_text()]


def _run(client: TestClient, fixture: Fixture, code: str) -> list[EvaluationResult]:
    body = {"language": fixture.language, "code": code, "cases": CASES, "settings": {"correct_answer_key": fixture.key}}
    response = client.post("/v1/evaluate", json=body)
    assert response.status_code == 200, response.text
    return [EvaluationResult.model_validate(r) for r in response.json()["results"]]


@pytest.mark.parametrize("fixture", MIGRATED, ids=str)
def test_the_migrated_fixture_gives_the_legacy_answers(client: TestClient, fixture: Fixture) -> None:
    before = _run(client, fixture, fixture.before.read_text())
    after = _run(client, fixture, fixture.after.read_text())
    assert {r.interface for r in before} == {"legacy"} and {r.interface for r in after} == {"evaluate"}
    assert differences(before, after) == []
    assert any(r.status == "ok" for r in after)  # the rows exercise the code, not only its errors
