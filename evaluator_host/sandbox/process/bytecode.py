"""A new runtime's bytecode: what the store has compiled already linked before its first worker, the rest
compiled after its first result, in the background (issue 55 §4).

A bare ``uv pip install`` compiles nothing (uv does not by default); its first run compiles only what it
imports. A runtime is read-only to its workers, so without the store's bytecode every worker would compile
what it imports, in memory, each time (seconds for scikit-learn): the store entries a runtime links are
compiled once (:func:`~evaluator_host.builds.store.compile_entries`) and their ``.pyc`` hard-linked into
it (:func:`~evaluator_host.builds.store.link_bytecode`). A set of packages seen before starts with all
of it (:meth:`Bytecode.link_compiled`, before the runtime is in place). What is not compiled yet is compiled
**after** the runtime's first result (:meth:`Bytecode.compile_later`, started by :meth:`Bytecode.answered`,
which the pool calls through its builder once a worker has answered its first batch — the evaluator loaded,
what it imports imported, at load or in the call —; a runtime no worker answers within
:data:`FIRST_RESULT_WAIT_S` — one built ahead, ``images build`` in store mode — is compiled then): a thread
runs the compile at the lowest CPU priority (``nice`` 19) and the idle I/O class, then links its bytecode
into the runtime. So the first result does not wait for the whole set's compile, nor share the cores with it
while its first batch runs (unless that takes past the wait; its worker compiles in memory only what it
imports, as the bare install's first run does); the workers started after the link load the bytecode. A
runtime whose entries another runtime's compile has under way waits for that compile (and so, at most, for
the other runtime's first result too) before it links.

Work left over survives a stop: a runtime whose bytecode is still to come holds :data:`TODO` (its entries and
where its folders link from); a service that stops (:meth:`Bytecode.close`) kills its compiles — none
outlives its service — and the next worker of that runtime to answer its first batch, in any service of the
data dir, compiles and links what is left (:meth:`Bytecode.answered`); the file goes once the links are made.

Why a running worker is never broken by it: each ``.pyc`` is written whole in the store (``py_compile``
writes a temporary file and renames it) before it is hard-linked into the runtime (a link appears whole
or not at all), and it records its source's size and mtime, which the hard-linked source shares; a worker
reads a module's source or its complete bytecode. The runtime's content stays what its id names (the
same sources; bytecode is derived from them by the same interpreter). A runtime removed meanwhile gets
nothing: only a ``__pycache__`` folder is ever made, inside a folder that must exist.

The docker backend's store mode builds its Python runtimes with the same builder (folders on the host, bound
read-only into containers): the links made later appear in the bound folder the same way. Its image mode
commits an image with no bytecode (uv's default), immutable once committed: nothing is compiled there, so
nothing waits for it either.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from evaluator_host.builds import store
from evaluator_host.settings import Settings

__all__ = ["FIRST_RESULT_WAIT_S", "TODO", "Bytecode"]

log = logging.getLogger("evaluator_host.sandbox.process.runtimes")  # (its warnings read as the builder's before)

FIRST_RESULT_WAIT_S = 60.0  # a new runtime's compile waits this long at most for its first result
TODO = "bytecode.todo.json"  # in a runtime's folder while its bytecode is still to come (see the module docstring)


class _Compiles:
    """The compile processes running now (:func:`store.compile_entries` registers each): :meth:`close` kills
    them, and one registered after it is killed at once — a compile that started as the service stopped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self.closed = False

    def add(self, process: subprocess.Popen[bytes]) -> None:
        with self._lock:
            if not self.closed:
                self._running.add(process)
                return
        _kill(process)

    def discard(self, process: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._running.discard(process)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            running = list(self._running)
        for process in running:
            _kill(process)


def _kill(process: subprocess.Popen[bytes]) -> None:
    """Kill a compile and its forked helpers (its session, of which it is the leader)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


class Bytecode:
    """The bytecode of the runtimes one builder makes (see the module docstring)."""

    def __init__(self, settings: Settings, first_result_wait_s: float = FIRST_RESULT_WAIT_S) -> None:
        self.settings = settings
        self.first_result_wait_s = first_result_wait_s
        self._running: set[threading.Thread] = set()
        self._compiling: dict[Path, threading.Event] = {}  # a store entry under way → set when it is done
        self._waiting: dict[Path, threading.Event] = {}  # runtime folder → set at its first result
        self._busy: set[Path] = set()  # runtime folders with a compile thread of this service
        self._processes = _Compiles()
        self._lock = threading.Lock()

    def link_compiled(self, site: Path, sources: store.Sources, package_store: Path) -> None:
        """Link the bytecode the store holds already into a new runtime's packages folder ``site``, before
        its first worker. A failure leaves the runtime without it (logged), still whole."""
        try:
            store.link_bytecode(site, sources, package_store)
        except OSError:
            log.warning("linking the bytecode of %s failed", site, exc_info=True)

    def compile_later(self, site: Path, entries: set[Path], sources: store.Sources, package_store: Path) -> None:
        """Compile the ``entries`` not compiled yet and link their bytecode into the runtime's packages
        folder ``site`` (in place already), in a background thread at the lowest priority, once the runtime's
        first result (:meth:`answered`, or :attr:`first_result_wait_s` passed); nothing when every entry is
        compiled (:meth:`link_compiled` linked it all) or the service stops. :data:`TODO` holds the work until
        the links are made. An entry another runtime's compile has under way is not compiled twice: this one
        waits for it, then links."""
        todo = store.uncompiled(entries)
        if not todo or self._processes.closed:
            return
        with contextlib.suppress(OSError):  # (without it, only a stop before the links loses them)
            _write_todo(site.parent / TODO, site.name, entries, sources, package_store)
        self._start(site, todo, sources, package_store, threading.Event())

    def _start(
        self, site: Path, todo: list[Path], sources: store.Sources, package_store: Path, first_result: threading.Event
    ) -> None:
        with self._lock:
            theirs = [self._compiling[entry] for entry in todo if entry in self._compiling]
            mine = [entry for entry in todo if entry not in self._compiling]
            for entry in mine:
                self._compiling[entry] = threading.Event()
            self._waiting[site.parent] = first_result
            self._busy.add(site.parent)
            thread = threading.Thread(
                target=self._compile,
                args=(site, mine, theirs, sources, package_store, first_result),
                name="bytecode",
                daemon=True,
            )
            self._running.add(thread)
        thread.start()

    def _compile(
        self,
        site: Path,
        mine: list[Path],
        theirs: list[threading.Event],
        sources: store.Sources,
        package_store: Path,
        first_result: threading.Event,
    ) -> None:
        python, timeout_s = self.settings.python_executable, self.settings.build_timeout_s
        first_result.wait(self.first_result_wait_s)  # the first batch has the cores to itself
        with self._lock:
            self._waiting.pop(site.parent, None)
        try:
            try:
                if not self._processes.closed:
                    store.compile_entries(mine, python, timeout_s, idle=True, running=self._processes)
            finally:
                with self._lock:
                    for entry in mine:
                        self._compiling.pop(entry).set()
            for other in theirs:
                other.wait(timeout_s)
            if not self._processes.closed:
                store.link_bytecode(site, sources, package_store)
                (site.parent / TODO).unlink(missing_ok=True)
        except (OSError, subprocess.SubprocessError):
            if not self._processes.closed:  # (stopped by close: nothing to say)
                log.warning("compiling the bytecode of %s failed", site, exc_info=True)
        finally:
            with self._lock:
                self._running.discard(threading.current_thread())
                self._busy.discard(site.parent)

    def close(self) -> None:
        """The service stops: the compiles waiting for a first result never start and those under way are
        killed (their whole session: the compile's forked helpers too), none outliving its service. What they
        left stays in :data:`TODO` for the runtime's next first batch, in whichever service (:meth:`answered`)."""
        self._processes.close()
        with self._lock:
            waiting = list(self._waiting.values())
        for first_result in waiting:
            first_result.set()

    def answered(self, runtime: Path) -> None:
        """A worker of the runtime folder ``runtime`` answered its first batch: its compile, if one waits, starts
        now; if none of this service's is under way and the runtime still holds :data:`TODO` (a service stopped
        before its links were made), what is left is compiled and linked now."""
        with self._lock:
            first_result = self._waiting.get(runtime)
            busy = runtime in self._busy
        if first_result is not None:
            first_result.set()
        elif not busy and not self._processes.closed and (runtime / TODO).is_file():
            self._resume(runtime)

    def _resume(self, runtime: Path) -> None:
        """Compile and link what :data:`TODO` of ``runtime`` says is left, at once (its first result was given)."""
        try:
            site, entries, sources, package_store = _read_todo(runtime / TODO)
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("the bytecode left to make in %s could not be read", runtime, exc_info=True)
            return
        given = threading.Event()
        given.set()  # (nothing left to compile, another runtime's compile did it: the thread only links)
        self._start(site, store.uncompiled(entries), sources, package_store, given)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait for the compiles started so far; whether none is left running (a shutdown that waits, tests)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._lock:
            running = list(self._running)
        for thread in running:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        with self._lock:
            return not any(thread.is_alive() for thread in self._running)


def _write_todo(path: Path, site: str, entries: set[Path], sources: store.Sources, package_store: Path) -> None:
    """Write :data:`TODO` whole (a temporary file renamed): a reader sees all of it or none."""
    body = {
        "site": site,
        "entries": sorted(str(e) for e in entries),
        "sources": {rel: sorted(parents) for rel, parents in sources.items()},
        "store": str(package_store),
    }
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(body))
    partial.rename(path)


def _read_todo(path: Path) -> tuple[Path, set[Path], store.Sources, Path]:
    """(site, entries, sources, package store) of a runtime's :data:`TODO`; only entries inside the store's
    archive are kept (the file is the host's, in a folder workers cannot write; checked all the same: root
    compiles what it names)."""
    body = json.loads(path.read_text())
    package_store = Path(body["store"])
    entries = {Path(e) for e in body["entries"] if store.in_archive(e, package_store)}
    sources = {str(rel): {str(p) for p in parents} for rel, parents in body["sources"].items()}
    site = path.parent / str(body["site"])
    if site.parent != path.parent:
        raise ValueError(f"{body['site']!r} is not a folder of the runtime")
    return site, entries, sources, package_store
