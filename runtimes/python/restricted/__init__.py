"""The ``restricted`` policy of the Python harness: RestrictedPython with a complete guard set.

Defence in depth *inside* the sandbox, never the boundary (docs/security.md). A package loaded **by
path as one unit** (``spec_from_file_location`` of this ``__init__.py`` with the folder as its search
location: :func:`load`'s recipe, used by the harness in the sandbox and by the host's definition-time
check); needs the standard library and ``RestrictedPython`` (bound read-only at ``vendor_dir``).

The rule (issue 47, the fourth escape in four rounds): **every object that reaches user code passes one
guard** (:meth:`.policy.Policy.value`), on every path by construction, and **code the policy ships never
hands out what user code could not reach**:

* :mod:`.compiler` — RestrictedPython's transformer completed for ordinary code, plus the crossings:
  calls (results walked, containers included), function entry (parameters: so C-level callbacks —
  ``map``, ``filter``, ``sorted(key=)``, ``min``/``max``, ``functools.reduce``, dunder methods — are
  guarded), ``await``, ``yield``, ``with … as``, ``async for``, decorators;
* :mod:`.policy` — the allowlist of one evaluator, the module views, the value guard and its walk;
* :mod:`.guards` — the hooks the compiled code calls (``_getattr_``, ``_getitem_``, ``_getiter_``,
  ``_call_``, ``_enter_``…);
* :mod:`.safe_builtins` — the builtins (withheld ones named in their refusal), the guarded import;
* :mod:`.stdlib` — the standard library as shipped: no getattr/setattr of a caller-chosen name
  (``update_wrapper`` copies four string attributes, never a ``__dict__``), no ``eval`` of a type hint;
* :mod:`.names` — the allowlist and refusal lists, the errors.

What it does not: the runtime's own packages run unrestricted inside (a pinned package may do anything
the sandbox allows; only the built-in ``nemo_evaluator_sdk`` is the policy's own, written to its rule);
operators (``a + b``) of a pinned package's objects return unguarded; CPU, memory and time are the
sandbox's limits.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from . import stdlib
from .compiler import compile_restricted, type_expression_problem
from .guards import (
    _FORMATTER,
    GuardedAsyncIterator,
    GuardedContext,
    _getitem,
    _guarded_iter,
    _inplace_attr,
    _inplace_item,
    _inplacevar,
    _iter_unpack,
    _unpack,
    _write,
    enter,
    guard_value,
    guarded_getattr,
    result,
    trampolines,
)
from .names import DUNDER_READS, FORBIDDEN_ATTRS, STDLIB_ALLOWLIST, PolicySyntaxError, RestrictedError
from .policy import POLICY, REPLACEMENTS
from .safe_builtins import Print, safe_builtins

__all__ = [
    "DUNDER_READS",
    "FORBIDDEN_ATTRS",
    "LOAD_AS",
    "STDLIB_ALLOWLIST",
    "PolicySyntaxError",
    "RestrictedError",
    "compile_restricted",
    "guard_value",
    "guarded_getattr",
    "make_globals",
    "runtime_modules",
    "type_expression_problem",
]

#: The module name the policy is loaded under (its submodules: ``evaluator_host_restricted.<name>``).
LOAD_AS = "evaluator_host_restricted"


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
    POLICY.reset(packages, module_name)
    REPLACEMENTS.clear()
    REPLACEMENTS.update(
        {
            "operator": {
                "attrgetter": stdlib.attrgetter,
                "methodcaller": stdlib.methodcaller,
                "itemgetter": stdlib.itemgetter,
            },
            "enum": {"global_enum": stdlib.global_enum},
            "string": {"Formatter": _FORMATTER},
            "functools": {"update_wrapper": stdlib.update_wrapper, "wraps": stdlib.wraps},
        }
    )
    stdlib.forward_ref_guard()
    stdlib.dataclass_field_guard()
    stdlib.copy_state_guard()
    builtins_ = safe_builtins()
    calls = trampolines(module_name, builtins_)
    return {
        "__builtins__": builtins_,
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
        "_apply_": calls["_call_"],
        "_call_": calls["_call_"],
        "_decorator_": calls["_decorator_"],
        "_enter_": enter,
        "_result_": result,
        "_with_": GuardedContext,
        "_aiter_": GuardedAsyncIterator,
        "_print_": Print,
    }
