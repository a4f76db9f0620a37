"""The standard library as the policy ships it: replacements for the functions that would get or set an
attribute by a name the caller chose (``operator.attrgetter``/``methodcaller``/``itemgetter``,
``functools.update_wrapper``/``wraps``, ``enum.global_enum``), and the process-wide guards on what the
standard library would ``eval``/``exec`` or set (``typing.ForwardRef``, ``dataclasses`` field names,
``copy``'s ``__reduce__`` state). Written to the policy's rule: never a getattr/setattr of a name user
code chose, never a ``__dict__`` copied.
"""

from __future__ import annotations

import ast
import builtins
import sys
import types
from collections.abc import Callable
from typing import Any

from .compiler import type_expression_problem
from .guards import _getitem, guarded_getattr
from .names import RestrictedError
from .policy import POLICY

_POLICY = POLICY


def attrgetter(*names: str) -> Callable[[Any], Any]:
    def get(obj: Any, name: str) -> Any:
        for part in name.split("."):
            obj = guarded_getattr(obj, part)
        return obj

    if len(names) == 1:
        return lambda obj: get(obj, names[0])
    return lambda obj: tuple(get(obj, name) for name in names)


def methodcaller(name: str, /, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
    return lambda obj: guarded_getattr(obj, name)(*args, **kwargs)


# The attributes update_wrapper/wraps copy: fixed names, and only a string (or None) is copied. Never
# ``__dict__`` (issue 47: a type()-made class's ``_fields`` copied onto a runtime function redirected what
# that function's module read), never ``__annotations__``/``__type_params__``/``__code__``/``__globals__``.
WRAPPER_COPIED = ("__module__", "__name__", "__qualname__", "__doc__")


def update_wrapper(wrapper: Any, wrapped: Any, *args: Any, **kwargs: Any) -> Any:
    """``functools.update_wrapper`` as the policy ships it: the default ``assigned``/``updated`` only
    (other names make it a getattr/setattr of any name), and of them only :data:`WRAPPER_COPIED`, each
    only when it is a string or None, plus ``__wrapped__`` (what ``inspect.signature`` follows). The
    ``__dict__`` of ``wrapped`` is not merged into ``wrapper``'s."""
    _default_wrapper_names(*args, **kwargs)
    for name in WRAPPER_COPIED:
        try:
            value = getattr(wrapped, name)
        except AttributeError:
            continue
        if value is None or type(value) is str:
            try:
                setattr(wrapper, name, value)
            except (AttributeError, TypeError):
                pass
    try:
        wrapper.__wrapped__ = wrapped
    except (AttributeError, TypeError):
        pass
    return wrapper


def wraps(wrapped: Any, *args: Any, **kwargs: Any) -> Any:
    """``functools.wraps`` with the same rules (see :func:`update_wrapper`)."""
    _default_wrapper_names(*args, **kwargs)
    return lambda wrapper: update_wrapper(wrapper, wrapped)


def _default_wrapper_names(assigned: Any = None, updated: Any = None, **others: Any) -> None:
    import functools

    if others:
        raise TypeError(f"unexpected arguments: {', '.join(others)}")
    if assigned is not None and tuple(assigned) != tuple(functools.WRAPPER_ASSIGNMENTS):
        raise RestrictedError("restricted policy: functools.update_wrapper/wraps copy only the default attributes")
    if updated is not None and tuple(updated) != tuple(functools.WRAPPER_UPDATES):
        raise RestrictedError("restricted policy: functools.update_wrapper/wraps update only the default attributes")


def resolve_type_expression(text: str, globalns: Any, localns: Any) -> Any:
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


def forward_ref_guard() -> None:
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
            resolve_type_expression(arg, globalns, localns),
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


def dataclass_field_guard() -> None:
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


def copy_state_guard() -> None:
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


def global_enum(cls: Any, *args: Any, **kwargs: Any) -> Any:
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


def itemgetter(*items: Any) -> Callable[[Any], Any]:
    if len(items) == 1:
        return lambda obj: _getitem(obj, items[0])
    return lambda obj: tuple(_getitem(obj, item) for item in items)
