"""The ``restricted`` policy of the Python harness: RestrictedPython with a complete guard set.

Defence in depth *inside* the sandbox, never the boundary (docs/security.md). Loaded by the
harness (and, for definition-time checks, by the host) from this file; needs the standard
library and ``RestrictedPython`` (bound read-only into every sandbox at ``vendor_dir``).

What it does
------------
* **Compile** (:func:`compile_restricted`): RestrictedPython's transformer, extended so that
  ordinary evaluator code compiles — augmented assignment of attributes and items, annotated
  assignments, ``async def`` / ``await`` / ``async for`` / ``async with``, ``nonlocal``, the
  datamodel's dunder methods in classes, ``super().__init__``. Still refused: names and
  attributes starting with ``_`` (but for :data:`DUNDER_READS`), ``exec``/``eval``, the
  ``metaclass`` keyword, ``match``, ``except*``, star imports, frame/generator/code attributes.
  A refusal raises :class:`PolicySyntaxError` (a ``SyntaxError`` with line and column).
* **Run** (:func:`make_globals`): the module's globals — guarded builtins (no ``open``,
  ``exec``, ``eval``, ``compile``, ``globals``, ``vars``, ``input``, ``breakpoint``), a guarded
  ``__import__`` (:data:`STDLIB_ALLOWLIST` plus the top-level modules of the runtime's own
  packages), and the guards the compiled code calls (``_getattr_``, ``_getitem_``,
  ``_write_``, ``_getiter_``, ``_inplacevar_``, ``_apply_``, ``_print_``, …).
* **Refuse walks**: any attribute, item or ``from … import`` that would hand the code a module
  not on the allowlist (``json.codecs``, ``re.enum.sys``, ``typing.sys``, ``builtins``), a
  frame, a code object or a traceback is refused with :class:`RestrictedError`; so are the
  frame/generator/coroutine/task attributes that lead to them (``gi_frame``, ``cr_frame``,
  ``get_stack``, ``get_loop``…). Allowlisted standard modules are handed out as *views*:
  copies holding only their allowed names, with the helpers that would walk attributes
  unguarded replaced (``operator.attrgetter``/``methodcaller``, ``string.Formatter``,
  ``str.format``) — so ``from operator import attrgetter`` is guarded too.
* **One value guard on every value-yielding path** (:meth:`_Policy.value`): attribute and item
  access, iteration and unpacking (``_getiter_``, ``iter``, ``next``), containers' methods
  (``d.get``, ``pop``, ``setdefault``…), ``min``/``max`` and every function of a standard module's
  view (its results) — so a forbidden value (above, plus ``getattr``/``setattr``, functions of
  ``os``/``sys``/…, a module's namespace, a dict holding ``__builtins__``) is never handed out.
* **No string is evaluated in another frame**: ``typing.ForwardRef`` accepts only type-shaped
  strings (names, dotted names, subscripts, constants, ``|``) and resolves them with
  :func:`_resolve_type_expression` through the guards instead of ``eval`` (which put the real
  ``__builtins__`` into the caller's namespace: issue 28); ``dataclasses`` field names must be
  identifiers (``exec`` runs text made of them).
* **No setattr/getattr of any name through the standard library**: ``functools.update_wrapper``/
  ``wraps`` with their default names only, ``copy``'s ``__reduce__`` state only on a new instance,
  ``enum.global_enum`` only into the evaluator's own module.

What it does not: the runtime's own packages run unrestricted inside (a pinned package may do
anything the sandbox allows); CPU, memory and time are the sandbox's limits, not this module's.
"""

from __future__ import annotations

import ast
import builtins
import operator
import string
import sys
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

__all__ = [
    "DUNDER_READS",
    "STDLIB_ALLOWLIST",
    "PolicySyntaxError",
    "RestrictedError",
    "compile_restricted",
    "guard_value",
    "guarded_getattr",
    "make_globals",
    "runtime_modules",
]

# The vetted standard library: pure computation on values. Left out on purpose: anything that
# opens files or sockets, starts processes, loads code or reaches the interpreter (os, sys, io's
# file classes, pathlib, shutil, tempfile, subprocess, socket, urllib.request, http, importlib,
# inspect, types, gc, ctypes, pickle, marshal, threading, multiprocessing, logging, builtins).
STDLIB_ALLOWLIST: frozenset[str] = frozenset(
    {
        "__future__",
        "abc",
        "ast",
        "asyncio",
        "base64",
        "binascii",
        "bisect",
        "calendar",
        "cmath",
        "collections",
        "collections.abc",
        "contextlib",
        "copy",
        "csv",
        "dataclasses",
        "datetime",
        "decimal",
        "difflib",
        "enum",
        "fractions",
        "functools",
        "hashlib",
        "heapq",
        "hmac",
        "html",
        "io",
        "itertools",
        "json",
        "math",
        "numbers",
        "operator",
        "pprint",
        "random",
        "re",
        "reprlib",
        "secrets",
        "statistics",
        "string",
        "struct",
        "textwrap",
        "time",
        "typing",
        "unicodedata",
        "urllib",
        "urllib.parse",
        "uuid",
        "zlib",
    }
)

# Modules of which only these names are handed out (the rest open files, start processes or
# reach an event loop's executor/subprocess machinery).
_ONLY: dict[str, frozenset[str]] = {
    "io": frozenset(
        {"StringIO", "BytesIO", "TextIOWrapper", "SEEK_SET", "SEEK_CUR", "SEEK_END", "UnsupportedOperation"}
    ),
    "asyncio": frozenset(
        {
            *"sleep gather wait wait_for timeout shield as_completed create_task TaskGroup Semaphore".split(),
            *"BoundedSemaphore Lock Event Condition Queue PriorityQueue LifoQueue QueueEmpty QueueFull".split(),
            *"TimeoutError CancelledError InvalidStateError iscoroutine iscoroutinefunction".split(),
            *"FIRST_COMPLETED FIRST_EXCEPTION ALL_COMPLETED".split(),
        }
    ),
    "uuid": frozenset(
        {"UUID", "uuid3", "uuid4", "uuid5", "NAMESPACE_DNS", "NAMESPACE_URL", "NAMESPACE_OID", "NAMESPACE_X500"}
    ),  # uuid1/getnode may run ifconfig
    "urllib": frozenset({"parse"}),
}
# Names refused on every module (they run argv-driven command lines that read files).
_MODULE_DENY = frozenset({"main", "test"})

# Attribute names refused whatever the object: the ways to a frame, a code object, an event loop.
FORBIDDEN_ATTRS: frozenset[str] = frozenset(
    {
        "tb_frame", "tb_next", "f_back", "f_builtins", "f_code", "f_globals", "f_locals", "f_trace",
        "f_generator", "co_code", "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code",
        "cr_await", "cr_origin", "ag_frame", "ag_code", "ag_await", "get_stack", "print_stack",
        "get_loop", "get_coro", "format_map",
    }
)  # fmt: skip

# Dunder attributes code may read (``super().__init__(…)``, ``type(x).__name__``): none leads on.
DUNDER_READS: frozenset[str] = frozenset(
    {"__init__", "__name__", "__qualname__", "__doc__", "__class__", "__module__", "__version__"}
)

# Dunder methods a class body may define (its own objects' behaviour; nothing is reached by it).
_DUNDER_DEFS = frozenset(
    f"__{name}__"
    for name in (
        "init post_init repr str format hash bool len iter next reversed contains getitem setitem delitem "
        "missing call enter exit aenter aexit aiter anext await eq ne lt le gt ge add radd iadd sub rsub "
        "isub mul rmul imul matmul rmatmul truediv rtruediv itruediv floordiv rfloordiv ifloordiv mod rmod "
        "imod pow rpow ipow neg pos abs invert and rand iand or ror ior xor rxor ixor lshift rshift int "
        "float complex index round floor ceil trunc bytes"
    ).split()
)

_FORBIDDEN_TYPES = (types.FrameType, types.CodeType, types.TracebackType)
_DANGEROUS_BUILTINS = frozenset(
    id(getattr(builtins, name))
    for name in (
        "open __import__ exec eval compile breakpoint input globals locals vars help getattr setattr delattr".split()
    )
    if hasattr(builtins, name)
)
# Functions of these modules are refused whatever path hands them out (a forged ``__module__`` lets
# ``typing.get_type_hints`` resolve names in any module's namespace, for instance).
_FORBIDDEN_FUNCTION_MODULES = frozenset(
    "os posix nt sys subprocess _posixsubprocess builtins io _io importlib _imp marshal pickle _pickle "
    "ctypes _ctypes gc inspect socket _socket shutil pathlib signal _signal threading _thread "
    "multiprocessing tempfile runpy code codeop pdb pty fcntl resource mmap select sysconfig site "
    "_frozen_importlib _frozen_importlib_external zipimport posixpath genericpath ntpath".split()
)
# The container types whose bound methods (``d.get``, ``d.pop``, ``d.setdefault``, ``l.pop``…) hand
# out their items: their results pass the value guard like ``d[k]`` does.
_CONTAINER_TYPES: tuple[type, ...] = (dict, list, set, frozenset, tuple, types.MappingProxyType)
# Their methods that return an item itself (``values``/``items``/``copy`` return containers, whose
# items are guarded when taken out; ``append`` and the rest return None or a count).
_ITEM_METHODS = frozenset({"get", "pop", "popitem", "setdefault"})


class RestrictedError(Exception):
    """Raised when restricted code reaches for something the policy refuses."""


class PolicySyntaxError(SyntaxError):
    """The code uses a construct the restricted policy refuses (``lineno``, ``offset`` 1-based)."""


# -- compile -------------------------------------------------------------------------------


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
            if allow_magic_methods and name in _DUNDER_DEFS and getattr(node, "col_offset", 0) != 0:
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
            return super().visit_FunctionDef(node)

        def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> Any:
            if node.returns is not None:
                self._check_annotation(node.returns)
            self.check_name(node, node.name, allow_magic_methods=True)
            self.check_function_argument_names(node)
            with self.print_info.new_print_scope():
                node = self.node_contents_visit(node)
                self.inject_print_collector(node)
            return node

        def visit_Await(self, node: ast.Await) -> Any:
            return self.node_contents_visit(node)

        def visit_AsyncFor(self, node: ast.AsyncFor) -> Any:
            return self.node_contents_visit(node)

        def visit_AsyncWith(self, node: ast.AsyncWith) -> Any:
            return self.node_contents_visit(node)

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


# -- the module views and the value guard ---------------------------------------------------


class _Policy:
    """The allowlist of one evaluator (the vetted stdlib + its runtime's top-level modules)."""

    def __init__(self, extra: Iterable[str], own: str = "evaluator") -> None:
        self.extra = frozenset(extra)
        self.own = own
        self.views: dict[str, types.ModuleType] = {}
        self.real: dict[int, types.ModuleType] = {}  # id(view) -> the module it shows

    def module_allowed(self, name: str) -> bool:
        return name in STDLIB_ALLOWLIST or name.partition(".")[0] in self.extra

    def is_stdlib(self, name: str) -> bool:
        return name in STDLIB_ALLOWLIST and name.partition(".")[0] not in self.extra

    def attr_allowed(self, module: str, name: str) -> bool:
        only = _ONLY.get(module)
        if only is not None:
            return name in only
        return name not in _MODULE_DENY or not self.is_stdlib(module)

    def view(self, module: types.ModuleType) -> types.ModuleType:
        """The module as restricted code sees it (a pinned package: itself)."""
        name = module.__name__
        if not self.is_stdlib(name):
            return module
        found = self.views.get(name)
        if found is not None:
            return found
        view = types.ModuleType(name, module.__doc__)
        self.views[name] = view
        self.real[id(view)] = module
        for key, value in list(vars(module).items()):
            if key.startswith("_") or key in FORBIDDEN_ATTRS or not self.attr_allowed(name, key):
                continue
            try:
                setattr(view, key, self.exported(name, value))
            except RestrictedError:
                continue
        for key, value in _REPLACEMENTS.get(name, {}).items():
            setattr(view, key, value)
        view.__dict__["__name__"] = name
        return view

    def value(self, value: Any) -> Any:
        """``value`` if restricted code may hold it (a module as its view); RestrictedError if not.

        The one guard of every path that hands restricted code a value: attribute and item access,
        iteration and unpacking, the results of the allowlisted modules' functions and of the
        containers' methods, type-hint resolution. Refused: a module off the allowlist, a frame, a
        code object, a traceback, ``open``/``eval``/``exec``/``compile``/``__import__``/the real
        ``getattr``…, a function of ``os``/``sys``/``subprocess``/… (:data:`_FORBIDDEN_FUNCTION_MODULES`),
        a module's namespace dict and any dict holding a ``__builtins__`` (a globals dict)."""
        kind = type(value)
        if kind is types.FunctionType or kind is types.BuiltinFunctionType:
            if id(value) in _DANGEROUS_BUILTINS:
                raise RestrictedError(f"restricted policy: the builtin {value.__name__}() is not reachable")
            module = getattr(value, "__module__", None)
            if module in _FORBIDDEN_FUNCTION_MODULES:
                raise RestrictedError(f"restricted policy: {module}.{value.__name__} is not reachable")
            return value
        if kind is dict:
            if "__builtins__" in value or value is builtins.__dict__:
                raise RestrictedError("restricted policy: a namespace holding __builtins__ is not reachable")
            name = value.get("__name__")
            if type(name) is str and getattr(sys.modules.get(name), "__dict__", None) is value:
                raise RestrictedError(f"restricted policy: the namespace of the module {name!r} is not reachable")
            return value
        if isinstance(value, types.ModuleType):
            name = value.__name__
            if value is self.views.get(name):
                return value
            if not self.module_allowed(name):
                raise RestrictedError(f"restricted policy: the module {name!r} is not on the import allowlist")
            return self.view(value)
        if isinstance(value, _FORBIDDEN_TYPES):
            raise RestrictedError(f"restricted policy: {type(value).__name__} objects are not reachable")
        return value

    def exported(self, module: str, value: Any) -> Any:
        """``value`` as a standard module's view hands it out: guarded, and a function's results
        guarded too (a call is one more way to reach a value)."""
        value = self.value(value)
        if type(value) is types.FunctionType and not value.__dict__:  # typing.NamedTuple (has
            return _guarded_function(value)  # __mro_entries__) must stay itself: class bases name it
        if type(value) is types.BuiltinFunctionType or type(value) is types.MethodType:  # random.choice…
            return _GuardedBuiltin(value)
        return value

    def namespace_allowed(self, namespace: Any) -> bool:
        """Whether a type hint may be resolved in ``namespace``: not the namespace of a module off the
        allowlist (a class's ``__module__`` can be forged to ``'os'``)."""
        if type(namespace) is not dict:
            return True
        name = namespace.get("__name__")
        if type(name) is not str or getattr(sys.modules.get(name), "__dict__", None) is not namespace:
            return True
        top = name.partition(".")[0]
        return name == self.own or top in STDLIB_ALLOWLIST or top in self.extra


def _guard_result(value: Any) -> Any:
    return _POLICY.value(value)


def _guarded_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A Python function of a standard module whose results pass the value guard (binds like it)."""
    import functools

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        return _POLICY.value(fn(*args, **kwargs))

    return call


class _GuardedBuiltin:
    """A builtin function (or a container's bound method) whose results pass the value guard; like a
    builtin, it does not bind as a method."""

    __slots__ = ("_fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self._fn = fn

    @property
    def __name__(self) -> str:
        return str(getattr(self._fn, "__name__", "builtin"))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _POLICY.value(self._fn(*args, **kwargs))

    def __repr__(self) -> str:
        return repr(self._fn)


def _safe_formatter(getattr_: Callable[..., Any]) -> type[string.Formatter]:
    class SafeFormatter(string.Formatter):
        """``str.format`` whose ``{0.attr}`` fields go through the attribute guard."""

        def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
            import _string

            first, rest = _string.formatter_field_name_split(field_name)
            obj = self.get_value(first, args, kwargs)
            for is_attr, key in rest:
                obj = getattr_(obj, key) if is_attr else obj[key]
            return obj, first

    return SafeFormatter


_REPLACEMENTS: dict[str, dict[str, Any]] = {}


# -- the guards ----------------------------------------------------------------------------

_POLICY = _Policy(())


def guard_value(value: Any) -> Any:
    """The value guard of the current evaluator (tests use it directly)."""
    return _POLICY.value(value)


def guarded_getattr(obj: Any, name: str, *default: Any) -> Any:
    """``getattr`` under the policy: ``_`` names (but :data:`DUNDER_READS`), :data:`FORBIDDEN_ATTRS`,
    a module's withheld names and anything :func:`guard_value` refuses raise RestrictedError."""
    if type(name) is not str:
        raise TypeError("attribute name must be a string")
    if (name.startswith("_") and name not in DUNDER_READS) or name in FORBIDDEN_ATTRS:
        raise RestrictedError(f"restricted policy: the attribute {name!r} is not reachable")
    if name == "format" and (isinstance(obj, str) or isinstance(obj, type) and issubclass(obj, str)):
        formatter = _FORMATTER()
        if isinstance(obj, str):
            return lambda *args, **kwargs: formatter.vformat(obj, args, kwargs)
        return lambda template, *args, **kwargs: formatter.vformat(template, args, kwargs)
    if type(obj) is types.ModuleType and name not in obj.__dict__:
        real = _POLICY.real.get(id(obj))
        if real is not None and hasattr(real, name):  # a name the view left out, or added since
            if not _POLICY.attr_allowed(obj.__name__, name):
                raise RestrictedError(f"restricted policy: {obj.__name__}.{name} is not reachable")
            value = _POLICY.exported(obj.__name__, getattr(real, name))
            setattr(obj, name, value)
            return value
    value = _POLICY.value(getattr(obj, name, *default))
    if name in _ITEM_METHODS:
        kind = type(value)
        if (kind is types.BuiltinMethodType and isinstance(getattr(value, "__self__", None), _CONTAINER_TYPES)) or (
            kind is types.MethodDescriptorType and issubclass(value.__objclass__, _CONTAINER_TYPES)
        ):
            return _GuardedBuiltin(value)  # d.get / d.pop / d.setdefault / l.pop / dict.get …: items, guarded
    return value


_FORMATTER = _safe_formatter(guarded_getattr)


def _guarded_hasattr(obj: Any, name: str) -> bool:
    try:
        guarded_getattr(obj, name)
    except (AttributeError, RestrictedError):
        return False
    return True


def _guarded_setattr(obj: Any, name: str, value: Any) -> None:
    if type(name) is not str or name.startswith("_"):
        raise RestrictedError(f"restricted policy: the attribute {name!r} cannot be set")
    setattr(_write(obj), name, value)


def _guarded_delattr(obj: Any, name: str) -> None:
    if type(name) is not str or name.startswith("_"):
        raise RestrictedError(f"restricted policy: the attribute {name!r} cannot be deleted")
    delattr(_write(obj), name)


def _write(obj: Any) -> Any:
    if isinstance(obj, types.ModuleType):
        raise RestrictedError("restricted policy: modules are read-only")
    return obj


def _getitem(obj: Any, key: Any) -> Any:
    return _POLICY.value(obj[key])


def _guard_item(value: Any) -> Any:
    """An item of an iteration: guarded, and so are the members of a tuple (``d.items()`` pairs)."""
    if type(value) is tuple:
        for member in value:
            _POLICY.value(member)
        return value
    return _POLICY.value(value)


def _guarded_iter(obj: Any, *sentinel: Any) -> Iterator[Any]:
    """``iter`` whose items pass the value guard: ``for``, comprehensions, unpacking and ``iter()``."""
    return map(_guard_item, iter(obj, *sentinel))


def _guarded_next(iterator: Any, *default: Any) -> Any:
    return _guard_item(next(iterator, *default))


_INPLACE: dict[str, Callable[[Any, Any], Any]] = {
    "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
    "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow, "<<=": operator.ilshift,
    ">>=": operator.irshift, "|=": operator.ior, "^=": operator.ixor, "&=": operator.iand, "@=": operator.imatmul,
}  # fmt: skip


def _inplacevar(op: str, target: Any, value: Any) -> Any:
    return _INPLACE[op](target, value)


def _inplace_attr(obj: Any, name: str, op: str, value: Any) -> None:
    _guarded_setattr(obj, name, _INPLACE[op](guarded_getattr(obj, name), value))


def _inplace_item(obj: Any, key: Any, op: str, value: Any) -> None:
    _write(obj)[key] = _INPLACE[op](_getitem(obj, key), value)


def _apply(fn: Any, *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


class _Print:
    """``print`` as usual (to the captured stdout); ``printed`` is always empty."""

    def __init__(self, _getattr_: Any = None) -> None:
        pass

    def __call__(self) -> str:
        return ""

    def _call_print(self, *objects: Any, **kwargs: Any) -> None:
        if kwargs.get("file") is None:
            kwargs["file"] = sys.stdout
        else:
            guarded_getattr(kwargs["file"], "write")
        print(*objects, **kwargs)  # noqa: T201 - restricted code's own print, to its captured stdout


def _attrgetter(*names: str) -> Callable[[Any], Any]:
    def get(obj: Any, name: str) -> Any:
        for part in name.split("."):
            obj = guarded_getattr(obj, part)
        return obj

    if len(names) == 1:
        return lambda obj: get(obj, names[0])
    return lambda obj: tuple(get(obj, name) for name in names)


def _methodcaller(name: str, /, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
    return lambda obj: guarded_getattr(obj, name)(*args, **kwargs)


def _guarded_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
    if level != 0:
        raise ImportError("restricted policy: relative imports are not allowed")
    if not _POLICY.module_allowed(name):
        raise ImportError(f"restricted policy: the module {name!r} is not on the import allowlist")
    __import__(name, None, None, fromlist, 0)
    if fromlist:
        view = _POLICY.view(sys.modules[name])
        for item in fromlist:
            if item.startswith("_"):
                raise ImportError(f"restricted policy: cannot import {item!r}")
            guarded_getattr(view, item)
        return view
    # `import a.b.c` binds `a`, whose view must then lead to the views of b and c
    parts = name.split(".")
    top = _POLICY.view(sys.modules[parts[0]])
    parent = top
    for depth in range(1, len(parts)):
        child = _POLICY.view(sys.modules[".".join(parts[: depth + 1])])
        if id(parent) in _POLICY.real:
            setattr(parent, parts[depth], child)
        parent = child
    return top


_SAFE_BUILTIN_NAMES = (
    "None False True Ellipsis NotImplemented abs aiter all anext any ascii bin bool bytearray bytes callable "
    "chr classmethod complex dict divmod enumerate filter float format frozenset hash hex id int isinstance "
    "issubclass iter len list map max memoryview min next object oct ord pow property range repr reversed "
    "round set slice sorted staticmethod str sum super tuple type zip __build_class__"
).split()


# The builtins the policy withholds (docs/security.md): each name is there, as a stand-in whose call
# raises RestrictedError naming it, so ``open(...)`` reads as the policy's refusal, not a NameError.
_WITHHELD_BUILTIN_NAMES = "open exec eval compile globals locals vars input breakpoint help".split()


class _Withheld:
    """A withheld builtin: calling it raises :class:`RestrictedError` (it holds only its name)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *_args: Any, **_kwargs: Any) -> Any:
        raise RestrictedError(f"restricted policy: the builtin {self.name}() is not available")

    def __repr__(self) -> str:
        return f"<builtin {self.name} withheld by the restricted policy>"


def _builtins() -> dict[str, Any]:
    safe: dict[str, Any] = {name: _Withheld(name) for name in _WITHHELD_BUILTIN_NAMES}
    safe.update({name: getattr(builtins, name) for name in _SAFE_BUILTIN_NAMES})
    for name, value in vars(builtins).items():
        if isinstance(value, type) and issubclass(value, BaseException):
            safe[name] = value
    safe.update(
        __import__=_guarded_import,
        getattr=guarded_getattr,
        hasattr=_guarded_hasattr,
        iter=_guarded_iter,
        next=_guarded_next,
        min=_GuardedBuiltin(min),
        max=_GuardedBuiltin(max),
        setattr=_guarded_setattr,
        delattr=_guarded_delattr,
        RestrictedError=RestrictedError,
    )
    return safe


def _update_wrapper(wrapper: Any, wrapped: Any, *args: Any, **kwargs: Any) -> Any:
    """``functools.update_wrapper`` with its default ``assigned``/``updated`` only: other names make it
    a getattr/setattr of any attribute (``updated=('__globals__',)`` hands the evaluator's namespace a
    module's real ``__builtins__``; ``assigned=('__code__',)`` swaps code objects)."""
    import functools

    _default_wrapper_names(*args, **kwargs)
    return functools.update_wrapper(wrapper, wrapped)


def _wraps(wrapped: Any, *args: Any, **kwargs: Any) -> Any:
    """``functools.wraps`` with its default ``assigned``/``updated`` only (see :func:`_update_wrapper`)."""
    import functools

    _default_wrapper_names(*args, **kwargs)
    return functools.wraps(wrapped)


def _default_wrapper_names(assigned: Any = None, updated: Any = None, **others: Any) -> None:
    import functools

    if others:
        raise TypeError(f"unexpected arguments: {', '.join(others)}")
    if assigned is not None and tuple(assigned) != tuple(functools.WRAPPER_ASSIGNMENTS):
        raise RestrictedError("restricted policy: functools.update_wrapper/wraps copy only the default attributes")
    if updated is not None and tuple(updated) != tuple(functools.WRAPPER_UPDATES):
        raise RestrictedError("restricted policy: functools.update_wrapper/wraps update only the default attributes")


def _resolve_type_expression(text: str, globalns: Any, localns: Any) -> Any:
    """The value of the type-shaped expression ``text`` (see :func:`type_expression_problem`),
    computed without ``eval``: names looked up in ``localns``, ``globalns`` and its builtins,
    attributes, items and every intermediate value through the policy's guards. Nothing is written
    to the namespaces (``eval`` would add the real ``__builtins__`` to a caller's dict)."""
    problem = type_expression_problem(text)
    if problem:
        raise RestrictedError(f"restricted policy: forward reference {text!r}: {problem}")
    for namespace in (globalns, localns):
        if not _POLICY.namespace_allowed(namespace):
            raise RestrictedError(
                f"restricted policy: type hints are not resolved in the namespace of {namespace.get('__name__')!r}"
            )

    def lookup(name: str) -> Any:
        for namespace in (localns, globalns):
            if namespace is not None and name in namespace:
                return _POLICY.value(namespace[name])
        found = globalns.get("__builtins__") if isinstance(globalns, dict) else None
        if isinstance(found, types.ModuleType):
            found = vars(found)
        if not isinstance(found, dict):
            found = vars(builtins)
        if name in found:
            return _POLICY.value(found[name])
        raise NameError(f"name {name!r} is not defined")

    def value(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Name):
            return lookup(node.id)
        if isinstance(node, ast.Attribute):
            return guarded_getattr(value(node.value), node.attr)
        if isinstance(node, ast.Subscript):
            return _getitem(value(node.value), value(node.slice))
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Tuple):
            return tuple(value(item) for item in node.elts)
        if isinstance(node, ast.List):
            return [value(item) for item in node.elts]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return _POLICY.value(value(node.left) | value(node.right))
        if isinstance(node, ast.Slice):
            parts = (node.lower, node.upper, node.step)
            return slice(*(None if part is None else value(part) for part in parts))
        raise RestrictedError(f"restricted policy: {type(node).__name__} is not allowed in a type annotation")

    return value(ast.parse(text.strip(), mode="eval"))


def _forward_ref_guard() -> None:
    """Type hints by construction: ``typing.ForwardRef`` refuses strings that are not type-shaped,
    and evaluates the ones it accepts with :func:`_resolve_type_expression` instead of ``eval`` in
    ``typing``'s own frame (``get_type_hints``, ``_eval_type``, ``functools.singledispatch``,
    libraries: every path that resolves a string hint goes through ``ForwardRef._evaluate``).
    Re-checked at evaluation: ``__forward_arg__`` may have been set past ``__init__``."""
    import typing

    original = typing.ForwardRef.__init__
    if getattr(original, "_restricted", False):
        return

    def init(self: Any, arg: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(arg, str) and (problem := type_expression_problem(arg)):
            raise RestrictedError(f"restricted policy: forward reference {arg!r}: {problem}")
        original(self, arg, *args, **kwargs)

    def evaluate(self: Any, globalns: Any, localns: Any, *args: Any, **kwargs: Any) -> Any:
        # 3.11: (globalns, localns, recursive_guard); 3.12+: (…, type_params=…, *, recursive_guard)
        if "recursive_guard" in kwargs:
            guard = kwargs.pop("recursive_guard")
            extra: tuple[Any, ...] = args
        else:
            guard, extra = (args[0] if args else frozenset()), ()
        arg = self.__forward_arg__
        if not isinstance(arg, str):
            raise RestrictedError("restricted policy: a forward reference must be a string")
        if arg in guard:
            return self
        if globalns is None and localns is None:
            globalns = localns = {}
        elif globalns is None:
            globalns = localns
        elif localns is None:
            localns = globalns
        module = getattr(self, "__forward_module__", None)
        if module is not None:
            globalns = getattr(sys.modules.get(module, None), "__dict__", globalns)
        type_ = typing._type_check(  # type: ignore[attr-defined]
            _resolve_type_expression(arg, globalns, localns),
            "Forward references must evaluate to types.",
            is_argument=self.__forward_is_argument__,
            allow_special_forms=self.__forward_is_class__,
        )
        value = typing._eval_type(type_, globalns, localns, *extra, recursive_guard=guard | {arg})  # type: ignore[attr-defined]
        self.__forward_value__ = value
        self.__forward_evaluated__ = True
        return value

    init._restricted = True  # type: ignore[attr-defined]
    typing.ForwardRef.__init__ = init  # type: ignore[method-assign]
    typing.ForwardRef._evaluate = evaluate  # type: ignore[method-assign]


def _dataclass_field_guard() -> None:
    """``dataclasses`` generates ``__init__``/``__eq__``/``__repr__`` as source text from the field
    names and ``exec``s it: a class made with ``type(name, bases, {'__annotations__': {…}})`` can
    name a field ``"x,<any expression>"`` and have it run unrestricted. Field names must be
    identifiers (as ``make_dataclass`` already requires), process-wide."""
    import dataclasses
    import keyword

    original = getattr(dataclasses, "_get_field", None)
    if original is None or getattr(original, "_restricted", False):
        return

    def get_field(cls: Any, name: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise RestrictedError(f"restricted policy: dataclass field name {name!r} is not an identifier")
        return original(cls, name, *args, **kwargs)

    get_field._restricted = True  # type: ignore[attr-defined]
    dataclasses._get_field = get_field  # type: ignore[attr-defined]


def _copy_state_guard() -> None:
    """``copy.copy``/``deepcopy`` set the state a ``__reduce__`` returns on the object its callable
    returns: a setattr of any name on any object (``typing.ForwardRef._evaluate`` replaced by a
    restricted function that ``typing`` then hands a module's namespace). State is set only on a
    new instance, never on a class, module or function, and never ``__class__``/``__dict__``;
    process-wide (a class made with ``type()`` can define ``__reduce__``)."""
    import copy

    original = getattr(copy, "_reconstruct", None)
    if original is None or getattr(original, "_restricted", False):
        return
    shared = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)

    def reconstruct(x: Any, memo: Any, func: Any, args: Any, state: Any = None, *rest: Any, **kwargs: Any) -> Any:
        if state is None:
            return original(x, memo, func, args, state, *rest, **kwargs)
        parts = state if isinstance(state, tuple) and len(state) == 2 else (state,)
        for part in parts:
            if isinstance(part, dict) and ("__class__" in part or "__dict__" in part):
                raise RestrictedError("restricted policy: copy cannot set __class__ or __dict__")

        def made(*values: Any) -> Any:
            made_ = func(*values)
            if isinstance(made_, shared):
                raise RestrictedError("restricted policy: copy sets state only on a new instance")
            return made_

        return original(x, memo, made, args, state, *rest, **kwargs)

    reconstruct._restricted = True  # type: ignore[attr-defined]
    copy._reconstruct = reconstruct  # type: ignore[attr-defined]


def _global_enum(cls: Any, *args: Any, **kwargs: Any) -> Any:
    """``enum.global_enum`` writes an enum's members into ``sys.modules[cls.__module__]``'s namespace,
    and ``__module__`` can be any name (``Enum('E', {'_eval_type': …}, module='typing')`` replaced a
    ``typing`` function with a restricted callable ``typing`` then handed a module's namespace).
    Only the evaluator's own module, and no member named with ``_``."""
    import enum

    if getattr(cls, "__module__", None) != _POLICY.own:
        raise RestrictedError("restricted policy: enum.global_enum exports only into the evaluator's own module")
    if any(name.startswith("_") for name in cls.__members__):
        raise RestrictedError("restricted policy: enum.global_enum cannot export a name starting with '_'")
    return enum.global_enum(cls, *args, **kwargs)


def _itemgetter(*items: Any) -> Callable[[Any], Any]:
    if len(items) == 1:
        return lambda obj: _getitem(obj, items[0])
    return lambda obj: tuple(_getitem(obj, item) for item in items)


def runtime_modules(site_dirs: Iterable[str]) -> set[str]:
    """The top-level importable names of a runtime's package folders (its pins and their dependencies)."""
    import os

    names: set[str] = set()
    for folder in site_dirs:
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        for entry in entries:
            if entry.endswith((".dist-info", ".egg-info", ".pth")) or entry in ("__pycache__", "bin"):
                continue
            stem = entry.split(".")[0]
            if stem.isidentifier():
                names.add(stem)
    return names


def make_globals(module_name: str, packages: Iterable[str] = ()) -> dict[str, Any]:
    """Globals for a restricted module named ``module_name`` whose runtime holds ``packages``
    (top-level module names, importable besides :data:`STDLIB_ALLOWLIST`). Sets the policy of
    this process: one worker runs one evaluator."""
    global _POLICY
    _POLICY = _Policy(packages, module_name)
    _REPLACEMENTS.clear()
    _REPLACEMENTS.update(
        {
            "operator": {"attrgetter": _attrgetter, "methodcaller": _methodcaller, "itemgetter": _itemgetter},
            "enum": {"global_enum": _global_enum},
            "string": {"Formatter": _FORMATTER},
            "functools": {"update_wrapper": _update_wrapper, "wraps": _wraps},
        }
    )
    _forward_ref_guard()
    _dataclass_field_guard()
    _copy_state_guard()
    return {
        "__builtins__": _builtins(),
        "__name__": module_name,
        "__metaclass__": type,
        "_getattr_": guarded_getattr,
        "_getitem_": _getitem,
        "_write_": _write,
        "_getiter_": _guarded_iter,
        "_iter_unpack_sequence_": _iter_unpack,
        "_unpack_sequence_": _unpack,
        "_inplacevar_": _inplacevar,
        "_inplace_attr_": _inplace_attr,
        "_inplace_item_": _inplace_item,
        "_apply_": _apply,
        "_print_": _Print,
    }


def _iter_unpack(it: Any, spec: Any, getiter: Any) -> Any:
    from RestrictedPython.Guards import guarded_iter_unpack_sequence

    return guarded_iter_unpack_sequence(it, spec, getiter)


def _unpack(it: Any, spec: Any, getiter: Any) -> Any:
    from RestrictedPython.Guards import guarded_unpack_sequence

    return guarded_unpack_sequence(it, spec, getiter)
