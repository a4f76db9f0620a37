"""The sandbox backend Protocol and the values that cross it.

A backend has one job — start a worker for a :class:`WorkerSpec` — plus ``close``.
A :class:`Worker` is a byte channel to a harness (the framed protocol is spoken by
the pool), a way to kill it, and what it left behind when it died. Every backend
must pass ``tests/compliance``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from evaluator_host.observability.tracing import MARKER

if TYPE_CHECKING:
    from evaluator_host.definitions.languages import Language
    from evaluator_host.sandbox.egress.proxy import EgressGate, EgressProxy

__all__ = [
    "SANDBOX_ENV",
    "Builder",
    "ExitInfo",
    "PlainOutcome",
    "RawOutcome",
    "RawOutput",
    "plain_outcomes",
    "Runtime",
    "RuntimeKey",
    "SandboxBackend",
    "Worker",
    "WorkerSpec",
    "error_info",
    "memory_exhausted",
]

SANDBOX_ENV = {  # the whole environment user code sees, on every backend
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    # a judge's OpenTelemetry (its SDK reads this) marks its spans as evaluation traffic: never routed to rules
    "OTEL_RESOURCE_ATTRIBUTES": f"{MARKER}=true",
}


_OUT_OF_MEMORY = ("MemoryError", "JavaScript heap out of memory", "Fatal process out of memory")


def memory_exhausted(raw_output: str) -> bool:
    """Whether a dead worker's last output says it ran out of memory (Python or V8)."""
    return any(marker in raw_output for marker in _OUT_OF_MEMORY)


@dataclass(frozen=True)
class Runtime:
    """A built (or package-free) runtime: one per (language, base, exact pins).

    ``location`` is backend-specific: a directory holding ``site/`` on the process
    backend, an image id on the docker backend; ``None`` for the bare base.
    """

    id: str
    language: str
    packages: dict[str, str]
    location: str | None
    lock: list[str] = field(default_factory=list)

    def public(self) -> dict[str, Any]:
        """The ``runtime`` object of an EvaluationResult."""
        return {"id": self.id, "language": self.language, "packages": dict(self.packages)}


class Builder(Protocol):
    """Turns pins into runtimes, building each distinct set once."""

    builds: int

    def runtime_for(self, language: str | Language, pins: dict[str, str]) -> str:
        """The runtime id of ``pins`` (``language``: a name or the registry's entry; no build)."""

    async def ensure(self, language: str, pins: dict[str, str], workspace: str | None = None) -> Runtime:
        """The runtime of ``pins``, built on first use; ``BuildError`` when the install fails. A build
        for ``workspace`` counts against its own build concurrency (``max_builds_per_workspace``)."""

    async def lookup(self, language: str, pins: dict[str, str]) -> Runtime | None:
        """The runtime of ``pins`` when it is already built (by any service process), else None; never builds."""

    def touch(self, rid: str) -> None:
        """Record that runtime ``rid`` was used now (for listing and pruning)."""

    def answered(self, rid: str) -> None:
        """A worker of runtime ``rid`` answered its first batch (the evaluator loaded, what it imports imported):
        what a new runtime's background work waits for, so as not to compete with its first result (the bytecode)."""

    def bare_location(self) -> str | None:
        """Where the package-free runtime lives (the location of a bare :class:`RuntimeKey`)."""


@dataclass(frozen=True)
class RuntimeKey:
    """What an unbound worker is started for: a runtime family's harness on one runtime's
    packages (``location``: backend-specific, see :class:`Runtime`) under ``memory_mb``."""

    family: str
    location: str | None
    memory_mb: int
    egress: bool = False  # started with a gate to the egress proxy (and its proxy environment)


@dataclass(frozen=True)
class WorkerSpec:
    """Everything that decides which worker may serve an evaluation, and how to bind one.

    ``key`` identifies one evaluator revision (of one workspace, with its secrets) on one runtime
    with its limits: a worker is only ever reused for the same key. ``load`` is the ``load`` frame's content (the
    code the harness runs and its entrypoint, interface, limits and loader config).
    """

    key: str
    runtime: RuntimeKey
    runtime_id: str
    load: dict[str, Any]
    output_limit: int
    result_limit: int
    workspace: str = ""  # whose workers these are: workers are never shared across workspaces
    network: tuple[str, ...] = ()  # "host:port" its workers may reach through the egress proxy
    # (destination, ((header, value), ...)): what the egress proxy sets on requests there (secrets
    # included: never in ``load``, never in the sandbox)
    headers: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    in_flight: int = 1  # rows one worker runs at once (an async evaluator's; the run frame's in_flight)

    @property
    def memory_mb(self) -> int:
        """The worker's memory limit."""
        return self.runtime.memory_mb


@dataclass
class ExitInfo:
    """How a worker ended: exit code or signal, whether it was killed for memory, its raw output."""

    returncode: int | None
    oom_killed: bool = False
    raw_output: str = ""


@dataclass
class RawOutcome:
    """One evaluation as the harness (or the host, for timeouts and crashes) reported it."""

    status: str
    value: Any = None
    error: dict[str, Any] | None = None
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False
    duration_ms: float = 0.0
    egress: list[dict[str, Any]] = field(default_factory=list)  # connections through the egress proxy


class PlainOutcome(RawOutcome):
    """An ``ok`` outcome a ``results`` frame answered (nothing printed): made by :func:`plain_outcomes`
    with only ``value`` and ``duration_ms`` set on the instance; every other field reads its class
    default (``stderr`` and ``egress`` may be set afterwards, like any outcome's). ``duration_ms`` is
    a finite float. Jobs store these rows on a fast path (``jobs/running/rows.py``)."""

    status = "ok"
    egress = cast("list[dict[str, Any]]", ())  # read-only here; an instance's own list replaces it


def plain_outcomes(values: list[Any], millis: list[float]) -> list[RawOutcome]:
    """One :class:`PlainOutcome` per value (and its duration), a fraction of a dataclass's construction."""
    new, kind = object.__new__, PlainOutcome
    made: list[RawOutcome] = []
    append = made.append
    for value, ms in zip(values, millis, strict=True):
        outcome = new(kind)
        outcome.value = value
        outcome.duration_ms = ms
        append(outcome)
    return made


class RawOutput:
    """What a worker wrote straight to fd 1/2: a capped buffer for results and a tail for crash reports."""

    def __init__(self, cap: int = 1 << 20) -> None:
        self.cap = cap
        self._buffer = bytearray()
        self._total = 0
        self._tail = bytearray()

    def feed(self, chunk: bytes) -> bool:
        """Keep what fits under the cap; True once more than ``cap`` bytes came since the last :meth:`take`."""
        self._total += len(chunk)
        room = self.cap - len(self._buffer)
        if room > 0:
            self._buffer += chunk[:room]
        self._tail = (self._tail + chunk)[-4096:]
        return self._total > self.cap

    def take(self) -> str:
        """The kept output since the last call, decoded; resets the count."""
        text = self._buffer.decode("utf-8", "replace")
        self._buffer.clear()
        self._total = 0
        return text

    @property
    def tail(self) -> str:
        """The last 4 KiB written, whatever the cap kept."""
        return self._tail.decode("utf-8", "replace")


def error_info(type_name: str, message: str) -> dict[str, Any]:
    """An ``EvaluationResult.error`` for a failure the host (not the user's code) reports."""
    return {"type": type_name, "message": message, "line": None, "traceback": ""}


class Worker(Protocol):
    """A started harness: unbound until the pool sends it a ``load`` frame."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    output_overflow: asyncio.Event
    egress: EgressGate | None  # its door to the egress proxy (egress runtimes only)

    def set_output_limit(self, limit: int) -> None:
        """Cap the raw fd-level output kept per evaluation (set when the worker is bound)."""

    def oom_kills(self) -> int:
        """How many of the worker's processes the kernel killed for memory so far (0 when unknown)."""

    async def reap_strays(self) -> bool:
        """Kill, from outside the sandbox, every process user code left running in the worker;
        False when that could not be made sure of (the pool then discards the worker)."""

    def take_raw_output(self) -> str:
        """Raw fd-level output (bypassing the harness capture) since the last call."""

    def raw_behind(self) -> Awaitable[None] | None:
        """Called once a reply was read: None when the raw output written before it is all taken in (what
        :meth:`take_raw_output` answers then holds it all), else an awaitable that completes once it is.
        (The docker backend orders the two by sync marks in the frames and answers None.)"""

    async def kill(self) -> ExitInfo:
        """Kill the worker and everything it started; idempotent."""

    async def wait(self) -> ExitInfo:
        """Wait until the worker has exited."""


class SandboxBackend(Protocol):
    """Starts sandboxed workers."""

    name: str
    egress: EgressProxy | None  # None: this backend cannot give workers network

    @property
    def builder(self) -> Builder:
        """Where this backend's runtimes come from."""

    @property
    def isolation(self) -> dict[str, Any]:
        """What isolation is in force (reported by ``/healthz``)."""

    async def start_worker(self, runtime: RuntimeKey) -> Worker:
        """Start an unbound worker for ``runtime``; raise ``SandboxError`` when infrastructure fails."""

    async def close(self) -> None:
        """Stop every worker and release resources."""
