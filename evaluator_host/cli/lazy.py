"""A subcommand's handler named by ``"module:function"``, imported only when that subcommand runs.

Contract: ``set_defaults(func=lazy("evaluator_host.cli.operate.images:run_images"))`` costs nothing when the parser
is built; calling it (``args.func(args)``, as :func:`evaluator_host.cli.main.main` dispatches) imports the
module (with Python's cyclic garbage collector paused: :func:`collector_paused`) then calls the function with
``args``. This is what keeps ``evaluator-host --help`` and every
subcommand's ``--help`` from importing the service, the sandbox, the store or the SDKs a handler needs
(``tests/cli/test_startup.py``).
"""

from __future__ import annotations

import argparse
import gc
import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["Lazy", "collector_paused", "lazy"]


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off inside, back on after (if it was on). For imports and start-ups:
    they make hundreds of thousands of objects that live on (modules, classes, pydantic and SQLAlchemy
    models) and next to no garbage, and the collections their allocations trigger were ~15% of the CPU a
    command's or the service's start spent (issue 49)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass(frozen=True)
class Lazy:
    """A handler by name: ``module`` is imported and its ``function`` called with the parsed arguments."""

    module: str
    function: str

    def __call__(self, args: argparse.Namespace) -> int:
        with collector_paused():
            handler = getattr(importlib.import_module(self.module), self.function)
        code: int = handler(args)
        return code


def lazy(target: str) -> Lazy:
    """The handler ``"package.module:function"`` (see the module's contract)."""
    module, sep, function = target.partition(":")
    if not sep or not module or not function:
        raise ValueError(f"a handler is 'module:function', not {target!r}")
    return Lazy(module, function)
