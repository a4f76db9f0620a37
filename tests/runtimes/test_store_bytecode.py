"""The package store's bytecode: compiled once per entry, on every core, never run (store.compile_entries);
a new runtime's, linked after it is in place (sandbox/process/bytecode.Bytecode)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evaluator_host.builds import store
from evaluator_host.sandbox.process.bytecode import TODO, Bytecode
from evaluator_host.sandbox.process.runtimes import RuntimeBuilder
from evaluator_host.settings import Settings
from tests.support.wait import wait_until


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


def _runtime(tmp_path: Path, entry: Path, rels: list[str], folder: Path | None = None) -> tuple[Path, store.Sources]:
    """A runtime's packages folder (in ``folder``, else ``tmp_path/runtimes/r``) made of hard links to ``entry``'s
    files, as link_tree makes it."""
    site = (folder or tmp_path / "runtimes" / "r") / "site"
    sources: store.Sources = {}
    for rel in rels:
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        os.link(entry / rel, site / rel)
        sources.setdefault(rel.rpartition("/")[0], set()).add(str((entry / rel).parent))
    return site, sources


def test_a_new_runtimes_bytecode_is_compiled_after_its_first_result_and_linked_whole(tmp_path: Path) -> None:
    """Issue 55 §4: nothing is compiled before the runtime is in place (link_compiled links only what the store
    has: nothing yet), so its first import compiles in memory; nor before its first result (the compile waits
    for ``answered``: the first import has the cores to itself); the background compile then links every
    module's ``.pyc`` into the runtime, the store's own file (the same inode), which imports the source's value."""
    package_store = tmp_path / "package-store"
    rels = [f"pkg/sub{i}/mod{j}.py" for i in range(3) for j in range(20)] + ["pkg/__init__.py"]
    entry = _entry(package_store / store.ARCHIVE, "e", {rel: f"X = {n}\n" for n, rel in enumerate(rels)})
    site, sources = _runtime(tmp_path, entry, rels)
    bytecode = Bytecode(Settings(data_dir=tmp_path / "data", python_executable=sys.executable))
    bytecode.link_compiled(site, sources, package_store)
    assert list(site.rglob("*.pyc")) == []
    check = f"import sys; sys.path.insert(0, {str(site)!r}); import pkg.sub2.mod19 as m; print(m.X)"
    first = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", check], capture_output=True, text=True)
    assert first.stdout == f"{rels.index('pkg/sub2/mod19.py')}\n", first.stderr
    bytecode.compile_later(site, {entry}, sources, package_store)
    assert not bytecode.wait(timeout_s=0.5)  # no result yet: the compile waits (for up to FIRST_RESULT_WAIT_S)
    assert store.uncompiled({entry}) == [entry] and list(site.rglob("*.pyc")) == []
    bytecode.answered(site.parent)  # what the pool says through the builder once a worker answered its first batch
    assert bytecode.wait(timeout_s=120)
    for rel in rels:
        assert _pyc(site / rel).stat().st_ino == _pyc(entry / rel).stat().st_ino, rel
    again = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", check], capture_output=True, text=True)
    assert again.stdout == first.stdout, again.stderr


def test_a_set_of_compiled_entries_gets_its_bytecode_before_its_first_worker_and_no_compile(tmp_path: Path) -> None:
    """The warm path: entries a set built before compiled are linked before the runtime is in place
    (link_compiled), and no background compile starts for them."""
    package_store = tmp_path / "package-store"
    entry = _entry(package_store / store.ARCHIVE, "e", {"lib/a.py": "A = 1\n", "lib/b.py": "B = 2\n"})
    store.compile_entries([entry], sys.executable, timeout_s=120)
    site, sources = _runtime(tmp_path, entry, ["lib/a.py", "lib/b.py"])
    bytecode = Bytecode(Settings(data_dir=tmp_path / "data", python_executable=sys.executable))
    bytecode.link_compiled(site, sources, package_store)
    assert _pyc(site / "lib/a.py").is_file() and _pyc(site / "lib/b.py").is_file()
    bytecode.compile_later(site, {entry}, sources, package_store)
    assert bytecode.wait(timeout_s=0)  # (nothing was left to compile: no thread started)


def test_a_runtime_removed_before_its_bytecode_is_linked_is_not_made_again(tmp_path: Path) -> None:
    """A runtime renamed away and removed while its compile ran gets nothing: the store's entry is compiled and
    marked, but no folder of the removed runtime is made again (only a ``__pycache__`` in a folder that exists)."""
    package_store = tmp_path / "package-store"
    entry = _entry(package_store / store.ARCHIVE, "e", {"pkg/mod.py": "X = 1\n", "pkg/deep/more.py": "Y = 2\n"})
    site, sources = _runtime(tmp_path, entry, ["pkg/mod.py", "pkg/deep/more.py"])
    shutil.rmtree(site.parent)
    bytecode = Bytecode(Settings(data_dir=tmp_path / "data", python_executable=sys.executable))
    bytecode.compile_later(site, {entry}, sources, package_store)
    bytecode.answered(site.parent)
    assert bytecode.wait(timeout_s=120)
    assert _pyc(entry / "pkg/mod.py").is_file() and (entry / ".evaluator-host-compiled").exists()
    assert not site.parent.exists()


def test_two_new_runtimes_sharing_an_entry_get_its_one_compiled_bytecode(tmp_path: Path) -> None:
    """A second runtime built while the first's compile of a shared entry is under way waits for it rather than
    compiling it again: both runtimes link the same ``.pyc`` files as the store (the same inodes)."""
    package_store = tmp_path / "package-store"
    rels = [f"pkg/m{i}.py" for i in range(200)]
    entry = _entry(package_store / store.ARCHIVE, "e", {rel: f"X = {i}\n" for i, rel in enumerate(rels)})
    bytecode = Bytecode(Settings(data_dir=tmp_path / "data", python_executable=sys.executable))
    sites = []
    for name in ("r1", "r2"):
        site, sources = _runtime(tmp_path / name, entry, rels)
        bytecode.compile_later(site, {entry}, sources, package_store)
        sites.append(site)
    for site in sites:
        bytecode.answered(site.parent)
    assert bytecode.wait(timeout_s=120)
    for rel in rels:
        inodes = {_pyc(root / rel).stat().st_ino for root in (entry, *sites)}
        assert len(inodes) == 1, rel


def test_a_runtime_no_worker_answers_is_compiled_when_its_wait_for_a_first_result_ends(tmp_path: Path) -> None:
    """A runtime built ahead (``runtimes build``) or whose first worker never answers still gets its bytecode:
    the compile waits for a first result ``first_result_wait_s`` at most (FIRST_RESULT_WAIT_S, 60 s)."""
    package_store = tmp_path / "package-store"
    entry = _entry(package_store / store.ARCHIVE, "e", {"pkg/mod.py": "X = 1\n"})
    site, sources = _runtime(tmp_path, entry, ["pkg/mod.py"])
    bytecode = Bytecode(Settings(data_dir=tmp_path / "data", python_executable=sys.executable), first_result_wait_s=0.2)
    bytecode.compile_later(site, {entry}, sources, package_store)
    assert bytecode.wait(timeout_s=120)  # no result at all
    assert _pyc(site / "pkg/mod.py").stat().st_ino == _pyc(entry / "pkg/mod.py").stat().st_ino


def test_a_stopping_service_kills_its_compile_under_way_and_marks_nothing(tmp_path: Path) -> None:
    """No compile outlives its service: ``close`` (the backend's, at shutdown) kills the compile's session —
    its forked helpers too — and the entry stays unmarked, so a later service compiles it whole."""
    package_store = tmp_path / "package-store"
    body = "".join(f"def f{i}(x):\n    return [x * k for k in range({i})]\n" for i in range(400))
    rels = [f"pkg/m{i}.py" for i in range(600)]  # enough to compile for a while, even on a fast machine
    entry = _entry(package_store / store.ARCHIVE, "e", {rel: body for rel in rels})
    site, sources = _runtime(tmp_path, entry, rels)
    bytecode = Bytecode(Settings(data_dir=tmp_path / "data", python_executable=sys.executable))
    bytecode.compile_later(site, {entry}, sources, package_store)
    bytecode.answered(site.parent)
    leader = _compile_started(bytecode)
    bytecode.close()
    assert bytecode.wait(timeout_s=60)
    assert leader.returncode is not None and leader.returncode < 0  # killed, not finished
    wait_until(lambda: _session_gone(leader.pid), 30, 0.1, what="none of the compile's session left")
    assert store.uncompiled({entry}) == [entry]
    assert (site.parent / TODO).is_file()  # what is left, for the runtime's next first batch


def test_what_a_stopped_service_left_is_compiled_and_linked_at_the_runtimes_next_first_batch(tmp_path: Path) -> None:
    """A restart soon after a build (a deploy) loses no bytecode: the next service's first batch on the runtime
    (``answered``) compiles what the stopped one left (TODO) and links it; the file goes."""
    package_store = tmp_path / "package-store"
    rels = [f"pkg/m{i}.py" for i in range(600)]
    body = "".join(f"def f{i}(x):\n    return [x * k for k in range({i})]\n" for i in range(400))
    entry = _entry(package_store / store.ARCHIVE, "e", {rel: body for rel in rels})
    site, sources = _runtime(tmp_path, entry, rels)
    settings = Settings(data_dir=tmp_path / "data", python_executable=sys.executable)
    stopped = Bytecode(settings)
    stopped.compile_later(site, {entry}, sources, package_store)
    stopped.answered(site.parent)
    _compile_started(stopped)
    stopped.close()
    assert stopped.wait(timeout_s=60) and (site.parent / TODO).is_file()
    following = Bytecode(settings)  # the next service
    following.answered(site.parent)
    assert following.wait(timeout_s=300)
    assert store.uncompiled({entry}) == [] and not (site.parent / TODO).exists()
    for rel in rels[:5] + rels[-5:]:
        assert _pyc(site / rel).stat().st_ino == _pyc(entry / rel).stat().st_ino, rel


def test_the_process_builder_starts_its_runtimes_compile_when_the_pool_says_it_answered(tmp_path: Path) -> None:
    """The key the pool's ``answered(runtime id)`` reaches (RuntimeBuilder → Bytecode) is the one a runtime's
    compile waits under (its folder: the parent of its packages folder)."""
    package_store = tmp_path / "package-store"
    entry = _entry(package_store / store.ARCHIVE, "e", {"pkg/mod.py": "X = 1\n"})
    builder = RuntimeBuilder(Settings(data_dir=tmp_path / "data", python_executable=sys.executable))
    site, sources = _runtime(tmp_path, entry, ["pkg/mod.py"], folder=builder.root / "python-0123")
    builder.bytecode.compile_later(site, {entry}, sources, package_store)
    assert not builder.wait_compiled(timeout_s=0.3)
    builder.answered("python-0123")
    assert builder.wait_compiled(timeout_s=120)
    assert _pyc(site / "pkg/mod.py").is_file()


def _compile_started(bytecode: Bytecode) -> subprocess.Popen[bytes]:
    """The compile process of ``bytecode`` once it runs."""
    running = bytecode._processes._running  # noqa: SLF001 - what close kills
    found: subprocess.Popen[bytes] = wait_until(lambda: next(iter(running), None), 60, 0.01, what="the compile")
    return found


def _session_gone(sid: int) -> bool:
    """No live process of session ``sid`` (a killed helper may linger as a zombie until reaped: not counted)."""
    listed = subprocess.run(["ps", "-s", str(sid), "-o", "stat="], capture_output=True, text=True).stdout.split()
    return all(state.startswith("Z") for state in listed)


def test_a_compile_waiting_for_a_first_result_never_starts_once_its_service_stops(tmp_path: Path) -> None:
    package_store = tmp_path / "package-store"
    entry = _entry(package_store / store.ARCHIVE, "e", {"pkg/mod.py": "X = 1\n"})
    site, sources = _runtime(tmp_path, entry, ["pkg/mod.py"])
    bytecode = Bytecode(Settings(data_dir=tmp_path / "data", python_executable=sys.executable))
    bytecode.compile_later(site, {entry}, sources, package_store)
    bytecode.close()
    assert bytecode.wait(timeout_s=60)  # at once: not FIRST_RESULT_WAIT_S
    assert store.uncompiled({entry}) == [entry] and not list(site.rglob("*.pyc"))


def test_a_tree_listing_bytecode_a_compile_has_renamed_away_still_links(tmp_path: Path) -> None:
    """uv lists every file of a store entry, a background compile's temporary ``.pyc`` too (gone by the time the
    host links, renamed into place): link_tree leaves whatever uv listed under ``__pycache__`` out — the bytecode
    comes whole from the store (link_bytecode) — and the build stands."""
    package_store = tmp_path / "package-store"
    entry = _entry(package_store / store.ARCHIVE, "e", {"pkg/mod.py": "X = 1\n"})
    store.compile_entries([entry], sys.executable, timeout_s=120)
    seen = str(package_store / store.ARCHIVE / "e")
    pyc = _pyc(entry / "pkg/mod.py").name
    links = {
        "pkg/mod.py": f"{seen}/pkg/mod.py",
        f"pkg/__pycache__/{pyc}": f"{seen}/pkg/__pycache__/{pyc}",
        f"pkg/__pycache__/{pyc}.139871234": f"{seen}/pkg/__pycache__/{pyc}.139871234",  # (renamed away)
    }
    target = tmp_path / "runtime" / "site"
    entries, sources = store.link_tree(links, [], tmp_path / "copies", target, package_store, str(package_store))
    assert entries == {entry} and (target / "pkg/mod.py").stat().st_ino == (entry / "pkg/mod.py").stat().st_ino
    assert not (target / "pkg" / "__pycache__").exists()
    assert store.link_bytecode(target, sources, package_store) == 1
    assert _pyc(target / "pkg/mod.py").stat().st_ino == _pyc(entry / "pkg/mod.py").stat().st_ino
