"""The test suite's own layout: what tests share lives in ``tests/support``, and only there.

A ``conftest.py`` is pytest's (fixtures and hooks, loaded by pytest itself) and a test module is a
module of tests: importing either from another file runs its module-level code twice under two names
and ties a test file's edits to every file that borrows from it. So no file under ``tests/`` imports
a ``conftest`` or a ``test_*`` module; ``tests/support`` imports no test module and no conftest either.
Checked on the import statements of every file (also imports inside functions and ``import x.y``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
FILES = sorted(p for p in TESTS.rglob("*.py") if "fixtures" not in p.relative_to(TESTS).parts[:-1])


def _imported(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) of every ``tests.…`` import in ``path``, relative imports resolved."""
    return _imports_in(path.read_text(), ["tests", *path.relative_to(TESTS).parts[:-1]])


def _imports_in(source: str, package: list[str]) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
            # ``from tests.x import y`` may import the module tests.x.y: count both spellings
            found += [(node.lineno, base)] + [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return [(line, name) for line, name in found if name == "tests" or name.startswith("tests.")]


def _is_test_or_conftest(dotted: str) -> bool:
    last = dotted.rsplit(".", 1)[-1]
    return last == "conftest" or last.startswith("test_")


def _module_exists(dotted: str) -> bool:
    path = TESTS.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(TESTS)))
def test_no_file_imports_a_conftest_or_a_test_module(path: Path) -> None:
    bad = [
        f"{path.relative_to(TESTS)}:{line} imports {name}"
        for line, name in _imported(path)
        if _is_test_or_conftest(name) and _module_exists(name)
    ]
    assert not bad, "shared helpers belong in tests/support: " + "; ".join(bad)


def test_helpers_live_in_tests_support() -> None:
    """Every imported ``tests.…`` module is ``tests.support`` or one of its modules (no helper module
    beside the tests it serves, where the next test file would import it from a sibling folder)."""
    imported = {
        (str(path.relative_to(TESTS)), line, name)
        for path in FILES
        for line, name in _imported(path)
        if _module_exists(name)
    }
    assert imported, "the scan found no import of tests.support at all: it is broken"
    outside = sorted(f"{p}:{line} imports {name}" for p, line, name in imported if not _in_support(name))
    assert not outside, outside


def _in_support(dotted: str) -> bool:
    return dotted == "tests" or dotted == "tests.support" or dotted.startswith("tests.support.")


def test_the_scan_sees_what_it_forbids() -> None:
    """The scan itself: each spelling of a forbidden import is found (it would pass vacuously otherwise)."""
    source = (
        "from tests."
        "conftest import x\n"  # split: a grep for the import finds none in the suite
        "import tests.jobs.test_runner\n"
        "def f():\n    from tests.sandbox import test_pool_fake\n"
        "from . import test_jobs\n"
        "from tests.support.service import evaluate\n"
    )
    imported = _imports_in(source, ["tests", "api"])  # as if in tests/api/
    names = [name for _line, name in imported if _is_test_or_conftest(name) and _module_exists(name)]
    assert sorted(names) == [
        "tests.api.test_jobs",
        "tests.conftest",
        "tests.jobs.test_runner",
        "tests.sandbox.test_pool_fake",
    ]
