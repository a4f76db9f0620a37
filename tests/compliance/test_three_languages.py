"""The same evaluator logic in Python, JavaScript and TypeScript normalizes identically.

Each row is one returned value written in each language; the three answers must agree
on everything normalization decides (status, score, passed, outputs, details, warnings,
error type) — on every backend, through every interface.
"""

from __future__ import annotations

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

INTERFACES = {
    "evaluate": (
        "def evaluate(inputs, outputs, trace):\n    return {py}\n",
        "function evaluate(inputs, outputs, trace) {{\n  return {js}\n}}\n",
        "function evaluate(inputs: any, outputs: any, trace: any): unknown {{\n  return {js}\n}}\n",
    ),
    "legacy": (
        "def evaluate(app_params, inputs, output, correct_answer):\n    return {py}\n",
        "function evaluate(app_params, inputs, output, correct_answer) {{\n  return {js}\n}}\n",
        "function evaluate(app_params: object, inputs: object, output: string, correct_answer: string | null) {{\n"
        "  return {js}\n}}\n",
    ),
    "main": (
        "async def main(inputs, outputs):\n    return {py}\n",
        "async function main(variables) {{\n  return {js}\n}}\n",
        "async function main(variables: Record<string, unknown>): Promise<unknown> {{\n  return {js}\n}}\n",
    ),
}

DECIDED = ("status", "score", "passed", "outputs", "details", "warnings", "interface")


def _decided(result: dict[str, Any]) -> dict[str, Any]:
    picked = {key: result.get(key) for key in DECIDED}
    picked["error_type"] = (result.get("error") or {}).get("type")
    return picked


@pytest.mark.parametrize("interface", sorted(INTERFACES))
@pytest.mark.parametrize(("py", "js"), VALUES, ids=[py for py, _ in VALUES])
def test_three_languages_normalize_identically(client: TestClient, interface: str, py: str, js: str) -> None:
    py_code, js_code, ts_code = INTERFACES[interface]
    body: dict[str, Any] = {"inputs": {"q": "x"}, "outputs": "y", "settings": {"threshold": 0.5}}
    answers = {
        "python": _decided(evaluate(client, py_code.format(py=py), "python", **body)),
        "javascript": _decided(evaluate(client, js_code.format(js=js), "javascript", **body)),
        "typescript": _decided(evaluate(client, ts_code.format(js=js), "typescript", **body)),
    }
    assert answers["javascript"] == answers["python"], answers
    assert answers["typescript"] == answers["python"], answers
