"""The restricted policy's process-wide guards, taken off again in a shared test process.

``make_globals`` of the restricted policy guards ``typing.ForwardRef``, ``typing._eval_type``,
``dataclasses._get_field`` and ``copy._reconstruct`` for the whole process, as it does in a sandboxed worker.
In a test process other tests run afterwards (libcst, other policy modules loaded with their own
``RestrictedError``), so every test module that builds the policy's globals restores all of them through
:func:`restored` — one list, so a guard added to the policy is added here once, for every such module.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import typing
from collections.abc import Iterator

__all__ = ["restored"]


@contextlib.contextmanager
def restored() -> Iterator[None]:
    """Put back, on exit, every process-wide function the policy's guards replace."""
    init, evaluate = typing.ForwardRef.__init__, typing.ForwardRef._evaluate  # type: ignore[attr-defined]
    eval_type = typing._eval_type  # type: ignore[attr-defined]
    get_field, reconstruct = dataclasses._get_field, copy._reconstruct  # type: ignore[attr-defined]
    try:
        yield
    finally:
        typing.ForwardRef.__init__ = init  # type: ignore[method-assign]
        typing.ForwardRef._evaluate = evaluate  # type: ignore[attr-defined]
        typing._eval_type = eval_type  # type: ignore[attr-defined]
        dataclasses._get_field, copy._reconstruct = get_field, reconstruct  # type: ignore[attr-defined]
