"""Rule ``numeric-string-returns``: keep the answer of evaluators that return numbers as strings.

Legacy revisions accept a numeric string (``"0.7"`` → 0.7, with a warning; Agenta coerced with
``float()``); the v2 interface answers ``invalid_result`` for any string. So a ``return`` of the
entrypoint itself (not of nested functions) whose value is a string is rewritten:

- a string literal that ``float()`` accepts becomes that number (``return "1"`` → ``return 1.0``);
  other literals stay (a non-numeric string is ``invalid_result`` under both interfaces);
- a value built as a string (f-strings, ``str(...)``, ``"%..." % x``, ``.format()`` and other
  ``str`` methods, or a local name only ever assigned such values) is wrapped in a small helper
  added after the entrypoint, which does what the legacy normalization did (``float(s.strip())``
  when that parses, else the string unchanged).

A value that is a string only at run time (read from a dict, returned by a helper) cannot be
seen here: the differential run (``POST /v1/evaluators/{id}/migrate``, ``migrate --check-with``)
is what catches those on real rows.
"""

from __future__ import annotations

import math

import libcst as cst

__all__ = ["HELPER", "is_stringish", "numeric_literal", "rewrite_returns"]

_STR_METHODS = frozenset(
    {"format", "strip", "lstrip", "rstrip", "lower", "upper", "replace", "join", "title", "capitalize", "zfill"}
)

HELPER = '''
def {name}(value):
    """Legacy evaluators could return numeric strings ("0.7"); v2 needs the number (added by evaluator-host migrate)."""
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return value
    return value
'''


def numeric_literal(node: cst.BaseExpression) -> float | None:
    """The number a plain string literal holds, when ``float()`` accepts it and it is finite."""
    if not isinstance(node, cst.SimpleString) or "b" in node.prefix.lower() or "f" in node.prefix.lower():
        return None
    try:
        value = float(str(node.evaluated_value).strip())
    except (ValueError, TypeError):
        return None
    return value if math.isfinite(value) else None


def is_stringish(node: cst.BaseExpression, strings: frozenset[str] = frozenset()) -> bool:
    """Whether ``node`` is built as a ``str`` (see the module docstring); ``strings`` are local names
    known to hold only strings."""
    if isinstance(node, cst.SimpleString | cst.ConcatenatedString | cst.FormattedString):
        return "b" not in getattr(node, "prefix", "").lower()
    if isinstance(node, cst.Name):
        return node.value in strings
    if isinstance(node, cst.Call):
        func = node.func
        if isinstance(func, cst.Name):
            return func.value in ("str", "repr", "format")
        if isinstance(func, cst.Attribute) and func.attr.value in _STR_METHODS:
            return func.attr.value != "replace" or is_stringish(func.value, strings)
        return False
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo | cst.Add):
        return is_stringish(node.left, strings)
    if isinstance(node, cst.IfExp):
        return is_stringish(node.body, strings) or is_stringish(node.orelse, strings)
    return False


class _Locals(cst.CSTVisitor):
    """Every value assigned to each local name of one function (nested functions skipped)."""

    def __init__(self, root: cst.CSTNode) -> None:
        self.root = root
        self.values: dict[str, list[cst.BaseExpression | None]] = {}

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is self.root

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return node is self.root

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                self.values.setdefault(target.target.value, []).append(node.value)
            else:
                for name in _names(target.target):
                    self.values.setdefault(name, []).append(None)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if isinstance(node.target, cst.Name):
            self.values.setdefault(node.target.value, []).append(node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if isinstance(node.target, cst.Name):
            self.values.setdefault(node.target.value, []).append(None)

    def visit_For(self, node: cst.For) -> None:
        for name in _names(node.target):
            self.values.setdefault(name, []).append(None)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        if isinstance(node.target, cst.Name):
            self.values.setdefault(node.target.value, []).append(node.value)


def _names(node: cst.CSTNode) -> list[str]:
    found: list[str] = []

    class _Collect(cst.CSTVisitor):
        def visit_Name(self, name: cst.Name) -> None:
            found.append(name.value)

    node.visit(_Collect())
    return found


def _string_locals(fn: cst.FunctionDef | cst.Lambda) -> frozenset[str]:
    """Local names every assignment of which is a string (parameters are never known)."""
    visitor = _Locals(fn)
    fn.visit(visitor)
    params = {p.name.value for p in [*fn.params.posonly_params, *fn.params.params, *fn.params.kwonly_params]}
    strings: set[str] = set()
    for _ in range(3):  # names assigned from names: a few rounds reach a fixed point in practice
        for name, values in visitor.values.items():
            if name not in params and all(v is not None and is_stringish(v, frozenset(strings)) for v in values):
                strings.add(name)
    return frozenset(strings)


class _Returns(cst.CSTTransformer):
    def __init__(self, root: cst.FunctionDef, helper: str, strings: frozenset[str]) -> None:
        self.root = root
        self.helper = helper
        self.strings = strings
        self.wrapped = 0
        self.literals = 0

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is self.root

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def leave_Return(self, original: cst.Return, updated: cst.Return) -> cst.Return:
        value = updated.value
        if value is None:
            return updated
        number = numeric_literal(value)
        if number is not None:
            self.literals += 1
            return updated.with_changes(value=cst.Float(repr(number)))
        if is_stringish(value, self.strings) and not isinstance(value, cst.SimpleString):
            self.wrapped += 1
            return updated.with_changes(value=cst.Call(cst.Name(self.helper), [cst.Arg(value)]))
        return updated


def rewrite_returns(fn: cst.FunctionDef, helper: str) -> tuple[cst.FunctionDef, int, int]:
    """``fn`` with its string returns rewritten; how many were wrapped in ``helper`` and how many
    numeric literals became numbers."""
    visitor = _Returns(fn, helper, _string_locals(fn))
    rewritten = fn.visit(visitor)
    assert isinstance(rewritten, cst.FunctionDef)
    return rewritten, visitor.wrapped, visitor.literals


def lambda_returns_string(fn: cst.Lambda) -> bool:
    """Whether an assigned lambda's value is built as a string (the adapter then wraps its answer)."""
    return is_stringish(fn.body) or numeric_literal(fn.body) is not None
