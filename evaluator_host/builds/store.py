"""The package store: every unpacked wheel once on disk, hard-linked into each runtime that needs it.

uv's cache (``<cache_dir>/package-store``, beside ``runtimes/``) is the store: ``archive-v0/<entry>/``
holds one unpacked wheel, content-addressed by uv. A build sandbox's uv installs a runtime as a tree of
**symbolic links** into the store (in the sandbox's own tmpfs, where they are cheap) and describes it
(:func:`read_manifest`: each link's target, the other files copied beside). :func:`link_tree` then makes
the real runtime on the host, as the service: every link becomes a **hard link** to the store's file
(same file system), every other file (``RECORD``, ``INSTALLER``, a script) is copied. So a package set
that differs from a built one by one package costs about that package's bytes (and its download and
unpack), never the rest again.

What the host links is checked, never trusted: a path must stay inside the runtime; a link must point
into the store's ``archive-v0`` (its folder's real path too: no link escapes through another link) at a
regular file; anything else fails the build. Bytecode is compiled once into each store entry
(:func:`compile_entries`: ``py_compile`` on every core compiles, never runs, the code; a package's tests
are left out) and hard-linked into the runtimes (:func:`link_bytecode`; a new runtime's after it is in place:
:mod:`evaluator_host.sandbox.process.bytecode`); a ``.pyc`` remembers its source's size and mtime, which its
hard link shares.

Once linked, the runtime and the store entries it uses are handed to root
(:func:`~evaluator_host.sandbox.process.installs.hand_over`, by the caller): a later build — the build
uid's — can neither write a file any runtime shares nor add to or remove from an entry. (A hard link
shares its inode: the hand-over of a runtime is its entries' too.)

:func:`disk_usage` counts bytes on disk with every inode once (``du`` semantics).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

__all__ = [
    "ARCHIVE",
    "Running",
    "Sources",
    "apparent_size",
    "StoreError",
    "compile_entries",
    "disk_usage",
    "in_archive",
    "link_bytecode",
    "link_tree",
    "read_manifest",
    "uncompiled",
]

ARCHIVE = "archive-v0"
_COMPILED = ".evaluator-host-compiled"


class StoreError(Exception):
    """A link tree the host refuses to turn into a runtime (it names what and why)."""


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def in_archive(path: str | Path, store: Path) -> bool:
    """Whether ``path`` (links resolved) is inside ``store``'s archive, where every entry lives."""
    return _inside(os.path.realpath(path), os.path.realpath(store / ARCHIVE))


def read_manifest(path: Path) -> tuple[dict[str, str], list[str]]:
    """The tree uv made, as the install script described it (``links``: path → link target; ``files``:
    the other files' paths, copied to ``<path>.files/``); :class:`StoreError` when it is malformed."""
    try:
        data = json.loads(path.read_text())
        links, files = data["links"], data["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"the install described no tree of links ({exc.__class__.__name__})") from exc
    if not isinstance(links, dict) or not isinstance(files, list):
        raise StoreError("the install's tree of links is malformed")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in links.items()):
        raise StoreError("the install's tree of links is malformed")
    if not all(isinstance(f, str) for f in files):
        raise StoreError("the install's tree of links is malformed")
    for rel in [*links, *files]:
        _relative(rel)
    return links, files


def _relative(rel: str) -> str:
    """``rel`` when it is a plain relative path inside the tree, else :class:`StoreError`."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in rel:
        raise StoreError(f"a path of the install leaves its folder: {rel!r}")
    return rel


# Compiles the ``.py`` files under the folders named on its command line (their ``test``/``tests``
# folders left out: imported by no evaluator, often a third of a package; and never through a link,
# nor into a ``__pycache__`` that is not a plain folder: root writes here) into their ``__pycache__``,
# spread over the machine's cores by size: ``py_compile`` compiles, never runs, the code, and writes
# each ``.pyc`` atomically. A file that does not compile (a template, Python 2 code) stays source only.
# (``compileall -j`` hands its pool one file at a time: on 2 cores 2.0 s for scikit-learn + nltk's store
# entries, 1.2x one core; this, 1.35 s.)
_COMPILE_SCRIPT = """\
import os, py_compile, sys
files, folders = [], [top for top in sys.argv[1:] if not os.path.islink(top)]
while folders:  # (no link is followed or compiled; a folder whose __pycache__ is not a plain folder is left out)
    with os.scandir(folders.pop()) as listing:
        items = list(listing)
    cache = [i for i in items if i.name == "__pycache__"]
    if cache and (cache[0].is_symlink() or not cache[0].is_dir(follow_symlinks=False)):
        continue
    for item in items:
        if item.is_symlink() or item.name in ("test", "tests", "__pycache__"):
            continue
        if item.is_dir(follow_symlinks=False):
            folders.append(item.path)
        elif item.name.endswith(".py") and item.is_file(follow_symlinks=False):
            files.append((item.stat(follow_symlinks=False).st_size, item.path))
shares = [[0, []] for _ in range(max(1, min(8, len(os.sched_getaffinity(0)))))]
for size, path in sorted(files, reverse=True):
    share = min(shares, key=lambda s: s[0])
    share[0] += size
    share[1].append(path)

def run(paths):
    for path in paths:
        try:
            py_compile.compile(path, doraise=True, quiet=2)
        except Exception:
            pass

children = []
for _, paths in shares[1:]:
    pid = os.fork()
    if pid == 0:
        run(paths)
        os._exit(0)
    children.append(pid)
run(shares[0][1])
for pid in children:
    os.waitpid(pid, 0)
"""


def uncompiled(entries: Iterable[Path]) -> list[Path]:
    """The store entries whose bytecode is not compiled yet (no mark), in order."""
    return [entry for entry in sorted(entries) if not (entry / _COMPILED).exists()]


class Running(Protocol):
    """Where :func:`compile_entries` registers its process while it runs (a set will do)."""

    def add(self, process: subprocess.Popen[bytes], /) -> None: ...

    def discard(self, process: subprocess.Popen[bytes], /) -> None: ...


def compile_entries(
    entries: Iterable[Path],
    python: str,
    timeout_s: float,
    idle: bool = False,
    running: Running | None = None,
) -> None:
    """Compile the bytecode of store entries not compiled yet (:data:`_COMPILE_SCRIPT`, ``python -I``:
    the code is compiled, never run, on every core); a mark in the entry says it was done. ``idle``: at
    the lowest CPU priority (``nice`` 19) and, where ``ionice`` is, in the idle I/O class (a compile
    behind a first result: it takes only what the machine does not use). ``running`` holds the compile's
    process while it runs (its session's leader: what a service that stops kills); a compile killed by a
    signal marks nothing and raises ``SubprocessError`` (one that ends with an error of its own, as before,
    marks its entries: what it could compile is there)."""
    todo = uncompiled(entries)
    if not todo:
        return
    lowest = ["ionice", "-c", "3"] if idle and shutil.which("ionice") else []
    script = "import os\nos.nice(19)\n" + _COMPILE_SCRIPT if idle else _COMPILE_SCRIPT  # (its helpers inherit it)
    compiling = subprocess.Popen(
        [*lowest, python, "-I", "-S", "-c", script, *map(str, todo)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # (its forked helpers with it: killed as a group past the timeout)
    )
    if running is not None:
        running.add(compiling)
    try:
        compiling.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(compiling.pid, signal.SIGKILL)
        compiling.wait()
        raise
    finally:
        if running is not None:
            running.discard(compiling)
    if compiling.returncode < 0:
        raise subprocess.SubprocessError(f"the bytecode compile was killed (signal {-compiling.returncode})")
    for entry in todo:
        (entry / _COMPILED).touch()


Sources = dict[str, set[str]]  # a folder of the runtime (relative) → the store folders its files come from


def link_tree(
    links: dict[str, str], files: list[str], copies: Path, target: Path, store: Path, seen_as: str
) -> tuple[set[Path], Sources]:
    """Make ``target`` from the tree uv made (:func:`read_manifest`; see the module docstring): links
    into the store become hard links, the other files are copied from ``copies``. Returns the store
    entries it links from and, per folder of ``target``, the store folders its files come from (where
    their bytecode is, :func:`link_bytecode`). :class:`StoreError` for anything it refuses."""
    archive = os.path.realpath(store / ARCHIVE)
    host_archive = str(store / ARCHIVE)
    archive_seen = seen_as.rstrip("/") + "/" + ARCHIVE + "/"
    checked: dict[str, bool] = {}  # a store folder → whether its real path lies in the store
    sources: Sources = {}
    entries: set[str] = set()
    top = str(target)
    os.makedirs(top, exist_ok=True)
    made: set[str] = {""}
    for rel, link in links.items():
        if "/__pycache__/" in f"/{rel}":  # bytecode: linked by the host from the store (link_bytecode), whole
            continue  # (what uv listed there may be a compile's temporary file, gone by now: issue 55 §4)
        if not link.startswith(archive_seen) or "/../" in link or "/./" in link:
            raise StoreError(f"a link of the install points outside the package store: {link}")
        inner = link[len(archive_seen) :]
        entries.add(inner.split("/", 1)[0])
        source = host_archive + "/" + inner
        parent, _, name = source.rpartition("/")
        if parent not in checked:
            checked[parent] = _inside(os.path.realpath(parent), archive)
        if not checked[parent] or not stat.S_ISREG(os.lstat(source).st_mode):
            raise StoreError(f"a link of the install is not a file of the package store: {rel}")
        rel_dir = rel.rpartition("/")[0]
        if rel_dir not in made:
            os.makedirs(top + "/" + rel_dir, exist_ok=True)
            made.add(rel_dir)
        try:
            os.link(source, f"{top}/{rel}")
        except FileExistsError:
            if not rel.endswith(".pyc"):
                raise
        if not rel_dir.endswith("__pycache__"):
            sources.setdefault(rel_dir, set()).add(parent)
    real_copies = os.path.realpath(copies)
    for rel in files:
        path = copies / rel
        info = os.lstat(path)
        if not _inside(os.path.realpath(path.parent), real_copies) or not stat.S_ISREG(info.st_mode):
            raise StoreError(f"the install left something that is no file: {rel}")
        out = target / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, out)
        os.chmod(out, stat.S_IMODE(info.st_mode) & 0o755)
    return {Path(host_archive) / entry for entry in entries if entry}, sources


def link_bytecode(target: Path, sources: Sources, store: Path) -> int:
    """Hard-link the bytecode compiled in the store folders a runtime's folders link from (their
    ``__pycache__``) into the runtime; what is there already stays. Returns how many were linked."""
    archive = os.path.realpath(store / ARCHIVE)
    count = 0
    for rel_dir, parents in sources.items():
        for parent in parents:
            cache = os.path.join(parent, "__pycache__")
            if not os.path.isdir(cache) or not _inside(os.path.realpath(cache), archive):
                continue
            out, made = os.path.join(target, rel_dir, "__pycache__"), False
            for name in os.listdir(cache):
                source = os.path.join(cache, name)
                if not name.endswith(".pyc") or not stat.S_ISREG(os.lstat(source).st_mode):
                    continue
                if not made:  # (only the cache folder: a runtime removed meanwhile is not made again)
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(out)
                    made = True
                with contextlib.suppress(FileExistsError):
                    os.link(source, os.path.join(out, name))
                    count += 1
    return count


def apparent_size(directory: Path) -> int:
    """Bytes of the files under ``directory`` (not following links; a shared file counts in each runtime)."""
    total = 0
    for parent, _, files in os.walk(directory):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(parent, name)).st_size
    return total


def disk_usage(paths: Iterable[Path]) -> int:
    """Bytes on disk under ``paths`` (allocated blocks), every inode counted once, as ``du`` does."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root in paths:
        for parent, dirs, names in os.walk(root):
            for name in [*dirs, *names, *([""] if parent == str(root) else [])]:
                try:
                    info = os.lstat(os.path.join(parent, name) if name else parent)
                except OSError:
                    continue
                key = (info.st_dev, info.st_ino)
                if key in seen:
                    continue
                seen.add(key)
                total += info.st_blocks * 512
    return total
