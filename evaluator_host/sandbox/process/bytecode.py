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
:data:`FIRST_RESULT_WAIT_S` — one built ahead, ``runtimes build`` — is compiled then): a thread runs the
compile at the lowest CPU priority (``nice`` 19) and the idle I/O class, then links its bytecode into the
runtime. So the first result neither waits for the whole set's compile nor shares the cores with it while
its worker imports the set (compiling in memory only what it imports, as the bare install's first run does);
the workers started after the link load the bytecode.

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
import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from evaluator_host.builds import store
from evaluator_host.settings import Settings

__all__ = ["FIRST_RESULT_WAIT_S", "Bytecode"]

log = logging.getLogger("evaluator_host.sandbox.process.runtimes")  # (its warnings read as the builder's before)

FIRST_RESULT_WAIT_S = 60.0  # a new runtime's compile waits this long at most for its first result


class Bytecode:
    """The bytecode of the runtimes one builder makes (see the module docstring)."""

    def __init__(self, settings: Settings, first_result_wait_s: float = FIRST_RESULT_WAIT_S) -> None:
        self.settings = settings
        self.first_result_wait_s = first_result_wait_s
        self._running: set[threading.Thread] = set()
        self._compiling: dict[Path, threading.Event] = {}  # a store entry under way → set when it is done
        self._waiting: dict[Path, threading.Event] = {}  # runtime folder → set at its first result
        self._processes: set[subprocess.Popen[bytes]] = set()  # the compiles running now
        self._closed = False
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
        first result (:meth:`answered`, or :attr:`first_result_wait_s` passed); nothing when every
        entry is compiled (:meth:`link_compiled` linked it all). An entry another runtime's compile has under
        way is not compiled twice: this one waits for it, then links."""
        todo = store.uncompiled(entries)
        if not todo:
            return
        with self._lock:
            theirs = [self._compiling[entry] for entry in todo if entry in self._compiling]
            mine = [entry for entry in todo if entry not in self._compiling]
            for entry in mine:
                self._compiling[entry] = threading.Event()
            first_result = self._waiting.setdefault(site.parent, threading.Event())
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
        first_result.wait(self.first_result_wait_s)  # the first worker's import has the cores to itself
        with self._lock:
            self._waiting.pop(site.parent, None)
        try:
            try:
                if not self._closed:
                    store.compile_entries(mine, python, timeout_s, idle=True, running=self._processes)
            finally:
                with self._lock:
                    for entry in mine:
                        self._compiling.pop(entry).set()
            for other in theirs:
                other.wait(timeout_s)
            if not self._closed:
                store.link_bytecode(site, sources, package_store)
        except (OSError, subprocess.SubprocessError):
            if not self._closed:  # (stopped by close: nothing to say)
                log.warning("compiling the bytecode of %s failed", site, exc_info=True)
        finally:
            with self._lock:
                self._running.discard(threading.current_thread())

    def close(self) -> None:
        """The service stops: the compiles waiting for a first result never start and those under way are
        killed (their whole session: the compile's forked helpers too). Their entries stay unmarked, so the
        next service that builds a set of them compiles them; no compile outlives its service."""
        with self._lock:
            self._closed = True
            waiting, processes = list(self._waiting.values()), list(self._processes)
        for first_result in waiting:
            first_result.set()
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)

    def answered(self, runtime: Path) -> None:
        """A worker of the runtime folder ``runtime`` answered its first batch: its compile, if one waits,
        starts now (at once for every later call: nothing waits)."""
        with self._lock:
            first_result = self._waiting.get(runtime)
        if first_result is not None:
            first_result.set()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait for the compiles started so far; whether none is left running (a shutdown that waits, tests)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._lock:
            running = list(self._running)
        for thread in running:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        with self._lock:
            return not any(thread.is_alive() for thread in self._running)
