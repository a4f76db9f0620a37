"""No language name is compared outside the registry: a branch on the language is a property its family or its
language answers (``family.lock_format``, ``family.purl_type``, ``family.pin_text(name, version)``,
``language.type_checked``, …) in ``evaluator_host/definitions/languages.py``, so a new language is a manifest, not
an edit of every ``if language == "python"``; and the evaluation path looks a definition's language up once."""

from __future__ import annotations

import ast
import asyncio
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evaluator_host.definitions import languages
from evaluator_host.evaluation.models import EvaluatorSettings
from evaluator_host.evaluation.path import Evaluation
from evaluator_host.sandbox.pool.workers import WorkerPool
from evaluator_host.settings import Settings
from evaluator_host.testing.builder import FakeBuilder
from evaluator_host.testing.fake import FakeBackend

PACKAGE = Path(languages.__file__).resolve().parents[1]
# the registry's names, and the ones people write for them
NAMES = {*languages.names(), *(f.name for f in languages.families()), "js", "ts", "nodejs"}


def _named(node: ast.AST) -> Iterator[str]:
    """The language names a comparison's operand holds: a string, or strings in a tuple, list or set."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.lower() in NAMES:
        yield node.value
    elif isinstance(node, ast.Tuple | ast.List | ast.Set):
        for element in node.elts:
            yield from _named(element)


def _comparisons(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                yield from ((node.lineno, name) for name in _named(operand))
        elif isinstance(node, ast.MatchValue):
            yield from ((node.lineno, name) for name in _named(node.value))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("startswith", "endswith") and node.args:
                prefix = node.args[0]
                if isinstance(prefix, ast.Constant) and isinstance(prefix.value, str):
                    if prefix.value.rstrip("-") in NAMES:
                        yield node.lineno, prefix.value


def test_the_finder_sees_each_kind_of_comparison() -> None:
    code = (
        "a == 'python'\nb != 'typescript'\nc in ('node', 'x')\nif 'javascript' == d: pass\n"
        "match e:\n    case 'python': pass\nf.startswith('python-')\ng == 'pythonic'\n"
    )
    assert sorted(_comparisons(ast.parse(code))) == [
        (1, "python"),
        (2, "typescript"),
        (3, "node"),
        (4, "javascript"),
        (6, "python"),
        (7, "python-"),
    ]


def test_no_module_outside_the_registry_compares_a_language_name() -> None:
    registry = Path(languages.__file__).resolve()
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line} compares {name!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != registry
        for line, name in _comparisons(ast.parse(path.read_text(), str(path)))
    ]
    assert found == [], "ask the registry (definitions/languages.py) instead:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("language", "code"),
    [
        ("python", "import six\n\ndef evaluate(inputs, outputs, trace):\n    return 1.0\n"),
        ("javascript", "function evaluate(inputs, outputs, trace) { return 1.0 }\n"),
    ],
)
def test_one_validation_looks_its_language_up_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, language: str, code: str
) -> None:
    """``Evaluation.validate`` resolves the language once and carries the entry through detection, pins, the
    policy check, the capability report and the runtime id (before: five look-ups of one language; a detector is
    called with the language's name, as its contract in the manifest says, so the Node detector's own look-up of
    its inspector script is not the path's)."""
    looked_up: list[str] = []
    real = languages.get

    def counting(name: str) -> languages.Language:
        caller = Path(sys._getframe(1).f_code.co_filename).name
        if caller != "js_inspect.py":  # (the Node detector finds its inspector script by the name it is given)
            looked_up.append(name)
        return real(name)

    monkeypatch.setattr(languages, "get", counting)
    settings = Settings(data_dir=tmp_path)
    pins: Any = {"six": "1.16.0"} if language == "python" else {"leven": "3.1.0"}
    policy = "restricted" if language == "python" else "standard"

    async def validate() -> Any:
        backend = FakeBackend(builder=FakeBuilder())
        evaluation = Evaluation(settings, WorkerPool(backend, settings), backend.builder)
        try:  # code never seen before: nothing answered from a cache
            marked = (f"# {uuid.uuid4()}\n" if language == "python" else f"// {uuid.uuid4()}\n") + code
            return await evaluation.validate(language, marked, pins, EvaluatorSettings(policy=policy))
        finally:
            evaluation.close()

    prepared = asyncio.run(validate())
    assert prepared.pins and prepared.runtime_id
    assert looked_up == [language]
