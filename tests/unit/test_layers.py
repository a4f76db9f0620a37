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

TOP = ("evaluator_host.api", "evaluator_host.services", "evaluator_host.cli")  # wiring and surfaces
PATH = (  # the evaluation path
    "evaluator_host.evaluation",
    "evaluator_host.evaluators",
    "evaluator_host.jobs",
    "evaluator_host.migration",
)
BELOW = ("evaluator_host.sandbox", "evaluator_host.store")

# layer (a folder or module of the package) -> what it must never import
FORBIDDEN = {
    "sandbox": [*TOP, *PATH, "evaluator_host.store", "evaluator_host.models", "evaluator_host.definitions"],
    "definitions": [*TOP, *PATH, *BELOW],
    "migrate": [*TOP, *PATH, *BELOW],
    "migration.py": [*TOP],
    "results": [*TOP, *PATH, *BELOW, "evaluator_host.definitions"],
    "store": [*TOP, *PATH, "evaluator_host.sandbox"],
    "evaluation.py": [*TOP, "evaluator_host.jobs", "evaluator_host.store", "evaluator_host.evaluators"],
    "evaluators.py": [*TOP, "evaluator_host.jobs"],
    "jobs": [*TOP],
    "queue": ["evaluator_host.api", "evaluator_host.cli"],  # a worker host wires services itself (queue/host.py)
    "languages.py": [*TOP, *PATH, *BELOW, "evaluator_host.models"],
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
