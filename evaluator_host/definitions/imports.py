"""Imports the pins do not cover, found before the code runs (a warning, never a refusal).

A missing package otherwise shows only at run time (``No module named 'pandas'``, line 1).
:func:`unpinned` reads the code's imports — Python from the AST (``import x``, ``from x
import y``; relative imports skipped), JS/TS from ``import … from "x"``, ``import("x")`` and
``require("x")`` with a bare specifier — drops the standard library (Python's
``sys.stdlib_module_names``; Node's built-in modules, ``node:`` prefixed or not) and what the
runtime's lock provides (every resolved package, so a dependency of a pin counts), and names
the package to pin for each import left. Import names that differ from their package
(``sklearn`` is ``scikit-learn``) are matched through a short table; an import inside a
``try`` is still listed, since the warning only says what the pins lack.
"""

from __future__ import annotations

import ast
import re
import sys

from evaluator_host.definitions.nesting import parse_python
from evaluator_host.definitions.package_names import PYPI_NAMES as _PYPI_NAMES
from evaluator_host.errors import CodeSyntaxError

__all__ = ["BUILTIN_PYTHON", "unpinned"]

# importable without a pin: the protocol types the Python runtime provides itself (runtimes/python/protocols/;
# a pinned nemo-platform's real package takes their place), docs/metrics.md
BUILTIN_PYTHON = frozenset({"nemo_evaluator_sdk"})

# Node 24's require("module").builtinModules (without the _-prefixed internals)
_NODE_BUILTINS = frozenset(
    "assert async_hooks buffer child_process cluster console constants crypto dgram diagnostics_channel dns "
    "domain events fs http http2 https inspector module net os path perf_hooks process punycode querystring "
    "readline repl stream string_decoder sys timers tls trace_events tty url util v8 vm wasi worker_threads "
    "zlib sea sqlite test".split()
)
_JS_IMPORT = re.compile(
    r"""(?:\bimport\s+(?:[\w*{}\s,$]+\s+from\s+)?|\bimport\s*\(\s*|\brequire\s*\(\s*|\bexport\s+[\w*{}\s,$]+\s+from\s+)"""
    r"""(["'])([^"'\s]+)\1"""
)


def _canonical(name: str) -> str:
    """A package name as PEP 503 compares them (npm names pass unchanged but lower-cased)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _lock_names(lock: list[str]) -> set[str]:
    """Package names of a lock (``name==1.0`` for pip, ``name@1.0`` / ``@scope/name@1.0`` for npm)."""
    names = set()
    for entry in lock:
        name = entry.split("==", 1)[0] if "==" in entry else entry.rpartition("@")[0] or entry
        names.add(_canonical(name.strip()))
    return names


def _python_imports(code: str) -> list[str]:
    try:
        tree = parse_python(code)
    except CodeSyntaxError:
        return []  # detection reports syntax errors and code nested too deeply (nesting.py)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
    return found


def _python_missing(code: str, covered: set[str]) -> list[str]:
    missing: dict[str, None] = {}
    for module in _python_imports(code):
        top = module.split(".")[0]
        if top in sys.stdlib_module_names or top == "__future__" or top in BUILTIN_PYTHON:
            continue
        package = _PYPI_NAMES.get(".".join(module.split(".")[:2]), _PYPI_NAMES.get(top, top))
        if _canonical(package) not in covered and _canonical(top) not in covered:
            missing[package] = None
    return list(missing)


def _node_missing(code: str, covered: set[str]) -> list[str]:
    missing: dict[str, None] = {}
    for match in _JS_IMPORT.finditer(code):
        spec = match.group(2)
        if spec.startswith((".", "/")) or ":" in spec and not spec.startswith("node:"):
            continue
        bare = spec.removeprefix("node:")
        parts = bare.split("/")
        package = "/".join(parts[:2]) if bare.startswith("@") else parts[0]
        if spec.startswith("node:") or package in _NODE_BUILTINS:
            continue
        if _canonical(package) not in covered:
            missing[package] = None
    return list(missing)


# the family's installer (its manifest's ``installer``) → how its code's imports are read
_READERS = {"pip": _python_missing, "npm": _node_missing}


def unpinned(installer: str, code: str, pins: dict[str, str], lock: list[str]) -> list[str]:
    """A warning naming each package the code imports that neither the pins nor their lock provide
    (``installer``: the language family's, from the registry)."""
    reader = _READERS.get(installer)
    if reader is None:
        return []
    covered = {_canonical(name) for name in pins} | _lock_names(lock)
    missing = reader(code, covered)
    if not missing:
        return []
    example = "{" + ", ".join(f'"{name}": "<version>"' for name in missing) + "}"
    names = ", ".join(repr(name) for name in missing)
    return [
        f"the code imports {names}, which no pinned package provides; pin "
        f"{'it' if len(missing) == 1 else 'them'} in packages, e.g. {example}, or the import fails at run time"
    ]
