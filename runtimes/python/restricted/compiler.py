"""The restricted policy's compiler: RestrictedPython's transformer, completed for ordinary code, and the
crossings: every place a value enters user code from code it did not write goes through a guard.

What the transformer adds to RestrictedPython's (which guards attribute and item access, iteration and
unpacking — ``_getattr_``, ``_getitem_``, ``_getiter_``):

* **calls** (:meth:`visit_Call`): ``f(a)`` becomes ``_call_(f, a)``, whose result passes the value guard,
  containers walked (a runtime or standard function's dict holding a namespace is refused where it is
  returned, not only where an item is taken out). ``super()`` alone stays a direct call (its frame),
  and the name ``super`` cannot be rebound;
* **entry** (:func:`_entry`): every ``def`` and ``lambda`` first passes its parameters through the value
  guard — so a value C code hands to a callback (``map``, ``filter``, ``sorted(key=)``, ``min``/``max``,
  ``functools.reduce``, ``itertools``, a dunder method a builtin calls) is guarded like any other;
* ``await``, ``yield`` (the value sent in), ``with … as`` (what ``__enter__`` returns), ``async for``
  (each item) and decorators (what they return) pass the same guard.

Refused at compile time (:class:`PolicySyntaxError`): names and attributes starting with ``_`` (but
:data:`DUNDER_READS`), frame/generator/code attributes, ``exec``/``eval``, ``match``, ``except*``…
"""

from __future__ import annotations

import ast
import types
from typing import Any

from .names import DUNDER_DEFS, DUNDER_READS, FORBIDDEN_ATTRS, PolicySyntaxError


def _name(name: str) -> ast.Name:
    return ast.Name(name, ast.Load())


def _guarded(func: str, node: ast.expr) -> ast.Call:
    call = ast.Call(_name(func), [node], [])
    ast.copy_location(call, node)
    return ast.fix_missing_locations(call)


def _entry(args: ast.arguments, where: ast.AST) -> ast.Call | None:
    """``_enter_(<every parameter>)``: the parameters of a function through the value guard, or None."""
    names = [arg.arg for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    values: list[ast.expr] = [_name(name) for name in names]
    if args.vararg is not None:
        values.append(ast.Starred(_name(args.vararg.arg), ast.Load()))
    keywords = [ast.keyword(None, _name(args.kwarg.arg))] if args.kwarg is not None else []
    if not values and not keywords:
        return None
    call = ast.Call(_name("_enter_"), values, keywords)
    ast.copy_location(call, where)
    return ast.fix_missing_locations(call)


def _guard_body(node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    """The entry guard as the function's first statement (after its docstring); decorators guarded."""
    entry = _entry(node.args, node)
    if entry is not None:
        docstring = (
            bool(node.body) and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
        )
        statement = ast.copy_location(ast.Expr(entry), node)
        node.body.insert(1 if docstring else 0, statement)
    node.decorator_list = [_guarded("_decorator_", d) for d in node.decorator_list]


def _transformer_class() -> type[Any]:
    from RestrictedPython import RestrictingNodeTransformer
    from RestrictedPython.transformer import copy_locations

    class Transformer(RestrictingNodeTransformer):  # type: ignore[misc, valid-type]
        """RestrictedPython's transformer, completed for ordinary code; errors keep their column."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.positions: list[tuple[int | None, int | None, str]] = []
            self.unevaluated: set[int] = set()  # annotations under `from __future__ import annotations`

        def visit(self, node: ast.AST) -> Any:
            if id(node) in self.unevaluated:
                return node  # never evaluated by the interpreter: kept as written, checked type-shaped
            return super().visit(node)

        def postponed_annotations(self, tree: ast.Module) -> None:
            """Under ``from __future__ import annotations`` annotations are stored as their source
            text (for ``typing`` to evaluate later), so they are left untransformed — the guard calls
            would become part of the text — and must be type-shaped as a whole."""
            future = any(
                isinstance(stmt, ast.ImportFrom)
                and stmt.module == "__future__"
                and any(alias.name == "annotations" for alias in stmt.names)
                for stmt in tree.body
            )
            if not future:
                return
            for node in ast.walk(tree):
                found: list[ast.expr | None] = []
                if isinstance(node, ast.AnnAssign):
                    found.append(node.annotation)
                elif isinstance(node, ast.arg):
                    found.append(node.annotation)
                elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    found.append(node.returns)
                for annotation in found:
                    if annotation is None:
                        continue
                    problem = type_expression_problem(ast.unparse(annotation))
                    if problem:
                        self.error(annotation, f"annotation {ast.unparse(annotation)!r}: {problem}")
                    else:
                        self.unevaluated.add(id(annotation))

        def error(self, node: ast.AST, info: str) -> None:
            super().error(node, info)
            col = getattr(node, "col_offset", None)
            self.positions.append((getattr(node, "lineno", None), None if col is None else col + 1, info))

        def check_name(self, node: Any, name: str | None, allow_magic_methods: bool = False) -> None:
            if name == "super" and not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)):
                self.error(node, '"super" cannot be rebound (super() is called directly, unguarded).')
            if allow_magic_methods and name in DUNDER_DEFS and getattr(node, "col_offset", 0) != 0:
                return
            super().check_name(node, name, allow_magic_methods)

        def visit_Attribute(self, node: ast.Attribute) -> Any:
            if node.attr in FORBIDDEN_ATTRS:
                self.error(node, f'"{node.attr}" leads to frames, code or the event loop: refused.')
            if node.attr in DUNDER_READS and isinstance(node.ctx, ast.Load):
                node = self.node_contents_visit(node)
                call = ast.Call(ast.Name("_getattr_", ast.Load()), [node.value, ast.Constant(node.attr)], [])
                copy_locations(call, node)
                return call
            return super().visit_Attribute(node)

        def visit_AugAssign(self, node: ast.AugAssign) -> Any:
            if isinstance(node.target, ast.Name):
                return super().visit_AugAssign(node)
            from RestrictedPython.transformer import IOPERATOR_TO_STR

            target = node.target
            op = ast.Constant(IOPERATOR_TO_STR[type(node.op)])
            value = self.visit(node.value)
            if isinstance(target, ast.Attribute):
                if target.attr.startswith("_"):
                    self.error(node, f'"{target.attr}" is an invalid attribute name because it starts with "_".')
                args = [self.visit(target.value), ast.Constant(target.attr), op, value]
                func = "_inplace_attr_"
            else:
                assert isinstance(target, ast.Subscript)
                key = target.slice
                if isinstance(key, ast.Slice):
                    none = ast.Constant(None)
                    key = ast.Call(
                        ast.Name("slice", ast.Load()), [key.lower or none, key.upper or none, key.step or none], []
                    )
                args = [self.visit(target.value), self.visit(key), op, value]
                func = "_inplace_item_"
            call = ast.Expr(ast.Call(ast.Name(func, ast.Load()), args, []))
            copy_locations(call, node)
            ast.fix_missing_locations(call)
            return call

        def visit_AnnAssign(self, node: ast.AnnAssign) -> Any:
            self._check_annotation(node.annotation)
            return self.node_contents_visit(node)

        def visit_arg(self, node: ast.arg) -> Any:
            if node.annotation is not None:
                self._check_annotation(node.annotation)
            return super().visit_arg(node)

        def visit_FunctionDef(self, node: ast.FunctionDef) -> Any:
            if node.returns is not None:
                self._check_annotation(node.returns)
            node = super().visit_FunctionDef(node)
            _guard_body(node)
            return node

        def visit_Lambda(self, node: ast.Lambda) -> Any:
            node = super().visit_Lambda(node)
            entry = _entry(node.args, node)
            if entry is not None:  # `_enter_(…) or body`: _enter_ returns None
                node.body = ast.copy_location(ast.BoolOp(ast.Or(), [entry, node.body]), node.body)
            return node

        def visit_ClassDef(self, node: ast.ClassDef) -> Any:
            node = super().visit_ClassDef(node)
            node.decorator_list = [_guarded("_decorator_", d) for d in node.decorator_list]
            return node

        def visit_Call(self, node: ast.Call) -> Any:
            bare_super = isinstance(node.func, ast.Name) and node.func.id == "super" and not node.args
            node = super().visit_Call(node)
            if bare_super:  # zero-argument super() reads its caller's frame: called directly
                return node
            if isinstance(node.func, ast.Name) and node.func.id == "_apply_":
                node.func.id = "_call_"  # the star-args form: the same guard
                return node
            node.args.insert(0, node.func)
            node.func = ast.copy_location(_name("_call_"), node.func)
            return node

        def visit_Yield(self, node: ast.Yield) -> Any:
            return _guarded("_result_", self.node_contents_visit(node))

        def visit_YieldFrom(self, node: ast.YieldFrom) -> Any:
            return _guarded("_result_", self.node_contents_visit(node))

        def visit_With(self, node: ast.With) -> Any:
            node = super().visit_With(node)
            for item in node.items:
                if item.optional_vars is not None:
                    item.context_expr = _guarded("_with_", item.context_expr)
            return node

        def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> Any:
            if node.returns is not None:
                self._check_annotation(node.returns)
            self.check_name(node, node.name, allow_magic_methods=True)
            self.check_function_argument_names(node)
            with self.print_info.new_print_scope():
                node = self.node_contents_visit(node)
                self.inject_print_collector(node)
            _guard_body(node)
            return node

        def visit_Await(self, node: ast.Await) -> Any:
            return _guarded("_result_", self.node_contents_visit(node))

        def visit_AsyncFor(self, node: ast.AsyncFor) -> Any:
            node = self.node_contents_visit(node)
            node.iter = _guarded("_aiter_", node.iter)
            return node

        def visit_AsyncWith(self, node: ast.AsyncWith) -> Any:
            node = self.node_contents_visit(node)
            for item in node.items:
                if item.optional_vars is not None:
                    item.context_expr = _guarded("_with_", item.context_expr)
            return node

        def visit_Nonlocal(self, node: ast.Nonlocal) -> Any:
            for name in node.names:
                self.check_name(node, name)
            return self.node_contents_visit(node)

        def _check_annotation(self, annotation: ast.expr) -> None:
            if id(annotation) in self.unevaluated:
                return
            for sub in ast.walk(annotation):
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                    problem = type_expression_problem(sub.value)
                    if problem:
                        self.error(sub, f"string annotation {sub.value!r}: {problem}")

    return Transformer


_TRANSFORMER: type[Any] | None = None


def compile_restricted(source: str, filename: str) -> types.CodeType:
    """``source`` compiled under the policy; :class:`PolicySyntaxError` (first refusal, with line
    and column) or ``SyntaxError`` when it cannot be accepted. Never runs anything."""
    global _TRANSFORMER
    if _TRANSFORMER is None:
        _TRANSFORMER = _transformer_class()
    tree = ast.parse(source, filename, "exec")
    errors: list[str] = []
    warnings: list[str] = []
    used: dict[str, bool] = {}
    transformer = _TRANSFORMER(errors, warnings, used)
    transformer.postponed_annotations(tree)
    tree = transformer.visit(tree)
    if transformer.positions:
        line, column, info = transformer.positions[0]
        more = len(transformer.positions) - 1
        message = f"restricted policy: {info}" + (f" (and {more} more)" if more else "")
        raise PolicySyntaxError(message, (filename, line or 1, column or 1, None))
    code: types.CodeType = compile(tree, filename, "exec")
    return code


def type_expression_problem(text: str) -> str | None:
    """Why ``text`` is not a type-shaped expression (None when it is): only names, dotted names,
    subscripts, constants, tuples/lists and ``|``; nothing starting with ``_``."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        return "not an expression"
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id.startswith("_"):
            return f"the name {node.id!r} starts with '_'"
        if isinstance(node, ast.Attribute) and (node.attr.startswith("_") or node.attr in FORBIDDEN_ATTRS):
            return f"the attribute {node.attr!r} is not reachable"
        allowed = (
            ast.Expression, ast.Name, ast.Attribute, ast.Subscript, ast.Constant, ast.Tuple, ast.List,
            ast.Load, ast.BinOp, ast.BitOr, ast.Slice,
        )  # fmt: skip
        if not isinstance(node, allowed) or isinstance(node, ast.BinOp) and not isinstance(node.op, ast.BitOr):
            return f"{type(node).__name__} is not allowed in a type annotation"
    return None
