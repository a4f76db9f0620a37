"""What the rules say and refuse, beyond the fixtures' code: notes, refusals, entrypoint forms."""

from __future__ import annotations

import subprocess

import pytest

from evaluator_host.definitions.interfaces import detect
from evaluator_host.definitions.languages import node_executable
from evaluator_host.errors import InterfaceError, MigrationRefused
from evaluator_host.migration.codemod import TODO, migrate
from evaluator_host.migration.js import TS_PARSER
from tests.support.migrate_fixtures import ROOT


def test_notes_point_at_the_todo_the_adapter_and_the_legacy_callers() -> None:
    migrated = migrate("python", (ROOT / "python" / "caller_in_main_block.before.py").read_text())
    [caller] = migrated.notes
    assert "print(evaluate(" in migrated.code.splitlines()[caller.line - 1]  # lines are the migrated code's
    assert "evaluate()" in caller.message and TODO in caller.message
    adapted = migrate("python", (ROOT / "python" / "decorated_adapter.before.py").read_text())
    assert adapted.notes[0].line == adapted.code.splitlines().index("def evaluate(inputs, outputs, trace):") + 1
    assert "decorated" in adapted.notes[0].message


@pytest.mark.parametrize(
    ("language", "code", "line"),
    [
        ("python", "def evaluate(a, b, c, d):\n    return evaluate(a, b, c, d) if d else 1\n", 2),
        ("javascript", "function evaluate(a, b, c, d) {\n  return d ? evaluate(a, b, c, null) : 1;\n}\n", 2),
    ],
)
def test_an_entrypoint_referring_to_itself_is_refused(language: str, code: str, line: int) -> None:
    with pytest.raises(MigrationRefused) as info:
        migrate(language, code)
    assert info.value.line == line and "helper" in info.value.message


def test_typescript_with_an_enum_a_namespace_or_parameter_properties_is_migrated() -> None:
    """Regression (issue 34 point 10): an enum made the strip-only parse refuse the migration. The
    TypeScript parser blanks such constructs for the parse only: the code keeps them."""
    legacy = "enum V { Yes = 1 }\nexport function evaluate(a: any, b: any, c: string, d: string) { return V.Yes }\n"
    migrated = migrate("typescript", legacy)
    assert migrated.changed and migrated.interface_after == "evaluate"
    expected = "export function evaluate(inputs: any, outputs: string, trace: unknown) { return V.Yes }\n"
    assert migrated.code == "enum V { Yes = 1 }\n" + expected
    v2 = "enum V { Yes = 1 }\nexport function evaluate(i: any, o: string, t: unknown) { return V.Yes }\n"
    assert not migrate("typescript", v2).changed
    inside = "export function evaluate(a: any, b: any, c: string, d: string) {\n  enum E { A = 1 }\n  return E.A\n}\n"
    assert "enum E { A = 1 }" in migrate("typescript", inside).code


def test_typescript_needing_a_module_transform_is_refused_when_legacy_and_named() -> None:
    legacy = "import fs = require('fs')\nexport function evaluate(a: any, b: any, c: string, d: string) { return 1 }\n"
    with pytest.raises(MigrationRefused) as info:
        migrate("typescript", legacy)
    assert "import x = require()" in info.value.message and "ES import" in info.value.message


def test_a_rewritten_return_makes_the_declared_return_type_unknown() -> None:
    """Regression (issue 34 point 9): ``): string {`` kept while the returns became numbers or __legacyScore()."""
    sync = "export function evaluate(a: any, b: any, c: string, d: string): string {\n  return c === d ? '1' : '0'\n}\n"
    assert "trace: unknown): unknown {" in migrate("typescript", sync).code
    later = sync.replace("export function", "export async function").replace("): string", "): Promise<string>")
    assert "trace: unknown): Promise<unknown> {" in migrate("typescript", later).code
    kept = "export function evaluate(a: any, b: any, c: string, d: string): boolean {\n  return c === d\n}\n"
    assert "trace: unknown): boolean {" in migrate("typescript", kept).code  # a return left alone keeps its type


_TYPE_CHECK = """
const ts = require(process.argv[1]);
const program = ts.createProgram(process.argv.slice(2), { strict: true, noEmit: true, types: [],
  target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext, moduleDetection: ts.ModuleDetectionKind.Force });
for (const d of ts.getPreEmitDiagnostics(program)) {
  console.log(`${d.file ? d.file.fileName : ''}: ${ts.flattenDiagnosticMessageText(d.messageText, ' ')}`);
}
"""


def test_every_migrated_typescript_fixture_type_checks_under_strict() -> None:
    """The migrated TypeScript passes ``tsc --strict`` (the pinned compiler the migrator parses with): a
    return type that no longer matches its returns was the one error (tofixed_typed)."""
    afters = sorted(str(p) for p in (ROOT / "node").glob("*.after.ts"))
    done = subprocess.run(
        [node_executable(), "-e", _TYPE_CHECK, str(TS_PARSER), *afters], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr


def test_a_js_factory_whose_returned_function_is_in_the_source_is_an_entrypoint() -> None:
    code = "function make(t) {\n  return function (p, i, o, c) { return o === c; };\n}\nconst evaluate = make(1);\n"
    assert detect("javascript", code).interface == "legacy"
    with pytest.raises(InterfaceError):
        detect("javascript", "const evaluate = require('x').make();\n")  # not readable from the source


def test_the_python_adapter_wraps_an_async_legacy_function_with_await() -> None:
    code = "import functools\n\n@functools.wraps(print)\nasync def evaluate(a, b, c, d):\n    return c == d\n"
    migrated = migrate("python", code)
    assert "async def evaluate(inputs, outputs, trace):" in migrated.code
    assert "return await _evaluate_v1({}, inputs, outputs," in migrated.code
