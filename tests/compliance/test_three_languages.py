"""The same evaluator logic in Python, JavaScript and TypeScript normalizes identically.

Each row is one returned value written in each language; the three answers must agree
on everything normalization decides (status, score, passed, outputs, details, warnings,
error type) — on every backend, through every interface.

Every new evaluator costs a worker start (a container on docker), so each language's rows of one
interface are one evaluator, run once per backend as one request of one case per row: the row's
index (an input) picks which literal it returns. Each row keeps its own test, which asserts its own
three answers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.service import evaluate

# (python expression, javascript expression)
VALUES = [
    ("1", "1"),
    ("0", "0"),
    ("0.25", "0.25"),
    ("True", "true"),
    ("False", "false"),
    ("2.5", "2.5"),
    ("-1", "-1"),
    ("{'score': 0.5, 'note': 'half'}", "({ score: 0.5, note: 'half' })"),
    ("{'score': True, 'why': ['a', 1, None]}", "({ score: true, why: ['a', 1, null] })"),
    ("{'score': False}", "({ score: false })"),
    ("{'accuracy': 1, 'fluent': False, 'len': 0.5}", "({ accuracy: 1, fluent: false, len: 0.5 })"),
    ("{'score': 1, 'nested': {'k': [1, 2, {'x': 'y'}]}}", "({ score: 1, nested: { k: [1, 2, { x: 'y' }] } })"),
    ("None", "null"),
    ("'0.5'", "'0.5'"),
    ("[1, 2]", "[1, 2]"),
    ("{}", "({})"),
    ("float('nan')", "NaN"),
    ("float('inf')", "Infinity"),
    ("{'score': float('nan')}", "({ score: NaN })"),
    ("{'score': '1'}", "({ score: '1' })"),
    ("{'a': 'text'}", "({ a: 'text' })"),
    ("{'score': 1, 'bad': float('inf')}", "({ score: 1, bad: -Infinity })"),
    ("2 ** 60", "2n ** 60n"),
]

# each interface's signature per language, and the row's index as that signature receives it
INTERFACES = {
    "evaluate": (
        ("def evaluate(inputs, outputs, trace):", 'inputs["i"]'),
        ("function evaluate(inputs, outputs, trace) {", "inputs.i"),
        ("function evaluate(inputs: any, outputs: any, trace: any): unknown {", "inputs.i"),
    ),
    "legacy": (
        ("def evaluate(app_params, inputs, output, correct_answer):", 'inputs["i"]'),
        ("function evaluate(app_params, inputs, output, correct_answer) {", "inputs.i"),
        (
            "function evaluate(app_params: object, inputs: object, output: string, correct_answer: string | null) {",
            "(inputs as any).i",
        ),
    ),
    "main": (
        ("async def main(inputs, outputs):", 'inputs["i"]'),
        ("async function main(variables) {", "variables.i"),
        ("async function main(variables: Record<string, unknown>): Promise<unknown> {", "variables.i"),
    ),
}
LANGUAGES = ("python", "javascript", "typescript")

DECIDED = ("status", "score", "passed", "outputs", "details", "warnings", "interface")


def _decided(result: dict[str, Any]) -> dict[str, Any]:
    picked = {key: result.get(key) for key in DECIDED}
    picked["error_type"] = (result.get("error") or {}).get("type")
    return picked


def _code(interface: str, language: str) -> str:
    """One evaluator of ``interface`` in ``language`` that returns row i's value, written as a literal."""
    signature, index = INTERFACES[interface][LANGUAGES.index(language)]
    if language == "python":
        rows = "".join(f"    if i == {n}:\n        return {py}\n" for n, (py, _) in enumerate(VALUES))
        return f'{signature}\n    i = {index}\n{rows}    raise ValueError("no row")\n'
    rows = "".join(f"  if (i === {n}) {{\n    return {js}\n  }}\n" for n, (_, js) in enumerate(VALUES))
    return f"{signature}\n  const i = {index}\n{rows}  throw new Error('no row')\n}}\n"


@pytest.fixture(scope="module")
def answers() -> Callable[[TestClient, str], dict[str, list[dict[str, Any]]]]:
    """Every row's decided answer per language for one service and interface (run once, on first use). Each run
    keeps its client: a key by ``id(client)`` alone could be reused by the next backend's client once the first
    is gone, which would hand it the other backend's answers. A run that failed fails each of its rows with
    its own error (not a missing key)."""
    runs: dict[tuple[int, str], tuple[TestClient, dict[str, list[dict[str, Any]]] | BaseException]] = {}

    def run(client: TestClient, interface: str) -> dict[str, list[dict[str, Any]]]:
        cases = [{"inputs": {"q": "x", "i": n}, "outputs": "y"} for n in range(len(VALUES))]
        body: dict[str, Any] = {"cases": cases, "settings": {"threshold": 0.5}}
        answered = {}
        for language in LANGUAGES:
            results = evaluate(client, _code(interface, language), language, **body)["results"]
            assert len(results) == len(VALUES), results
            answered[language] = [_decided(r) for r in results]
        return answered

    def of(client: TestClient, interface: str) -> dict[str, list[dict[str, Any]]]:
        key = (id(client), interface)
        if key not in runs or runs[key][0] is not client:
            try:
                runs[key] = (client, run(client, interface))
            except Exception as exc:  # noqa: BLE001 - raised again for every row of the run
                runs[key] = (client, exc)
        answered = runs[key][1]
        if isinstance(answered, BaseException):
            raise answered
        return answered

    return of


@pytest.mark.parametrize("interface", sorted(INTERFACES))
@pytest.mark.parametrize(("py", "js"), VALUES, ids=[py for py, _ in VALUES])
def test_three_languages_normalize_identically(
    client: TestClient,
    answers: Callable[[TestClient, str], dict[str, list[dict[str, Any]]]],
    interface: str,
    py: str,
    js: str,
) -> None:
    row = VALUES.index((py, js))
    answered = {language: rows[row] for language, rows in answers(client, interface).items()}
    assert answered["javascript"] == answered["python"], answered
    assert answered["typescript"] == answered["python"], answered
