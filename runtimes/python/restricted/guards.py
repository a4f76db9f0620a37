"""The guards the compiled code calls: attribute, item and iteration access (RestrictedPython's hooks,
completed), and the crossings :mod:`.compiler` adds — a call's result (``_call_``, made per evaluator by
:func:`trampolines`), a function's parameters (``_enter_``), ``await``/``yield`` (``_result_``), ``with
… as`` (``_with_``), ``async for`` (``_aiter_``) and decorators (``_decorator_``). Each hands user code
a value only through :data:`.policy.POLICY`'s guard.
"""

from __future__ import annotations

import operator
import string
import types
from collections.abc import Callable, Iterator
from typing import Any

from .names import CONTAINER_TYPES, DUNDER_READS, FORBIDDEN_ATTRS, ITEM_METHODS, RestrictedError
from .policy import POLICY, SCALARS, GuardedBuiltin, make_trampolines

_POLICY = POLICY


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
    if name == "format":
        # a ``super`` object reaches ``str.format`` as the string itself does (``super(S, s).format``)
        target = obj.__self__ if type(obj) is super else obj
        if isinstance(target, str):
            formatter = _FORMATTER()
            return lambda *args, **kwargs: formatter.vformat(target, args, kwargs)
        if isinstance(target, type) and issubclass(target, str):
            formatter = _FORMATTER()
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
    if name in ITEM_METHODS:
        kind = type(value)
        if (kind is types.BuiltinMethodType and isinstance(getattr(value, "__self__", None), CONTAINER_TYPES)) or (
            kind is types.MethodDescriptorType and issubclass(value.__objclass__, CONTAINER_TYPES)
        ):
            return GuardedBuiltin(value)  # d.get / d.pop / d.setdefault / l.pop / dict.get …: items, guarded
    return value


def _safe_formatter(getattr_: Callable[..., Any]) -> type:
    """``string.Formatter``'s interface whose ``{0.attr}`` fields go through the attribute guard.

    Not a subclass of ``string.Formatter``: a subclass leaves the stdlib ``get_field`` (a ``getattr``
    of any name the template chose) one ``super(…)`` or ``type.mro(…)`` away. The formatting itself is
    the stdlib's, run by a private formatter that asks this one for every field."""

    class _Fields(string.Formatter):
        def __init__(self, outer: Any) -> None:
            self.outer = outer

        def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
            return self.outer.get_field(field_name, args, kwargs)

        def get_value(self, key: Any, args: Any, kwargs: Any) -> Any:
            return self.outer.get_value(key, args, kwargs)

        def format_field(self, value: Any, format_spec: str) -> Any:
            return self.outer.format_field(value, format_spec)

        def convert_field(self, value: Any, conversion: Any) -> Any:
            return self.outer.convert_field(value, conversion)

    plain = string.Formatter()

    class SafeFormatter:
        """``str.format`` whose ``{0.attr}`` fields go through the attribute guard."""

        def format(self, format_string: str, /, *args: Any, **kwargs: Any) -> str:
            return self.vformat(format_string, args, kwargs)

        def vformat(self, format_string: str, args: Any, kwargs: Any) -> str:
            return _Fields(self).vformat(format_string, args, kwargs)

        def parse(self, format_string: str) -> Any:
            return plain.parse(format_string)

        def get_value(self, key: Any, args: Any, kwargs: Any) -> Any:
            return _POLICY.value(plain.get_value(key, args, kwargs))

        def check_unused_args(self, used_args: Any, args: Any, kwargs: Any) -> None:
            return None

        def format_field(self, value: Any, format_spec: str) -> Any:
            return format(value, format_spec)

        def convert_field(self, value: Any, conversion: Any) -> Any:
            return plain.convert_field(value, conversion)

        def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
            import _string

            first, rest = _string.formatter_field_name_split(field_name)
            obj = self.get_value(first, args, kwargs)
            for is_attr, key in rest:
                obj = getattr_(obj, key) if is_attr else _getitem(obj, key)
            return obj, first

    return SafeFormatter


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


def _iter_unpack(it: Any, spec: Any, getiter: Any) -> Any:
    from RestrictedPython.Guards import guarded_iter_unpack_sequence

    return guarded_iter_unpack_sequence(it, spec, getiter)


def _unpack(it: Any, spec: Any, getiter: Any) -> Any:
    from RestrictedPython.Guards import guarded_unpack_sequence

    return guarded_unpack_sequence(it, spec, getiter)


# -- the crossings ---------------------------------------------------------------------------


def enter(*values: Any, **named: Any) -> None:
    """``_enter_``: a function's parameters, first thing in its body — whoever called it (C code's
    callbacks: ``map``, ``filter``, ``sorted(key=)``, ``functools.reduce``, a dunder method a builtin
    calls) hands it only what the guard lets through."""
    for value in (*values, *named.values()):
        kind = type(value)
        if kind not in SCALARS and kind is not types.TracebackType:  # __exit__'s: it leads on only by
            _POLICY.value(value)  # tb_frame/tb_next, refused by name like a frame's attributes


def result(value: Any) -> Any:
    """``_result_``: what ``await`` and ``yield`` hand back, containers walked."""
    return _POLICY.result(value)


def after_call(fn: Any, value: Any) -> Any:
    """What the call ``fn(…)`` returned, as user code may hold it: a function the user's own module
    compiled returns only guarded values (checked shallowly); anything else's result is walked."""
    if type(value) in SCALARS:
        return value
    target = fn.__func__ if type(fn) is types.MethodType else fn
    if type(target) is types.FunctionType and target.__globals__.get("_call_") is _TRAMPOLINES.get("_call_"):
        return _POLICY.value(value)
    return _POLICY.result(value)


def trampolines(module_name: str, safe_builtins: dict[str, Any]) -> dict[str, Any]:
    """``_call_`` and ``_decorator_`` for the evaluator module ``module_name`` (:func:`.policy.make_trampolines`)."""
    made = make_trampolines(module_name, safe_builtins, after_call)
    _TRAMPOLINES.clear()
    _TRAMPOLINES.update(made)
    return made


_TRAMPOLINES: dict[str, Any] = {}


class GuardedContext:
    """``_with_``: a context manager whose ``__enter__``/``__aenter__`` result passes the guard."""

    __slots__ = ("_cm",)

    def __init__(self, cm: Any) -> None:
        self._cm = cm

    def _method(self, name: str) -> Any:
        method = getattr(type(self._cm), name, None)
        if method is None:
            raise TypeError(f"{type(self._cm).__name__!r} object does not support the context manager protocol")
        return method

    def __enter__(self) -> Any:
        return _POLICY.result(self._method("__enter__")(self._cm))

    def __exit__(self, *exc: Any) -> Any:
        return self._method("__exit__")(self._cm, *exc)

    async def __aenter__(self) -> Any:
        return _POLICY.result(await self._method("__aenter__")(self._cm))

    def __aexit__(self, *exc: Any) -> Any:
        return self._method("__aexit__")(self._cm, *exc)


class GuardedAsyncIterator:
    """``_aiter_``: ``async for`` whose items pass the guard, as ``for``'s do."""

    __slots__ = ("_it",)

    def __init__(self, obj: Any) -> None:
        self._it = type(obj).__aiter__(obj)

    def __aiter__(self) -> GuardedAsyncIterator:
        return self

    async def __anext__(self) -> Any:
        return _guard_item(await type(self._it).__anext__(self._it))
