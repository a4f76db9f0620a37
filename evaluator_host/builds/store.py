"""The package store: every unpacked wheel once on disk, hard-linked into each runtime that needs it.

uv's cache (``<cache_dir>/package-store``, beside ``runtimes/``) is the store: ``archive-v0/<entry>/`` holds one
unpacked wheel, content-addressed by uv. A build sandbox's uv installs a runtime as a tree of
**symbolic links** into the store (in its scratch folder); :func:`link_tree` then makes the real
runtime on the host, as the service: every link becomes a **hard link** to the store's file (same
file system), every other file (``RECORD``, ``INSTALLER``, a script) is copied. So a package set that
differs from a built one by one package costs about that package's bytes (and its download and
unpack), never the rest again.

What the host links is checked, never trusted: a link must point into the store's ``archive-v0`` (its
real path too: no link escapes through another link) and at a regular file; anything else (a device,
a link elsewhere, a folder outside the tree) fails the build. Bytecode is compiled once into each
store entry (:func:`compile_entries`: ``compileall`` compiles, never runs, the code) and linked like
the sources; a ``.pyc`` remembers its source's size and mtime, which its hard link shares.

Once linked, the runtime and the store entries it uses are handed to root
(:func:`~evaluator_host.sandbox.process.installs.hand_over`, by the caller): a later build — the build
uid's — can neither write a file any runtime shares nor add to or remove from an entry. (A hard link
shares its inode: the hand-over of a runtime is its entries' too.)

:func:`disk_usage` counts bytes on disk with every inode once (``du`` semantics).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Iterable
from pathlib import Path

__all__ = ["ARCHIVE", "StoreError", "compile_entries", "disk_usage", "link_tree", "store_entries"]

ARCHIVE = "archive-v0"
_COMPILED = ".evaluator-host-compiled"


class StoreError(Exception):
    """A link tree the host refuses to turn into a runtime (it names what and why)."""


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def store_entries(tree: Path, store: Path, seen_as: str) -> set[Path]:
    """The store entries (``archive-v0/<entry>``, host paths) the links of ``tree`` point into;
    ``seen_as``: the store's path where the links were made (a build sandbox's mount point)."""
    archive = str(store / ARCHIVE)
    found: set[Path] = set()
    for parent, dirs, names in os.walk(tree):
        for name in [*dirs, *names]:
            path = os.path.join(parent, name)
            if os.path.islink(path):
                target = _host_target(os.readlink(path), store, seen_as)
                rest = target[len(archive) + 1 :].split("/", 1)[0]
                if rest:
                    found.add(Path(archive) / rest)
    return found


def _host_target(link: str, store: Path, seen_as: str) -> str:
    """The host path of a link's target in the store, or StoreError when it points anywhere else."""
    archive_seen = seen_as.rstrip("/") + "/" + ARCHIVE
    if not _inside(link, archive_seen) or "/../" in link + "/":
        raise StoreError(f"a link of the install points outside the package store: {link}")
    return str(store / ARCHIVE) + link[len(archive_seen) :]


def compile_entries(entries: Iterable[Path], python: str, timeout_s: float) -> None:
    """Compile the bytecode of store entries not compiled yet (``python -I -m compileall``; the code
    is compiled, never run); a mark in the entry says it was done."""
    todo = [entry for entry in sorted(entries) if not (entry / _COMPILED).exists()]
    if not todo:
        return
    subprocess.run(
        [python, "-I", "-m", "compileall", "-q", "-j", "0", *map(str, todo)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=timeout_s,
        check=False,  # a file that does not compile (a template, Python 2 code) stays source only
    )
    for entry in todo:
        (entry / _COMPILED).touch()


def link_tree(tree: Path, target: Path, store: Path, seen_as: str) -> int:
    """Make ``target`` from the link tree ``tree`` (see the module docstring): links into the store
    become hard links (their bytecode beside them), other regular files are copied. Returns the
    number of files hard-linked. :class:`StoreError` for anything it refuses."""
    archive = os.path.realpath(store / ARCHIVE)
    linked = 0
    target.mkdir(parents=True, exist_ok=True)
    for parent, dirs, names in os.walk(tree):
        rel = os.path.relpath(parent, tree)
        out = target if rel == "." else target / rel
        for name in dirs:
            path = os.path.join(parent, name)
            if os.path.islink(path):
                raise StoreError(f"a folder of the install is a link: {os.path.join(rel, name)}")
            (out / name).mkdir(exist_ok=True)
        for name in names:
            path = os.path.join(parent, name)
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                source = _host_target(os.readlink(path), store, seen_as)
                real = os.path.realpath(source)
                if not _inside(real, archive) or not stat.S_ISREG(os.lstat(real).st_mode):
                    raise StoreError(f"a link of the install is not a file of the package store: {rel}/{name}")
                try:
                    os.link(real, out / name)
                except FileExistsError:
                    if name.endswith(".pyc"):  # an entry compiled before: uv linked its bytecode too
                        continue
                    raise
                linked += 1
                if name.endswith(".py"):
                    linked += _link_bytecode(Path(real), out, name, archive)
            elif stat.S_ISREG(info.st_mode):
                shutil.copyfile(path, out / name)
                os.chmod(out / name, stat.S_IMODE(info.st_mode) & 0o755)
            else:
                raise StoreError(f"the install left something that is no file: {rel}/{name}")
    return linked


def _link_bytecode(source: Path, out: Path, name: str, archive: str) -> int:
    """Hard-link the compiled bytecode of a store source (``__pycache__/<stem>.*.pyc``) beside its link."""
    cache = source.parent / "__pycache__"
    if not cache.is_dir():
        return 0
    stem = name[: -len(".py")] + "."
    count = 0
    for pyc in cache.iterdir():
        if pyc.name.startswith(stem) and pyc.name.endswith(".pyc") and pyc.name.count(".") == stem.count(".") + 1:
            real = os.path.realpath(pyc)
            if not _inside(real, archive) or not stat.S_ISREG(os.lstat(real).st_mode):
                continue
            (out / "__pycache__").mkdir(exist_ok=True)
            try:
                os.link(real, out / "__pycache__" / pyc.name)
            except FileExistsError:
                continue
            count += 1
    return count


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
