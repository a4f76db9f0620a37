"""The shared conformance vectors (../shared/conformance/*.json) on every backend."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support import REPO

VECTORS = REPO.parent / "shared" / "conformance"
SUPPORTED = {"python", "javascript", "typescript", "ruby"}  # ruby: the unknown-language case, answered 422


def _cases() -> list[Any]:
    if not VECTORS.is_dir():
        return []
    out = []
    for path in sorted(VECTORS.glob("*.json")):
        for case in json.loads(path.read_text()):
            marks = []
            if case["language"] not in SUPPORTED:
                marks.append(pytest.mark.skip(reason=f"{case['language']} evaluators are not implemented yet"))
            out.append(pytest.param(case, id=f"{path.stem}:{case['name']}", marks=marks))
    return out


def _same(actual: Any, expected: Any) -> bool:
    if isinstance(expected, float | int) and not isinstance(expected, bool) and isinstance(actual, float | int):
        return math.isclose(actual, expected, abs_tol=1e-9)
    return bool(actual == expected)


@pytest.mark.skipif(not VECTORS.is_dir(), reason="../shared/conformance is not present")
@pytest.mark.parametrize("case", _cases())
def test_vector(client: TestClient, case: dict[str, Any]) -> None:
    body = {k: case[k] for k in ("language", "code", "packages", "settings") if k in case}
    body.update(case["case"])
    response = client.post("/v1/evaluate", json=body)
    expect = case["expect"]
    assert response.status_code == expect.get("http", 200), response.text
    answer = response.json()
    if response.status_code != 200:
        error = answer["error"]
        if "error_type" in expect:
            assert error["type"] == expect["error_type"]
        if "error_line" in expect:
            assert error["line"] == expect["error_line"]
        return
    for key in ("status", "score", "passed", "interface"):
        if key in expect:
            assert _same(answer[key], expect[key]), (key, answer)
    if "status_in" in expect:
        assert answer["status"] in expect["status_in"], answer
    for key in ("details", "outputs"):
        for name, value in expect.get(key, {}).items():
            assert _same(answer[key][name], value), (key, name, answer)
    if "error_type" in expect:
        assert answer["error"]["type"] == expect["error_type"], answer
    if "error_line" in expect:
        assert answer["error"]["line"] == expect["error_line"], answer
    if expect.get("warnings_nonempty"):
        assert answer["warnings"], answer
    if "stdout_contains" in expect:
        assert expect["stdout_contains"] in answer["stdout"], answer
