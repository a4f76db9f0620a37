"""The package store's bytecode: compiled once per entry, on every core, never run (store.compile_entries)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from evaluator_host.builds import store


def _entry(root: Path, name: str, files: dict[str, str]) -> Path:
    entry = root / name
    for rel, text in files.items():
        (entry / rel).parent.mkdir(parents=True, exist_ok=True)
        (entry / rel).write_text(text)
    return entry


def _pyc(path: Path) -> Path:
    return Path(importlib.util.cache_from_source(str(path)))


def test_every_module_of_every_entry_is_compiled_but_tests_and_none_is_run(tmp_path: Path) -> None:
    """Modules in many folders and entries get their ``.pyc``; ``test``/``tests`` folders do not; a file that
    does not compile leaves the others compiled; nothing of the code runs (a module that would write a file
    writes none); the entries are marked, so a second call compiles nothing."""
    ran = tmp_path / "ran"
    # a store whose own path has a "test" folder: only folders inside an entry are left out
    root = tmp_path / "test" / "archive-v0"
    many = {f"pkg/sub{i}/mod{j}.py": f"X = {i * j}\n" for i in range(4) for j in range(30)}
    one = _entry(root, "one", {**many, "pkg/__init__.py": f"open({str(ran)!r}, 'w').write('ran')\n"})
    two = _entry(
        root,
        "two",
        {"lib/a.py": "def f():\n    return 1\n", "lib/broken.py": "def (:\n", "lib/tests/test_a.py": "X = 1\n"},
    )
    store.compile_entries([one, two], sys.executable, timeout_s=120)
    for rel in [*many, "pkg/__init__.py"]:
        assert _pyc(one / rel).is_file(), rel
    assert _pyc(two / "lib/a.py").is_file()
    assert not _pyc(two / "lib/broken.py").exists()
    assert not (two / "lib/tests/__pycache__").exists()
    assert not ran.exists()
    # the bytecode is the module's: importing it from the .pyc gives the source's value
    check = f"import sys; sys.path.insert(0, {str(one)!r}); import pkg.sub3.mod29 as m; print(m.X)"
    assert subprocess.run([sys.executable, "-B", "-c", check], capture_output=True, text=True).stdout == "87\n"
    assert ran.exists()  # (that import ran pkg/__init__.py: the compile had not)
    ran.unlink()
    before = {p: p.stat().st_mtime_ns for p in one.rglob("*.pyc")}
    store.compile_entries([one, two], sys.executable, timeout_s=120)
    assert {p: p.stat().st_mtime_ns for p in one.rglob("*.pyc")} == before


def test_the_compile_follows_no_link_and_writes_into_no_linked_cache(tmp_path: Path) -> None:
    """Root compiles here: a ``.py`` that is a link (to a file outside the entry) is not read, and a folder
    whose ``__pycache__`` is a link to a folder outside gets nothing written through it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text("TOKEN = 'x'\n")
    entry = _entry(tmp_path / "archive-v0", "e", {"a/ok.py": "X = 1\n", "b/mod.py": "Y = 2\n"})
    (entry / "a" / "leak.py").symlink_to(outside / "secret.py")
    (entry / "b" / "__pycache__").symlink_to(outside, target_is_directory=True)
    (entry / "c").symlink_to(outside, target_is_directory=True)
    store.compile_entries([entry], sys.executable, timeout_s=120)
    assert _pyc(entry / "a/ok.py").is_file()
    assert sorted(p.name for p in (entry / "a" / "__pycache__").iterdir()) == [_pyc(entry / "a/ok.py").name]
    assert sorted(p.name for p in outside.iterdir()) == ["secret.py"]


def test_a_compile_past_its_timeout_is_killed_with_its_helpers(tmp_path: Path) -> None:
    """The compile and the processes it forked end at the timeout (one group, killed); the entry stays unmarked."""
    entry = _entry(tmp_path / "archive-v0", "big", {f"m{i}.py": "X = [" + "1, " * 200_000 + "]\n" for i in range(40)})
    with pytest.raises(subprocess.TimeoutExpired):
        store.compile_entries([entry], sys.executable, timeout_s=0.3)
    assert not (entry / ".evaluator-host-compiled").exists()
    leftover = subprocess.run(["pgrep", "-f", str(entry)], capture_output=True, text=True).stdout.split()
    assert leftover == []
