"""Finding the legacy entrypoint in a libcst module, and what scope analysis says about it.

The rewrite rules (``prologue``, ``adapter``, ``returns``) act on the :class:`Entry` found
here; :func:`adapter_reason` decides between the default rule (new signature + a prologue
rebinding the old names, body untouched) and the fallback adapter (the legacy function kept
whole under another name, a small v2 ``evaluate`` calling it). Names are resolved with
libcst's scope analysis, never by text search.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
from libcst.metadata import (
    Assignment,
    BuiltinScope,
    GlobalScope,
    MetadataWrapper,
    PositionProvider,
    Scope,
    ScopeProvider,
)

from evaluator_host.errors import MigrationRefused

__all__ = [
    "NEW_PARAMS",
    "Entry",
    "adapter_reason",
    "app_params_keys",
    "find_entry",
    "free_name",
    "reads_param",
    "self_references",
]

NEW_PARAMS = ("inputs", "outputs", "trace")
_INTROSPECTION = frozenset({"locals", "vars", "eval", "exec", "dir"})  # they would see the prologue's names


@dataclass(frozen=True)
class Entry:
    """The legacy entrypoint: a top-level ``def evaluate`` or ``evaluate = lambda ...`` statement."""

    statement: cst.FunctionDef | cst.SimpleStatementLine
    function: cst.FunctionDef | cst.Lambda
    params: cst.Parameters
    line: int

    @property
    def names(self) -> list[str]:
        """The legacy parameter names, positional ones first (at most four are bound)."""
        p = self.params
        return [param.name.value for param in [*p.posonly_params, *p.params]]

    @property
    def is_async(self) -> bool:
        return isinstance(self.function, cst.FunctionDef) and self.function.asynchronous is not None


def _lambda_target(statement: cst.SimpleStatementLine) -> cst.Lambda | None:
    if len(statement.body) != 1 or not isinstance(statement.body[0], cst.Assign):
        return None
    assign = statement.body[0]
    names = [t.target for t in assign.targets]
    if len(names) == 1 and isinstance(names[0], cst.Name) and names[0].value == "evaluate":
        return assign.value if isinstance(assign.value, cst.Lambda) else None
    return None


def find_entry(wrapper: MetadataWrapper) -> Entry:
    """The last top-level definition of ``evaluate`` (what Python binds), as a def or an assigned lambda."""
    positions = wrapper.resolve(PositionProvider)
    found: Entry | None = None
    for statement in wrapper.module.body:
        if isinstance(statement, cst.FunctionDef) and statement.name.value == "evaluate":
            line = positions[statement.name].start.line
            found = Entry(statement, statement, statement.params, line)
        elif isinstance(statement, cst.SimpleStatementLine) and (fn := _lambda_target(statement)) is not None:
            found = Entry(statement, fn, fn.params, positions[statement].start.line)
    if found is None:
        raise MigrationRefused("no top-level evaluate() to migrate")
    return found


def _names_within(node: cst.CSTNode) -> list[cst.Name]:
    found: list[cst.Name] = []

    class _Collect(cst.CSTVisitor):
        def visit_Name(self, name: cst.Name) -> None:
            found.append(name)

    node.visit(_Collect())
    return found


def _resolves_outside(scope: Scope, name: str) -> bool:
    """Whether ``name`` read in ``scope`` means a module-level or builtin binding (or nothing)."""
    assignments = scope[name]
    return all(isinstance(a.scope, GlobalScope | BuiltinScope) for a in assignments)


def self_references(wrapper: MetadataWrapper, entry: Entry) -> list[cst.Name]:
    """Names inside the entrypoint that mean the module's ``evaluate`` (recursion, registration)."""
    scopes = wrapper.resolve(ScopeProvider)
    found = []
    for name in _names_within(entry.function):
        scope = scopes.get(name)
        if name.value == "evaluate" and scope is not None and name in _accessed(scope, name):
            if _resolves_outside(scope, "evaluate"):
                found.append(name)
    return found


def _accessed(scope: Scope, name: cst.Name) -> set[cst.CSTNode]:
    return {access.node for access in scope.accesses[name.value]}


def adapter_reason(wrapper: MetadataWrapper, entry: Entry) -> str | None:
    """Why the default rule cannot be used here (the adapter then is), or None when it can."""
    if isinstance(entry.function, cst.Lambda):
        return "the entrypoint is an assigned lambda"
    fn = entry.function
    p = entry.params
    if fn.decorators:
        return "the entrypoint is decorated"
    if p.posonly_params or p.kwonly_params or isinstance(p.star_arg, cst.Param) or p.star_kwarg is not None:
        return "the signature has positional-only, keyword-only or variadic parameters"
    if isinstance(p.star_arg, cst.ParamStar):
        return "the signature has keyword-only parameters"
    names = entry.names
    if len(set(names)) != len(names) or len(names) != 4:
        return "the signature is not four plain parameters"
    for position, legacy in enumerate(names):
        if legacy in NEW_PARAMS and (position, legacy) not in ((1, "inputs"), (2, "outputs")):
            return f"the legacy parameter {legacy!r} would be confused with the new one of that name"
    scopes = wrapper.resolve(ScopeProvider)
    for name in _names_within(fn.body):
        scope = scopes.get(name)
        if scope is None or name not in _accessed(scope, name):
            continue
        if name.value in NEW_PARAMS and name.value not in names and _resolves_outside(scope, name.value):
            return f"the body reads the module-level name {name.value!r}, which the new parameter would shadow"
        if name.value in _INTROSPECTION and _resolves_outside(scope, name.value):
            return f"the body calls {name.value}(), which would see the rebound names"
    return None


def reads_param(wrapper: MetadataWrapper, entry: Entry, position: int) -> bool:
    """Whether the body reads the legacy parameter at ``position`` (True when it cannot tell)."""
    params = [*entry.params.posonly_params, *entry.params.params]
    if position >= len(params):
        return True  # bound through *args: assume it is read
    scope = wrapper.resolve(ScopeProvider).get(params[position].name)
    if scope is None:
        return True
    assignments = scope.assignments[params[position].name.value]
    return any(a.references for a in assignments if isinstance(a, Assignment) and isinstance(a.node, cst.Param))


def free_name(wrapper: MetadataWrapper, wanted: str) -> str:
    """``wanted``, or ``wanted_2``, ... : a module-level name nothing in the module binds or reads."""
    used = {n.value for n in _names_within(wrapper.module)}
    name, n = wanted, 1
    while name in used:
        n += 1
        name = f"{wanted}_{n}"
    return name


def _literal(node: cst.BaseExpression) -> str | None:
    """A plain string literal's value (no f-string, no concatenation), else None."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def app_params_keys(entry: Entry) -> tuple[str, ...]:
    """The keys the entrypoint reads of its first parameter by a literal name: ``app_params["k"]`` and
    ``app_params.get("k", ...)`` (in the order first read; a parameter that is not a plain name: none)."""
    names = entry.names
    if not names:
        return ()
    name = names[0]
    keys: dict[str, None] = {}

    class _Keys(cst.CSTVisitor):
        def visit_Subscript(self, node: cst.Subscript) -> None:
            if isinstance(node.value, cst.Name) and node.value.value == name and len(node.slice) == 1:
                index = node.slice[0].slice
                if isinstance(index, cst.Index) and (key := _literal(index.value)) is not None:
                    keys[key] = None

        def visit_Call(self, node: cst.Call) -> None:
            func = node.func
            if (
                isinstance(func, cst.Attribute)
                and isinstance(func.value, cst.Name)
                and func.value.value == name
                and func.attr.value == "get"
                and node.args
                and (key := _literal(node.args[0].value)) is not None
            ):
                keys[key] = None

    entry.function.visit(_Keys())
    return tuple(keys)
