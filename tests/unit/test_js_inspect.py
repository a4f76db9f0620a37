"""JS/TS interface detection: a real parse (Node's acorn, after Node's TS transform)."""

from __future__ import annotations

import pytest

from evaluator_host.definitions.js_inspect import inspect_code
from evaluator_host.errors import CodeSyntaxError, InterfaceError

ENTRY_FORMS = [
    ("function evaluate(inputs, outputs, trace) { return 1 }", "evaluate", "binding"),
    ("async function evaluate(inputs, outputs, trace) { return 1 }", "evaluate", "binding"),
    ("const evaluate = (inputs, outputs, trace) => 1", "evaluate", "binding"),
    ("let evaluate = function (inputs, outputs, trace) { return 1 }", "evaluate", "binding"),
    ("var evaluate = async (a, b, c, d) => 1", "legacy", "binding"),
    ("export function evaluate(inputs, outputs, trace) { return 1 }", "evaluate", "binding"),
    ("export const main = async (variables) => ({ score: 1 })", "main", "binding"),
    ("export default function evaluate(inputs, outputs, trace) { return 1 }", "evaluate", "binding"),
    ("export default function (inputs, outputs, trace) { return 1 }", "evaluate", "exports"),
    ("export default (app_params, inputs, output, correct_answer) => 1", "legacy", "exports"),
    ("function evaluate(i, o, t) { return 1 }\nexport default evaluate", "evaluate", "binding"),
    ("function evaluate(i, o, t) { return 1 }\nmodule.exports = { evaluate }", "evaluate", "binding"),
    ("module.exports = { evaluate(i, o, t) { return 1 } }", "evaluate", "exports"),
    ("module.exports = { main: async (variables) => ({ score: 1 }) }", "main", "exports"),
    ("module.exports = function evaluate(a, b, c, d) { return 1 }", "legacy", "exports"),
    ("module.exports = (i, o, t) => 1", "evaluate", "exports"),
    ("exports.evaluate = (i, o, t) => 1", "evaluate", "exports"),
    ("module.exports.main = async function (variables) { return { score: 1 } }", "main", "exports"),
    ("async function main(variables) { return { score: 1 } }", "main", "binding"),
]


@pytest.mark.parametrize(("code", "interface", "kind"), ENTRY_FORMS)
def test_entry_forms(code: str, interface: str, kind: str) -> None:
    detected = inspect_code("javascript", code)
    assert detected.interface == interface
    assert detected.entrypoint == ("main" if interface == "main" else "evaluate")
    assert detected.loader["entry"]["kind"] == kind
    assert detected.compiled is not None


def test_typescript_forms_and_lines() -> None:
    code = (
        "enum Verdict { Fail = 0, Pass = 1 }\ninterface Span { attributes?: Record<string, any> }\n"
        "namespace N { export const k = 1 }\n\n"
        "export function evaluate(inputs: Record<string, any>, outputs: string, trace: { spans: any }): number {\n"
        "  return Verdict.Pass\n}\n"
    )
    detected = inspect_code("typescript", code)
    assert (detected.interface, detected.line) == ("evaluate", 5)  # the user's TS line, not the JS one
    assert detected.compiled is not None and "sourceMappingURL=data:application/json" in detected.compiled


def test_typescript_parameter_properties_and_this_parameter() -> None:
    code = (
        "class Scorer { constructor(private readonly weight: number) {} score(x: number) { return x * this.weight } }\n"
        "function evaluate(this: void, inputs: any, outputs: any, trace: any) { return new Scorer(1).score(1) }\n"
    )
    assert inspect_code("typescript", code).interface == "evaluate"


def test_imports_become_requires_with_lines_kept() -> None:
    code = (
        'import * as _ from "lodash"\nimport fs, { readFileSync as rf } from "fs"\n\n'
        "export function evaluate(i, o, t) {\n  return 1\n}\n"
    )
    detected = inspect_code("javascript", code)
    assert detected.loader["module"] == "cjs"
    compiled = detected.compiled or ""
    assert 'require("lodash")' in compiled and "import " not in compiled.split("function __evh")[0]
    assert compiled.splitlines()[3].startswith("function evaluate")  # still line 4


def test_top_level_await_and_import_meta_stay_es_modules() -> None:
    for code in (
        'const fs = await import("fs")\nexport function evaluate(i, o, t) { return 1 }',
        "const here = import.meta.url\nexport function evaluate(i, o, t) { return 1 }",
    ):
        detected = inspect_code("javascript", code)
        assert detected.loader["module"] == "esm", code


@pytest.mark.parametrize(
    ("language", "code", "line"),
    [
        ("javascript", "function evaluate(i, o, t) {\n  return (\n}\n", 3),
        ("javascript", "function evaluate(i, o, t) {\n  let let = 1\n}\n", 2),
        ("typescript", "function evaluate(inputs: any, outputs: any, trace: any): number {\n  return (\n}\n", 3),
        ("typescript", "let ok = 1\nlet y: = 3\nfunction evaluate(i: any, o: any, t: any) { return 1 }\n", 2),
    ],
)
def test_syntax_errors_carry_line_and_column(language: str, code: str, line: int) -> None:
    with pytest.raises(CodeSyntaxError) as caught:
        inspect_code(language, code)
    assert caught.value.line == line
    assert caught.value.column is not None


@pytest.mark.parametrize(
    "code",
    [
        "function helper(i, o, t) { return 1 }",
        "function evaluate(i, o, t) { return 1 }\nfunction main(v) { return { score: 1 } }",
        "function evaluate(i, o) { return 1 }",
        "function evaluate(...args) { return 1 }",
        "const evaluate = 3",
        "// function evaluate(i, o, t) {}\nconst s = 'function evaluate(i, o, t) {}'",
    ],
)
def test_interface_errors(code: str) -> None:
    with pytest.raises(InterfaceError):
        inspect_code("javascript", code)


def test_hostile_input_does_not_wedge_the_parser() -> None:
    with pytest.raises((CodeSyntaxError, InterfaceError)):
        inspect_code("javascript", "(" * 200_000)
    assert inspect_code("javascript", "const evaluate = (i, o, t) => 1").interface == "evaluate"


@pytest.mark.parametrize(
    ("code", "is_async"),
    [
        ("async function evaluate(inputs, outputs, trace) { return 1 }", True),
        ("const evaluate = async (inputs, outputs, trace) => 1", True),
        ("export const main = async (variables) => ({ score: 1 })", True),
        ("module.exports = async function (a, b, c, d) { return 1 }", True),
        ("function evaluate(i, o, t) { return new Promise((ok) => setTimeout(() => ok(1), 10)) }", True),
        ("function evaluate(i, o, t) { return fetch(i.url).then((r) => r.json()) }", True),
        ("const evaluate = (i, o, t) => fetch(i.url)", True),
        ("function evaluate(i, o, t) { if (i.x) { return Promise.resolve(1) } return fetch(i.url) }", True),
        ("function evaluate(i, o, t) { return 1 }", False),
        ("function evaluate(i, o, t) { if (i.x) return 1; return fetch(i.url) }", False),  # not always a promise
        ("function evaluate(i, o, t) { const f = async () => 1; return 2 }", False),  # a nested function's own
        ("function evaluate(i, o, t) { }", False),
    ],
)
def test_async_entrypoints_and_functions_returning_promises_are_async(code: str, is_async: bool) -> None:
    for language in ("javascript", "typescript"):
        assert inspect_code(language, code).is_async is is_async, (language, code)
