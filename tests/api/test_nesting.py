"""Deeply nested code (issue 28.8): a 422 naming the depth and the bound on every route that reads a
definition, never a 500, and the service (and its JS/TS inspector) healthy afterwards.

Shapes: a 120 kB ``a+a+…`` chain (deeper than any parser holds), a lambda / arrow chain, nested
brackets and lists, nested ``if`` blocks, and a chain of 150 (which every parser holds but the
host's recursive consumers — RestrictedPython's transformer, libcst — did not).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from evaluator_host.definitions.nesting import MAX_PYTHON_DEPTH
from tests.support.service import assert_healthy

PY_V2 = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"
PY_LEGACY = "def evaluate(app_params, inputs, output, correct_answer):\n    return 1.0\n"
JS_V2 = "function evaluate(inputs, outputs, trace) { return 1 }\n"
JS_LEGACY = "function evaluate(app_params, inputs, output, correct_answer) { return 1 }\n"
TS_V2 = "export function evaluate(inputs: any, outputs: any, trace: any): number { return 1 }\n"
TS_LEGACY = "export function evaluate(app_params: any, inputs: any, output: string, correct_answer: string) {\n" + (
    "  return 1\n}\n"
)

BIG = 60_000  # "a+" * 60_000: the 120 kB

PYTHON_SHAPES = {
    "chain-120kB": "x = " + "a+" * BIG + "a\n",
    "lambdas": "f = " + "lambda: " * 5_000 + "1\n",
    "parentheses": "x = " + "(" * 1_000 + "1" + ")" * 1_000 + "\n",
    "lists": "x = " + "[" * 1_000 + "1" + "]" * 1_000 + "\n",
    "ifs": "".join(" " * i + "if x:\n" for i in range(150)) + " " * 150 + "pass\n",
    "chain-150": "x = " + "a+" * 150 + "a\n",
}
JS_SHAPES = {
    "chain-120kB": "const x = " + "a+" * BIG + "a;\n",
    "arrows": "const f = " + "() => " * 5_000 + "1;\n",
    "parentheses": "const x = " + "(" * 5_000 + "1" + ")" * 5_000 + ";\n",
    "arrays": "const x = " + "[" * 5_000 + "1" + "]" * 5_000 + ";\n",
    "ifs": "if (x) {" * 5_000 + "}" * 5_000 + "\n",
    "chain-250": "const x = " + "a+" * 250 + "a;\n",
}
LANGUAGES = {
    "python": (PY_V2, PY_LEGACY, PYTHON_SHAPES),
    "javascript": (JS_V2, JS_LEGACY, JS_SHAPES),
    "typescript": (TS_V2, TS_LEGACY, JS_SHAPES),
}
CASES = [(language, shape) for language, (_, _, shapes) in LANGUAGES.items() for shape in shapes]


def _code(language: str, shape: str, legacy: bool = False) -> str:
    v2, old, shapes = LANGUAGES[language]
    return (old if legacy else v2) + shapes[shape]


def _evaluate(client: TestClient, language: str, code: str, **extra: object) -> tuple[int, dict]:  # type: ignore[type-arg]
    body = {"language": language, "code": code, "inputs": {}, "outputs": "x", **extra}
    response = client.post("/v1/evaluate", json=body)
    return response.status_code, response.json()


def _restricted(client: TestClient, language: str, code: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    return _evaluate(client, language, code, settings={"policy": "restricted"})


def _create(client: TestClient, language: str, code: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    response = client.post("/v1/evaluators", json={"name": "deep", "language": language, "code": code})
    return response.status_code, response.json()


def _stored(client: TestClient, language: str) -> str:
    status, body = _create(client, language, LANGUAGES[language][0])
    assert status == 201, body
    return str(body["id"])


def _revise(client: TestClient, language: str, code: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    body = {"name": "deep", "language": language, "code": code}
    response = client.put(f"/v1/evaluators/{_stored(client, language)}", json=body)
    return response.status_code, response.json()


def _patch(client: TestClient, language: str, code: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    response = client.patch(f"/v1/evaluators/{_stored(client, language)}", json={"code": code})
    return response.status_code, response.json()


def _migrate(client: TestClient, language: str, code: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    response = client.post("/v1/migrate", json={"language": language, "code": code})
    return response.status_code, response.json()


Route = Callable[[TestClient, str, str], tuple[int, dict]]  # type: ignore[type-arg]
ROUTES: dict[str, tuple[Route, bool]] = {  # name -> (call, whether it takes legacy code)
    "evaluate": (_evaluate, False),
    "evaluate-restricted": (_restricted, False),
    "create": (_create, False),
    "revise": (_revise, False),
    "patch": (_patch, False),
    "migrate": (_migrate, True),
}


def _assert_too_deep(status: int, body: dict, what: str) -> None:  # type: ignore[type-arg]
    assert status == 422, f"{what}: {status} {body}"
    assert body["error"]["type"] == "SyntaxError", f"{what}: {body}"
    message = body["error"]["message"]
    assert "nested too deeply" in message or "too many" in message, f"{what}: {message}"  # Python's own words


@pytest.mark.parametrize(("language", "shape"), CASES)
def test_deeply_nested_code_is_a_422_on_every_definition_route_and_the_service_stays_healthy(
    process_client: TestClient, language: str, shape: str
) -> None:
    for name, (route, legacy) in ROUTES.items():
        if name == "evaluate-restricted" and language != "python":
            continue  # the restricted policy is Python's
        status, body = route(process_client, language, _code(language, shape, legacy))
        _assert_too_deep(status, body, name)
        status, body = route(process_client, language, LANGUAGES[language][1 if legacy else 0])
        assert status in (200, 201), f"{name} after the deep code: {status} {body}"  # the same route still works
    assert_healthy(process_client)


@pytest.mark.parametrize(("language", "shape"), CASES)
def test_inspect_reports_deep_nesting_as_a_syntax_error_of_the_definition(
    process_client: TestClient, language: str, shape: str
) -> None:
    response = process_client.post("/v1/inspect", json={"language": language, "code": _code(language, shape)})
    assert response.status_code == 200, response.text
    found = response.json()
    assert found["ok"] is False and found["errors"][0]["type"] == "SyntaxError", found["errors"]
    again = process_client.post("/v1/inspect", json={"language": language, "code": LANGUAGES[language][0]})
    assert again.json()["ok"] is True, again.text


@pytest.mark.parametrize("language", ["python", "javascript", "typescript"])
def test_the_message_names_the_depth_the_bound_and_the_line(process_client: TestClient, language: str) -> None:
    code = _code(language, "chain-150" if language == "python" else "chain-250")
    status, body = _create(process_client, language, code)
    assert status == 422
    error = body["error"]
    bound = MAX_PYTHON_DEPTH if language == "python" else 200
    assert f"at most {bound}" in error["message"] and "depth " in error["message"], error
    assert error["line"] == LANGUAGES[language][0].count("\n") + 1 and error["column"] is not None, error


def test_code_just_inside_the_bound_is_accepted_everywhere(process_client: TestClient) -> None:
    """The bound leaves room: a chain of 90 (depth 94) passes the restricted policy and the codemod."""
    deep = "a = 1\nx = " + "a+" * 90 + "a\n"
    status, body = _restricted(process_client, "python", PY_V2 + deep)
    assert status == 200 and body["status"] == "ok", body
    status, body = _migrate(process_client, "python", PY_LEGACY + deep)
    assert status == 200 and body["changed"], body
    status, body = _migrate(process_client, "typescript", TS_LEGACY + "const x = " + "a+" * 180 + "a;\n")
    assert status == 200 and body["changed"], body


def test_a_typescript_stack_overflow_does_not_break_typescript_for_everyone(process_client: TestClient) -> None:
    """swc's WebAssembly instance is broken by a stack overflow ("memory access out of bounds" for every
    later call): the inspector answers the overflow, then a new one serves the next request."""
    status, _ = _create(process_client, "typescript", _code("typescript", "chain-120kB"))
    assert status == 422
    for _ in range(2):
        status, body = _evaluate(process_client, "typescript", TS_V2)
        assert status == 200 and body["status"] == "ok" and body["score"] == 1.0, body
