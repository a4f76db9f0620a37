"""The package's modules as syntax trees, each parsed once while a test module walks them (the architecture tests
of ``tests/unit`` walk every module of the package in each of their tests: ``test_use_cases.py`` parsed the
~400 modules 13 times, 21 s of CPU a run here).

A tree is shared: callers only read it (``ast.walk``, ``ast.unparse``), never change it. A changed file (its size
or mtime) is parsed again. The trees of the whole package hold ~80 MiB: they are let go when each test file of
``tests/unit`` ends (:func:`forget`, from that folder's ``conftest.py``), so a worker does not keep them for the
rest of its run.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path


@functools.cache
def _parsed(path: Path, _size: int, _mtime_ns: int) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def parsed(path: Path) -> ast.Module:
    """``path``'s syntax tree (read only), parsed once while the file is unchanged."""
    stat = path.stat()
    return _parsed(path, stat.st_size, stat.st_mtime_ns)


def forget() -> None:
    """Let every tree go."""
    _parsed.cache_clear()
