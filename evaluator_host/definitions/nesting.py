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

CPython's parser recurses in C before the depth can be measured; its own guards hold on an 8 MiB
thread stack, but not on a small one (a 256 KiB thread stack crashes the process on a 120 kB
``a+a+…``; musl's default is 128 KiB). So code that could nest that deeply (over
:data:`_INLINE_BYTES`) is parsed on a thread of its own with :data:`_PARSER_STACK_BYTES`, whatever
the platform's default.

JavaScript and TypeScript are bounded the same way in the Node inspector
(``runtimes/node/inspect.cjs``, ``MAX_DEPTH``), which answers the same message.
"""

from __future__ import annotations

import ast
import threading

from evaluator_host.errors import CodeSyntaxError
from evaluator_host.shared.lru import LRU

__all__ = ["MAX_PYTHON_DEPTH", "check_depth", "located", "parse_python", "too_deep"]

MAX_PYTHON_DEPTH = 100
"""Levels of the syntax tree below the module (a statement at top level is level 1; ``x = a+a+a``
is 4 deep). Python's own tokenizer allows 100 levels of indentation and 200 of brackets; the
weakest consumer after the parse (RestrictedPython's transformer) gives up near 160."""


_INLINE_BYTES = 4096
"""Code up to this size is parsed on the caller's thread: it cannot nest deeply enough to need much
stack (a few thousand levels at most; the crash above needs tens of thousands on a 256 KiB stack)."""

_PARSER_STACK_BYTES = 16 * 1024 * 1024
"""The stack of the parsing thread (the 120 kB shapes need under 1 MiB)."""

_stack_size_lock = threading.Lock()  # threading.stack_size is process-wide: set it only around a start

_WITHIN_BOUND_SIZE = 64
# code measured and found within the bound (first in, first out: never marked used)
_within_bound: LRU[tuple[str, int], bool] = LRU(_WITHIN_BOUND_SIZE)


PY311_FSTRING = (
    "; evaluators run Python 3.11 (docs/api.md, What runs the code), where an f-string cannot reuse its "
    "quote inside {…} or hold a backslash or a comment there (that is Python 3.12 syntax): write f\"{d['k']}\""
)


def located(message: str, line: int | None, column: int | None) -> str:
    """A Python syntax error's message with its place said once: ``msg (line L, column C)`` (as the Node
    inspector words it); the answer's ``line`` and ``column`` fields carry the same numbers. An f-string
    error also says which Python runs the code (:data:`PY311_FSTRING`): 3.12's f-strings fail on 3.11."""
    place = f" (line {line}, column {column})" if line and column else f" (line {line})" if line else ""
    hint = PY311_FSTRING if message.startswith("f-string") else ""
    return f"{message}{place}{hint}"


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

    The place reported is the first node of the walk past the limit (none for a node without one,
    e.g. ``arguments``); the depth is the deepest. A tight loop: about 1.5 µs a node (a 256 kB
    definition, ~120,000 nodes, in about 0.15 s; once per code, see :func:`parse_python`)."""
    deepest = 0
    first: ast.AST | None = None
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        node, depth = pop()
        if depth > deepest:
            deepest = depth
            if depth > limit and first is None:
                first = node
        depth += 1
        for name in node._fields:
            value = getattr(node, name, None)
            if value.__class__ is list:
                for item in value:
                    if isinstance(item, ast.AST):
                        push((item, depth))
            elif isinstance(value, ast.AST) and not isinstance(value, ast.expr_context):
                push((value, depth))
    if first is not None:
        line = getattr(first, "lineno", None)
        column = getattr(first, "col_offset", None)
        raise too_deep(deepest, limit, line, None if column is None else column + 1)


def parse_python(code: str, filename: str = "evaluator.py", limit: int = MAX_PYTHON_DEPTH) -> ast.Module:
    """``ast.parse(code)`` whose every failure is a :class:`CodeSyntaxError` (line, column), and whose
    tree is at most ``limit`` deep (:func:`check_depth`)."""
    try:
        tree = _parse(code, filename)
    except SyntaxError as exc:
        raise CodeSyntaxError(located(exc.msg, exc.lineno, exc.offset), line=exc.lineno, column=exc.offset) from exc
    except ValueError as exc:  # e.g. null bytes
        raise CodeSyntaxError(str(exc)) from exc
    except (RecursionError, MemoryError):  # CPython's own guards: too deep to build, "too complex to parse"
        raise too_deep(None, limit) from None
    if (code, limit) not in _within_bound:  # detection, the policy check and the scans parse the same code
        check_depth(tree, limit)
        _within_bound.put((code, limit), True)
    return tree


def _parse(code: str, filename: str) -> ast.Module:
    """``ast.parse``: inline for small code, else on a thread with a known, large stack (see above)."""
    if len(code) <= _INLINE_BYTES:
        return ast.parse(code, filename=filename)
    outcome: list[ast.Module | BaseException] = []

    def run() -> None:
        try:
            outcome.append(ast.parse(code, filename=filename))
        except BaseException as exc:  # handed to the caller's thread as it is
            outcome.append(exc)

    with _stack_size_lock:
        previous = threading.stack_size(_PARSER_STACK_BYTES)
        try:
            thread = threading.Thread(target=run, name="evh-parse", daemon=True)
            thread.start()
        finally:
            threading.stack_size(previous)
    thread.join()
    found = outcome[0]
    if isinstance(found, BaseException):
        raise found
    return found
