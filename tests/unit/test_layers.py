"""The dependency direction of the package: arrows only point down.

``api -> evaluation / evaluators / jobs -> definitions, sandbox, store -> languages, settings,
errors, models``. Checked on the import statements of every module (also imports inside
functions), so a shortcut shows up here before it shows up in a review.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "evaluator_host"

# layer (a folder or module of the package) -> what it must never import
FORBIDDEN = {
    "sandbox": [
        "evaluator_host.api",
        "evaluator_host.models",
        "evaluator_host.definitions",
        "evaluator_host.evaluation",
        "evaluator_host.evaluators",
        "evaluator_host.jobs",
        "evaluator_host.services",
        "evaluator_host.cli",
        "evaluator_host.store",
    ],
    "definitions": [
        "evaluator_host.api",
        "evaluator_host.sandbox",
        "evaluator_host.store",
        "evaluator_host.jobs",
        "evaluator_host.evaluation",
        "evaluator_host.services",
    ],
    "results": [
        "evaluator_host.api",
        "evaluator_host.sandbox",
        "evaluator_host.store",
        "evaluator_host.jobs",
        "evaluator_host.evaluation",
        "evaluator_host.services",
        "evaluator_host.definitions",
    ],
    "store": [
        "evaluator_host.api",
        "evaluator_host.sandbox",
        "evaluator_host.jobs",
        "evaluator_host.evaluation",
        "evaluator_host.services",
    ],
    "evaluation.py": [
        "evaluator_host.api",
        "evaluator_host.jobs",
        "evaluator_host.services",
        "evaluator_host.store",
        "evaluator_host.evaluators",
    ],
    "evaluators.py": ["evaluator_host.api", "evaluator_host.jobs", "evaluator_host.services"],
    "jobs": ["evaluator_host.api", "evaluator_host.services", "evaluator_host.cli"],
    "languages.py": [
        "evaluator_host.api",
        "evaluator_host.sandbox",
        "evaluator_host.store",
        "evaluator_host.jobs",
        "evaluator_host.evaluation",
        "evaluator_host.services",
        "evaluator_host.models",
    ],
}


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


@pytest.mark.parametrize("layer", list(FORBIDDEN))
def test_a_layer_imports_nothing_above_it(layer: str) -> None:
    target = PACKAGE / layer
    modules = sorted(target.rglob("*.py")) if target.is_dir() else [target]
    assert modules
    bad = [
        f"{m.relative_to(PACKAGE.parent)}:{line} imports {name}"
        for m in modules
        for line, name in _imports(m)
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN[layer])
    ]
    assert bad == [], "\n".join(bad)
