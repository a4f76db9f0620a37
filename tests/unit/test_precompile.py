"""``make test``'s bytecode step (``tests/support/precompile.py``): what it writes is what pytest reads, and an
edited file is never served from it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from _pytest.assertion.rewrite import _read_pyc

from tests.support import REPO
from tests.support.precompile import _rewrite, cached, rewritten


def test_a_precompiled_test_module_is_pytests_rewritten_code_read_from_its_own_cache(tmp_path: Path) -> None:
    source = tmp_path / "test_sample.py"
    source.write_text("def check(x):\n    assert x == 2\n")
    assert _rewrite([source]) == 1
    code = _read_pyc(source, cached(source))
    assert code is not None
    space: dict[str, object] = {}
    exec(code, space)
    with pytest.raises(AssertionError, match=r"assert 1 == 2"):  # pytest's introspection: the code was rewritten
        space["check"](1)  # type: ignore[operator]
    assert _rewrite([source]) == 0  # written once


def test_an_edited_module_is_not_read_from_the_precompiled_cache_and_is_written_again(tmp_path: Path) -> None:
    source = tmp_path / "test_sample.py"
    source.write_text("X = 1\n")
    _rewrite([source])
    source.write_text("X = 2\n")  # same size: only the hash tells
    assert _read_pyc(source, cached(source)) is None
    assert _rewrite([source]) == 1  # and the next make test writes it again
    assert _read_pyc(source, cached(source)) is not None


def test_the_rewritten_files_are_the_test_modules_the_conftests_and_the_pytest_plugins() -> None:
    files = set(rewritten())
    assert Path(__file__).resolve() in files
    assert REPO / "tests" / "conftest.py" in files
    schemathesis = importlib.util.find_spec("schemathesis")
    assert schemathesis is not None and Path(str(schemathesis.origin)) in files
    assert not any(p.is_relative_to(REPO / "tests" / "support") for p in files)  # compiled plainly, not rewritten
