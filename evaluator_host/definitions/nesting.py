"""How deeply code may nest: one bound, checked once per parse, before anything recursive sees the tree.

Everything on the host that reads Python code after the parse recurses over its tree: the
compiler, RestrictedPython's transformer (the ``restricted`` policy), the capability scanner's
visitors and the migration codemod (libcst). Each gives up at its own depth (a ``RecursionError``
somewhere between 150 and 400 levels), and a ``RecursionError`` in a route is a 500. So the
definition's own parse (:func:`parse_python`) measures the tree's depth without recursing and
refuses anything deeper than :data:`MAX_PYTHON_DEPTH` with a :class:`CodeSyntaxError` (HTTP 422)
that names the depth, the bound, and where the nesting passes it; every consumer after it sees
only trees it can hold. What the parser itself refuses (CPython's own guards: ``RecursionError``
while building the tree, ``MemoryError`` "too complex", "too many nested parentheses") is the
same 422.

JavaScript and TypeScript are bounded the same way in the Node inspector
(``runtimes/node/inspect.cjs``, ``MAX_DEPTH``), which answers the same message.
"""

from __future__ import annotations

import ast

from evaluator_host.errors import CodeSyntaxError

__all__ = ["MAX_PYTHON_DEPTH", "check_depth", "parse_python", "too_deep"]

MAX_PYTHON_DEPTH = 100
"""Levels of the syntax tree below the module (a statement at top level is level 1; ``x = a+a+a``
is 4 deep). Python's own tokenizer allows 100 levels of indentation and 200 of brackets; the
weakest consumer after the parse (RestrictedPython's transformer) gives up near 160."""


def too_deep(depth: int | None, limit: int, line: int | None = None, column: int | None = None) -> CodeSyntaxError:
    """The one message for code nested past ``limit`` (``depth`` None: more than the parser could hold)."""
    found = f"depth {depth}" if depth is not None else "deeper than the parser can hold"
    where = f" (line {line})" if line is not None else ""
    return CodeSyntaxError(
        f"the code is nested too deeply ({found}, at most {limit}){where}; split the expression or "
        "the nested blocks into smaller pieces (e.g. a loop, a list, or helper functions)",
        line=line,
        column=column,
    )


def check_depth(tree: ast.AST, limit: int = MAX_PYTHON_DEPTH) -> None:
    """Raise :func:`too_deep` when ``tree`` nests past ``limit``; iterative (any depth is safe to measure).

    The place reported is the first node, in source order of the walk, past the limit (the nearest
    node above it that has a position, for nodes without one)."""
    deepest = 0
    first: tuple[int | None, int | None] | None = None
    stack: list[tuple[ast.AST, int, tuple[int | None, int | None]]] = [(tree, 0, (None, None))]
    while stack:
        node, depth, place = stack.pop()
        line = getattr(node, "lineno", None)
        if line is not None:
            place = (line, getattr(node, "col_offset", -1) + 1)
        if depth > deepest:
            deepest = depth
        if depth > limit and first is None:
            first = place
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.expr_context):
                stack.append((child, depth + 1, place))
    if first is not None:
        raise too_deep(deepest, limit, *first)


def parse_python(code: str, filename: str = "evaluator.py", limit: int = MAX_PYTHON_DEPTH) -> ast.Module:
    """``ast.parse(code)`` whose every failure is a :class:`CodeSyntaxError` (line, column), and whose
    tree is at most ``limit`` deep (:func:`check_depth`)."""
    try:
        tree = ast.parse(code, filename=filename)
    except SyntaxError as exc:
        raise CodeSyntaxError(f"{exc.msg} (line {exc.lineno})", line=exc.lineno, column=exc.offset) from exc
    except ValueError as exc:  # e.g. null bytes
        raise CodeSyntaxError(str(exc)) from exc
    except (RecursionError, MemoryError):  # CPython's own guards: too deep to build, "too complex to parse"
        raise too_deep(None, limit) from None
    check_depth(tree, limit)
    return tree
