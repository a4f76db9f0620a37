"""The shared conformance vectors (../shared/conformance/*.json) on every backend.

``EVALUATOR_HOST_TEST_CONFORMANCE`` names the vectors' folder when it is not beside the checkout (a git
worktree's parent is not the main checkout's); set to ``required`` (or a folder), a missing folder or one
without a vector fails instead of skipping: zero vectors run is not a pass.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support import REPO

_WHERE = os.environ.get("EVALUATOR_HOST_TEST_CONFORMANCE", "")
VECTORS = Path(_WHERE) if _WHERE not in ("", "required") else REPO.parent / "shared" / "conformance"
REQUIRED = bool(_WHERE)
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


def test_the_conformance_vectors_are_there_when_required() -> None:
    """Issue 48, a green result means something was checked: a run of no vector is not a conformance pass."""
    if not REQUIRED and not VECTORS.is_dir():
        pytest.skip(f"{VECTORS} is not present (EVALUATOR_HOST_TEST_CONFORMANCE=required makes this a failure)")
    assert VECTORS.is_dir(), f"EVALUATOR_HOST_TEST_CONFORMANCE is set but {VECTORS} is not a folder"
    assert _cases(), f"{VECTORS} holds no conformance vector"


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
