"""The restricted policy of one evaluator and its value guard: the one check every value crossing from
code the user did not write to code the user wrote passes.

:data:`POLICY` is this process's policy (one worker runs one evaluator; :func:`make_globals` resets it).
:meth:`Policy.value` is the guard: it refuses a module off the allowlist (and hands an allowlisted
standard module out as its *view*), a frame, code object or traceback, the dangerous builtins, a function
of ``os``/``sys``/…, a module's namespace and any dict holding ``__builtins__``. :meth:`Policy.result` is
the same guard for what a call, an ``await``, a ``with`` or a decorator hands back: containers (dict,
list, tuple, set, frozenset) are walked to their last item, so a namespace inside a returned dict is
refused where it is returned, not only where it is taken out.
"""

from __future__ import annotations

import builtins
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any

from .names import (
    DANGEROUS_BUILTINS,
    FORBIDDEN_ATTRS,
    FORBIDDEN_CLASS_MODULES,
    FORBIDDEN_CLASS_NAMES,
    FORBIDDEN_FUNCTION_MODULES,
    FORBIDDEN_TYPES,
    MODULE_DENY,
    ONLY,
    STDLIB_ALLOWLIST,
    RestrictedError,
)

# Values that lead nowhere: returned as they are, without a look.
SCALARS: frozenset[type] = frozenset({int, float, str, bytes, bool, type(None), complex})
# The containers a result is walked through (exact types: a subclass's items are still guarded when taken out).
WALKED: frozenset[type] = frozenset({dict, list, tuple, set, frozenset})

# Functions that replace a standard module's own in its view: module -> name -> replacement (set by make_globals).
REPLACEMENTS: dict[str, dict[str, Any]] = {}


class Policy:
    """The allowlist of one evaluator (the vetted stdlib + its runtime's top-level modules)."""

    def __init__(self, extra: Iterable[str] = (), own: str = "evaluator") -> None:
        self.reset(extra, own)

    def reset(self, extra: Iterable[str], own: str) -> None:
        """The policy of a new evaluator: ``extra`` top-level modules importable, ``own`` its module name."""
        self.extra = frozenset(extra)
        self.own = own
        self.views: dict[str, types.ModuleType] = {}
        self.real: dict[int, types.ModuleType] = {}  # id(view) -> the module it shows
        self.wrap: Any = None  # the trampoline wrapping a standard function (make_trampolines)

    def module_allowed(self, name: str) -> bool:
        return name in STDLIB_ALLOWLIST or name.partition(".")[0] in self.extra

    def is_stdlib(self, name: str) -> bool:
        return name in STDLIB_ALLOWLIST and name.partition(".")[0] not in self.extra

    def attr_allowed(self, module: str, name: str) -> bool:
        only = ONLY.get(module)
        if only is not None:
            return name in only
        return name not in MODULE_DENY or not self.is_stdlib(module)

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
        for key, value in REPLACEMENTS.get(name, {}).items():
            setattr(view, key, value)
        view.__dict__["__name__"] = name
        return view

    def value(self, value: Any) -> Any:
        """``value`` if restricted code may hold it (a module as its view); RestrictedError if not.

        The one guard of every path that hands restricted code a value: attribute and item access,
        iteration and unpacking, the results of the allowlisted modules' functions and of the
        containers' methods, type-hint resolution. Refused: a module off the allowlist, a frame, a
        code object, a traceback, ``open``/``eval``/``exec``/``compile``/``__import__``/the real
        ``getattr``…, a function of ``os``/``sys``/``subprocess``/… (:data:`FORBIDDEN_FUNCTION_MODULES`),
        a module's namespace dict and any dict holding a ``__builtins__`` (a globals dict), a class of such a
        module (``subprocess.Popen``, ``io.FileIO``)."""
        kind = type(value)
        if kind is types.FunctionType or kind is types.BuiltinFunctionType:
            if id(value) in DANGEROUS_BUILTINS:
                raise RestrictedError(f"restricted policy: the builtin {value.__name__}() is not reachable")
            module = getattr(value, "__module__", None)
            if module in FORBIDDEN_FUNCTION_MODULES:
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
        if isinstance(value, FORBIDDEN_TYPES):
            raise RestrictedError(f"restricted policy: {type(value).__name__} objects are not reachable")
        if isinstance(value, type):  # a class of a refused module makes what the module's functions would
            module = type.__dict__["__module__"].__get__(value)
            if module in FORBIDDEN_CLASS_MODULES or (
                module in FORBIDDEN_FUNCTION_MODULES and value.__name__ in FORBIDDEN_CLASS_NAMES
            ):
                raise RestrictedError(f"restricted policy: the class {module}.{value.__name__} is not reachable")
        return value

    def exported(self, module: str, value: Any) -> Any:
        """``value`` as a standard module's view hands it out: guarded, and a function's results
        guarded too (a call is one more way to reach a value)."""
        value = self.value(value)
        if type(value) is types.FunctionType and not value.__dict__:  # typing.NamedTuple (has
            return guarded_function(value)  # __mro_entries__) must stay itself: class bases name it
        if type(value) is types.BuiltinFunctionType or type(value) is types.MethodType:  # random.choice…
            return GuardedBuiltin(value)
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

    def result(self, value: Any) -> Any:
        """:meth:`value` of ``value`` and, for a container, of everything in it (keys included), to the
        last nested item: what a call, ``await``, ``with`` or decorator hands to user code. Linear in
        the result's size, like the call that made it."""
        kind = type(value)
        if kind in SCALARS:
            return value
        value = self.value(value)
        if kind not in WALKED:
            return value
        seen: set[int] = set()
        stack: list[Any] = [value]
        while stack:
            item = stack.pop()
            if id(item) in seen:
                continue
            seen.add(id(item))
            for part in [*item.keys(), *item.values()] if type(item) is dict else item:
                part_kind = type(part)
                if part_kind in SCALARS:
                    continue
                self.value(part)
                if part_kind in WALKED:
                    stack.append(part)
        return value


POLICY = Policy()

_TRAMPOLINE_SOURCE = """
def _call_(fn, /, *args, **kwargs):
    result = fn(*args, **kwargs)
    if type(result) in SCALARS:
        return result
    return after_call(fn, result)

def _decorator_(decorator, /):
    def apply(target, /):
        return after_call(decorator, decorator(target))
    return apply

def wrap(fn, guard, /):
    def call(*args, **kwargs):
        return guard(fn(*args, **kwargs))
    return call
"""


def make_trampolines(module_name: str, safe_builtins: dict[str, Any], after_call: Any) -> dict[str, Any]:
    """The functions that stand between user code and a call — ``_call_``, ``_decorator_`` and the
    wrapper of a standard module's function — compiled in a namespace named like the evaluator's module
    ``module_name`` and holding only the policy's builtins: the standard library's functions that name
    their caller's module from its frame (``collections.namedtuple``, the ``enum`` functional API,
    ``typing.TypeVar``) still see the evaluator's."""
    namespace: dict[str, Any] = {
        "__name__": module_name,
        "__builtins__": safe_builtins,
        "after_call": after_call,
        "SCALARS": SCALARS,
    }
    exec(compile(_TRAMPOLINE_SOURCE, "<restricted policy>", "exec"), namespace)  # noqa: S102 - our own source
    made = {name: namespace[name] for name in ("_call_", "_decorator_", "wrap")}
    POLICY.wrap = made["wrap"]
    return made


def guarded_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A Python function of a standard module whose results pass the value guard (binds like it)."""
    import functools

    wrap = POLICY.wrap
    if wrap is not None:
        call = wrap(fn, POLICY.value)
    else:

        def call(*args: Any, **kwargs: Any) -> Any:
            return POLICY.value(fn(*args, **kwargs))

    return functools.update_wrapper(call, fn)  # the real one: our own wrapper, the module's function


class GuardedBuiltin:
    """A builtin function (or a container's bound method) whose results pass the value guard; like a
    builtin, it does not bind as a method."""

    __slots__ = ("_fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self._fn = fn

    @property
    def __name__(self) -> str:
        return str(getattr(self._fn, "__name__", "builtin"))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return POLICY.value(self._fn(*args, **kwargs))

    def __repr__(self) -> str:
        return repr(self._fn)
