"""What the rules say and refuse, beyond the fixtures' code: notes, refusals, entrypoint forms."""

from __future__ import annotations

import pytest

from evaluator_host.definitions.interfaces import detect
from evaluator_host.errors import InterfaceError, MigrationRefused
from evaluator_host.migration.codemod import TODO, migrate
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


def test_typescript_needing_a_transform_is_refused_when_legacy_and_left_alone_when_v2() -> None:
    legacy = "enum V { Yes = 1 }\nexport function evaluate(a: any, b: any, c: string, d: string) { return V.Yes }\n"
    with pytest.raises(MigrationRefused) as info:
        migrate("typescript", legacy)
    assert "enum" in info.value.message
    v2 = "enum V { Yes = 1 }\nexport function evaluate(i: any, o: string, t: unknown) { return V.Yes }\n"
    assert not migrate("typescript", v2).changed


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
