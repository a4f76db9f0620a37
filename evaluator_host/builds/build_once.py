"""Build once: pins → runtimes, each distinct set built once and shared; helpers both installers use.

:class:`BuildOnce` is the rule every backend's builder shares: builds are serialized per
runtime id (in-process lock plus a file lock for several service processes), a runtime
already on disk (or in the engine) is found instead of rebuilt, and a failed build raises
:class:`BuildError` with the installer's message and leaves nothing in the cache.

It also keeps what the runtimes resource shows (``/v1/runtimes``, ``evaluator-host runtimes``):
the builds under way (:attr:`BuildOnce.building`, with a live log), the last failures
(:attr:`BuildOnce.failed`), every build's duration (``<id>.build.json``, and one log line per
build), and *leases*: a shared ``flock`` on ``<id>.lease`` held by whatever runs on a runtime
(the process backend's live workers), which :meth:`BuildOnce.in_use` tests and a prune takes
exclusively before it removes anything. The answer of a request that had to build (or wait for
a build) names it in :data:`BUILD_NOTES`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import fcntl
import functools
import hashlib
import json
import logging
import os
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from evaluator_host.builds import uv
from evaluator_host.builds.fair_slots import FairSlots
from evaluator_host.definitions import languages
from evaluator_host.errors import BuildError
from evaluator_host.observability import tracing
from evaluator_host.observability.metrics import Metrics
from evaluator_host.sandbox.base import Runtime
from evaluator_host.sandbox.inventory import RuntimeInfo
from evaluator_host.shared.lru import LRU

__all__ = [
    "BUILD_NOTES",
    "BuildOnce",
    "BuildState",
    "note",
    "runtime_id",
    "trim_install_log",
]

log = logging.getLogger(__name__)

_TRIM = 4000
_FAILURES_KEPT = 256
_TAIL_BYTES = 4096
_PHASES_BYTES = 1 << 18  # of a build's live output, read for its phases' summary
# Set (to an empty list) around one request by the API's outermost layer: builds the request had to
# run or wait for append a note there, which the answer carries as ``X-Runtime-Build``.
BUILD_NOTES: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("evh_build_notes", default=None)


# npm's pointer to its debug log: a path inside the build's scratch folder (a throwaway container or
# build sandbox), which no user can open; said on one line (npm ≥ 10) or with the path on the next.
_NPM_LOG_POINTER = ("A complete log of this run can be found in", "Log files were not written")


def _without_npm_log_pointer(lines: list[str]) -> list[str]:
    kept: list[str] = []
    skip_next = False
    for line in lines:
        if skip_next:
            skip_next = False
            rest = line.removeprefix("npm ERR!").removeprefix("npm error").strip()
            if rest.startswith("/") and " " not in rest:  # the path, on a line of its own
                continue
        if any(pointer in line for pointer in _NPM_LOG_POINTER):
            skip_next = line.rstrip().endswith(":")
            continue
        kept.append(line)
    return kept


def trim_install_log(text: str) -> str:
    """The part of an installer's output a user needs: its errors and why fetches failed (not npm's
    pointer to a debug log inside the throwaway build folder)."""
    lines = _without_npm_log_pointer([ln for ln in text.strip().splitlines() if ln.strip()])
    errors = [ln for ln in lines if ln.startswith(("ERROR", "npm ERR", "npm error")) or "Could not fetch URL" in ln]
    picked = "\n".join(errors or lines[-20:])
    return picked[-_TRIM:]


@dataclasses.dataclass
class BuildState:
    """A build under way or failed: what it installs, since when, and (failed) why."""

    language: str
    packages: dict[str, str]
    started_at: float  # wall clock
    started: float  # monotonic
    seconds: float | None = None  # set when it ended
    error: BuildError | None = None
    progress: dict[str, object] | None = None  # the last progress its log reported (kept once its live log is gone)

    def elapsed(self) -> float:
        """Seconds it ran (so far, while under way)."""
        return self.seconds if self.seconds is not None else time.monotonic() - self.started


def tail(paths: list[Path], limit: int = _TAIL_BYTES) -> str:
    """The last ``limit`` bytes of the files that exist among ``paths``, one after the other."""
    parts = []
    for path in paths:
        with contextlib.suppress(OSError), open(path, "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - limit))
            parts.append(handle.read().decode("utf-8", "replace"))
    return "".join(parts)[-limit:]


def note(text: str) -> None:
    """Add ``text`` to the current request's ``X-Runtime-Build`` (nothing outside a request)."""
    notes = BUILD_NOTES.get()
    if notes is not None:
        notes.append(text)


_note = note


def _as_language(runtime: Runtime, language: str) -> Runtime:
    """JavaScript and TypeScript share Node runtimes: report the evaluator's own language."""
    return runtime if runtime.language == language else dataclasses.replace(runtime, language=language)


class BuildOnce:
    """Pins → runtimes, each distinct set built once; subclasses say how to find and build one."""

    def __init__(self, root: Path, concurrency: int = 2, per_workspace: int | None = None) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.builds = 0
        self.metrics: Metrics | None = None  # set by the service: builds are counted there
        self._locks: dict[str, asyncio.Lock] = {}
        self._cache: dict[str, Runtime] = {}
        self.building: dict[str, BuildState] = {}  # runtime id → the build under way (any caller)
        self.failed: LRU[str, BuildState] = LRU(_FAILURES_KEPT)  # the last failures, oldest first
        self.phases: dict[str, str] = {}  # runtime id → its finished build's phases (uv.summary), until noted
        # builds run on threads of their own (at most `concurrency` at once, the rest queue): a burst
        # of slow installs never holds the threads the service's other work (database, engine) uses
        self._building = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="evh-build")
        # shared fairly between workspaces (FairSlots): a workspace's slow builds (a trickling index)
        # never hold the others' first ones longer than one build's own time limit
        self._slots = FairSlots(concurrency, per_workspace or concurrency)

    def runtime_for(self, language: str | languages.Language, pins: dict[str, str]) -> str:
        """The runtime id of ``pins`` (no build)."""
        raise NotImplementedError

    def waiting_builds(self) -> dict[str, int]:
        """Builds waiting for a build thread, per workspace ('' for builds of no workspace)."""
        return self._slots.waiting()

    def _used_path(self, rid: str) -> Path:
        return self.root / f"{rid}.used"

    def touch(self, rid: str) -> None:
        """Record that runtime ``rid`` was used now (for listing and pruning; at most once a minute)."""
        path = self._used_path(rid)
        try:
            if time.time() - path.stat().st_mtime < 60:
                return
        except FileNotFoundError:
            pass
        with contextlib.suppress(OSError):
            path.touch()

    def answered(self, rid: str) -> None:
        """A worker of ``rid`` answered its first batch (see ``Builder.answered``); nothing waits for it here."""

    def live_logs(self, rid: str) -> list[Path]:
        """Where the install under way of ``rid`` writes its output (removed when it ends)."""
        return [self.root / f".{rid}.building.log"]

    def build_record(self, rid: str) -> dict[str, object]:
        """What the last successful build of ``rid`` recorded (``seconds``, ``finished_at``), or {}."""
        try:
            record = json.loads((self.root / f"{rid}.build.json").read_text())
        except (OSError, ValueError):
            return {}
        return record if isinstance(record, dict) else {}

    def last_used(self, rid: str) -> float | None:
        """When a worker last started on ``rid`` (wall clock), or None."""
        try:
            return self._used_path(rid).stat().st_mtime
        except OSError:
            return None

    # -- leases --------------------------------------------------------------------------
    def lease(self, rid: str) -> int:
        """Hold ``rid`` (a shared lock on its lease file) until the returned descriptor is closed:
        :meth:`in_use` says so meanwhile and a prune keeps it. Waits out a prune under way."""
        fd = os.open(self.root / f"{rid}.lease", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_SH)
        return fd

    def in_use(self, rid: str) -> bool:
        """Whether any process holds a lease on ``rid`` (a live worker runs on it)."""
        try:
            fd = os.open(self.root / f"{rid}.lease", os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    @contextlib.contextmanager
    def exclusive(self, rid: str) -> Iterator[bool]:
        """For a prune: yields True holding ``rid`` exclusively (no build, no lease), else False."""
        build = os.open(self.root / f"{rid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        lease = os.open(self.root / f"{rid}.lease", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(build, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(lease, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(lease)
            os.close(build)

    def forget(self, rid: str) -> None:
        """Drop ``rid`` from this process's memory (it was removed): the next use finds or builds it again."""
        self._cache.pop(rid, None)

    def forget_marks(self, rid: str) -> None:
        """Remove a pruned runtime's marks (last use, build record, lease)."""
        self.forget(rid)
        for name in (f"{rid}.used", f"{rid}.build.json", f"{rid}.build.log", f"{rid}.lease", f"{rid}.adopted"):
            (self.root / name).unlink(missing_ok=True)

    def present(self, runtime: Runtime) -> bool:
        """Whether a runtime this process remembers is still there (cheap; True when unknown)."""
        return True

    def bare_location(self) -> str | None:
        """Where a runtime with no packages lives (nothing to build)."""
        raise NotImplementedError

    def inventory(self, only: str | None = None) -> list[RuntimeInfo]:
        """Every built runtime (``only``: just that id's); blocking."""
        raise NotImplementedError

    def build_log(self, rid: str) -> str:
        """The whole log of the build that made ``rid`` ('' when there is none)."""
        raise NotImplementedError

    def remove(self, rid: str) -> bool:
        """Remove runtime ``rid``; False (nothing removed) while it is in use; blocking."""
        raise NotImplementedError

    def find(self, rid: str, language: str, pins: dict[str, str]) -> Runtime | None:
        """A runtime built earlier (by any service process), or None; blocking."""
        raise NotImplementedError

    def build(self, rid: str, language: str, pins: dict[str, str]) -> Runtime:
        """Install ``pins`` into a new runtime; blocking; ``BuildError`` leaving nothing behind."""
        raise NotImplementedError

    async def ensure(self, language: str, pins: dict[str, str], workspace: str | None = None) -> Runtime:
        """Return the runtime for ``pins``, building it on first use (in a build slot ``workspace``'s
        fair share allows: :class:`FairSlots`)."""
        rid = self.runtime_for(language, pins)
        cached = self._cache.get(rid)
        if cached is not None and self.present(cached):
            return _as_language(cached, language)
        if not pins:
            runtime = Runtime(rid, language, {}, self.bare_location())
            return runtime
        lock = self._locks.setdefault(rid, asyncio.Lock())
        waited = time.monotonic()
        traced = {"evaluator_host.runtime.id": rid, "evaluator_host.language": language}
        with tracing.span("runtime.build", traced) as span:  # outcome: built, found (on disk), waited, failed
            async with lock:
                cached = self._cache.get(rid)
                if cached is None or not self.present(cached):
                    loop = asyncio.get_running_loop()
                    try:
                        async with self._slots.slot(workspace or ""):
                            runtime, seconds = await loop.run_in_executor(
                                self._building, self._ensure_locked, rid, language, pins
                            )
                    except Exception:
                        span.set_attribute("evaluator_host.build.outcome", "failed")
                        raise
                    self._cache[rid] = runtime
                    span.set_attribute("evaluator_host.build.outcome", "found" if seconds is None else "built")
                    if seconds is not None:
                        span.set_attribute("evaluator_host.build.seconds", round(seconds, 3))
                        phases = self.phases.pop(rid, "")
                        _note(f"built; runtime={rid}; duration={seconds:.1f}s" + (f"; {phases}" if phases else ""))
                else:
                    span.set_attribute("evaluator_host.build.outcome", "waited")
                    if time.monotonic() - waited > 0.05:
                        _note(f"waited; runtime={rid}; duration={time.monotonic() - waited:.1f}s")
        return _as_language(self._cache[rid], language)

    async def lookup(self, language: str, pins: dict[str, str]) -> Runtime | None:
        """The runtime of ``pins`` when already built, else None; never builds (a file or engine look-up
        on a thread of its own, not the build threads, which may all be busy building)."""
        rid = self.runtime_for(language, pins)
        if not pins:
            return Runtime(rid, language, {}, self.bare_location())
        found = self._cache.get(rid) or await asyncio.to_thread(self.find, rid, language, pins)
        return None if found is None else _as_language(found, language)

    def _ensure_locked(self, rid: str, language: str, pins: dict[str, str]) -> tuple[Runtime, float | None]:
        """The runtime of ``rid``: found, or built here (then with its build's duration)."""
        with open(self.root / f"{rid}.lock", "w") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            found = self.find(rid, language, pins)
            if found is not None:
                return found, None
            state = BuildState(language, dict(pins), time.time(), time.monotonic())
            self.building[rid] = state
            shown = ", ".join(languages.get(language).family.pin_text(n, v) for n, v in pins.items())
            log.info("building runtime %s (%s)", rid, shown)
            try:
                runtime = self.build(rid, language, pins)
            except BaseException as exc:
                state.seconds = time.monotonic() - state.started
                state.error = exc if isinstance(exc, BuildError) else BuildError(str(exc), runtime_id=rid, output="")
                self.failed.put(rid, state)
                log.warning("building runtime %s (%s) failed after %.1f s", rid, shown, state.seconds)
                if self.metrics is not None:
                    self.metrics.builds.labels("failed").inc()
                raise
            else:
                self.phases[rid] = uv.summary(tail(self.live_logs(rid)[:1], _PHASES_BYTES))
            finally:
                self.building.pop(rid, None)
                for path in self.live_logs(rid):
                    path.unlink(missing_ok=True)
            seconds = time.monotonic() - state.started
            self.failed.pop(rid)
            record = {"seconds": round(seconds, 2), "finished_at": time.time(), "language": language, "packages": pins}
            with contextlib.suppress(OSError):
                (self.root / f"{rid}.build.json").write_text(json.dumps(record))
            log.info("built runtime %s (%s) in %.1f s", rid, shown, seconds)
            self.builds += 1
            if self.metrics is not None:
                self.metrics.builds.labels("built").inc()
                self.metrics.build_seconds.observe(seconds)
            return runtime, seconds


def runtime_id(language: str | languages.Language, base_identity: str, pins: Mapping[str, str]) -> str:
    """Content hash naming a runtime: (language family, base interpreter/image, pins); ``language`` a language's
    or a family's name, or the registry's entry already resolved."""
    family = (languages.family_of(language) if isinstance(language, str) else language.family).name
    return _runtime_hash(family, base_identity, tuple(sorted(pins.items())))


@functools.lru_cache(maxsize=4096)
def _runtime_hash(family: str, base_identity: str, pins: tuple[tuple[str, str], ...]) -> str:
    """:func:`runtime_id`'s hash, remembered: every call by id asks it again (a JSON text and a SHA-256
    per call, for the same few sets)."""
    blob = json.dumps([family, base_identity, [list(pin) for pin in pins]], separators=(",", ":"))
    return f"{family}-{hashlib.sha256(blob.encode()).hexdigest()[:20]}"
