"""The evaluator's builtins under the policy: the safe ones as they are, the withheld ones as stand-ins
whose call names the refusal, the guarded ``__import__``/``getattr``/``iter``/``next``/``min``/``max``/
``setattr``/``delattr``, and ``print`` to the captured stdout.
"""

from __future__ import annotations

import builtins
import sys
from typing import Any

from .guards import (
    _guarded_delattr,
    _guarded_hasattr,
    _guarded_iter,
    _guarded_next,
    _guarded_setattr,
    guarded_getattr,
)
from .names import RestrictedError
from .policy import POLICY, GuardedBuiltin

_POLICY = POLICY


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


def safe_builtins() -> dict[str, Any]:
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
        min=GuardedBuiltin(min),
        max=GuardedBuiltin(max),
        setattr=_guarded_setattr,
        delattr=_guarded_delattr,
        RestrictedError=RestrictedError,
    )
    return safe


class Print:
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
