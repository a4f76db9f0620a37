"""A fake sandbox backend for tests and benchmarks, in the spirit of httpx's ``MockTransport``.

Nothing in the package imports this module; tests and benches do, explicitly.

``FakeBackend(handler)`` starts *fake workers*: no process, no thread, no container — each
is an in-memory pair of asyncio streams and one task that speaks the harness's side of
the framed protocol (``runtimes/PROTOCOL.md``) to the real :class:`WorkerPool`:

* it waits for the ``load`` frame, records it and answers ``{"type": "ready",
  "load_error": ...}`` as the ``load`` hook decides (default: no error);
* for each ``run`` frame it calls ``handler(load, case)`` once per case, in order, and
  writes one ``{"type": "result", "id": <the run's id>, "index": i, ...}`` reply per case;
* EOF or an ``exit`` frame ends it (return code 0).

What a handler may return (or an ``async`` handler may resolve to):

``dict``          the reply's fields, e.g. ``{"status": "ok", "value": 1.0}`` (``status``
                  defaults to ``ok``; ``type``, ``index`` and ``duration_ms`` are filled in).
                  ``"retire": True`` makes the worker exit right after the reply (as a Node
                  harness does after ``process.exit``); ``"raw_output": "..."`` is written to
                  the worker's raw fd-level output instead of being sent.
:data:`HANG`      never answer (until the pool kills the worker: a timeout).
:data:`DIE`       the worker exits (code 1) without answering: a crash.
:data:`OOM`       the worker is killed for memory without answering (``oom_killed``).
:data:`FLOOD`     raw output floods past the cap: ``output_overflow`` is set and the worker
                  is killed, as a backend does.
:data:`MEMORY`    the reply ``{"status": "memory_limit", ...}`` (a ``MemoryError`` caught in
                  the harness); the worker lives on.

A handler that *raises* is user code raising: the reply is ``{"status": "error"}`` with the
exception's type and message. The ``load`` hook (``load(load_frame)``) may return ``None``
(loaded), an error dict (the ``load_error``), :data:`DIE` or :data:`HANG`. The ``start``
hook (``start(runtime)``, sync or async) runs in ``start_worker`` before a worker exists:
raise ``SandboxError`` from it to simulate an infrastructure failure, or await something
to delay a start.

Everything is recorded for assertions: :attr:`FakeBackend.workers` (every worker started,
in order), each worker's :attr:`~FakeWorker.load`, :attr:`~FakeWorker.runs` (the run
frames' cases), :attr:`~FakeWorker.handled` (the cases its handler was called with),
:attr:`~FakeWorker.answered` and :attr:`~FakeWorker.killed`; and
:attr:`FakeBackend.events`, one ``(event, worker id, detail)`` tuple per start, load, case,
death and kill, in the order they happened. An exception a ``load`` hook raises ends that
worker (code 70) and lands in :attr:`FakeBackend.errors`, which a test should find empty.
Raw output is attributed by the pool to the reply it reads next, as with real workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from evaluator_host.errors import SandboxError
from evaluator_host.jobs.datasets.mapping import picked_cases
from evaluator_host.sandbox.base import ExitInfo, RawOutput, RuntimeKey, error_info
from evaluator_host.sandbox.egress.proxy import EgressGate, EgressProxy
from evaluator_host.sandbox.protocol import encode_frame, read_frame
from evaluator_host.testing.builder import FakeBuilder
from evaluator_host.testing.pipes import writer as _writer

__all__ = [
    "DIE",
    "FLOOD",
    "HANG",
    "MEMORY",
    "OOM",
    "Action",
    "FakeBackend",
    "FakeBuilder",
    "FakeWorker",
    "Handler",
    "LoadHook",
    "Reply",
    "StartHook",
]

_MAX_FRAME = 1 << 30


class Action(enum.Enum):
    """What a worker does instead of answering with a reply dict."""

    HANG = "hang"
    DIE = "die"
    OOM = "oom"
    FLOOD = "flood"
    MEMORY = "memory"


HANG = Action.HANG
DIE = Action.DIE
OOM = Action.OOM
FLOOD = Action.FLOOD
MEMORY = Action.MEMORY

Reply = dict[str, Any] | Action
Handler = Callable[[dict[str, Any], dict[str, Any]], Reply | Awaitable[Reply]]
LoadHook = Callable[[dict[str, Any]], dict[str, Any] | Action | None | Awaitable[dict[str, Any] | Action | None]]
StartHook = Callable[[RuntimeKey], Awaitable[None] | None]


def _ok(_load: dict[str, Any], _case: dict[str, Any]) -> Reply:
    return {"status": "ok", "value": 1.0}


class FakeWorker:
    """One fake worker: the host's ends (``reader``, ``writer``) and the task playing the harness.

    Satisfies the :class:`~evaluator_host.sandbox.base.Worker` Protocol. ``kill`` cancels the
    task and closes both channels (return code -9); it is idempotent, and ``wait`` returns the
    same :class:`ExitInfo` once the worker has ended, however it ended.
    """

    def __init__(self, backend: FakeBackend, wid: int, runtime: RuntimeKey) -> None:
        loop = asyncio.get_running_loop()
        self.backend = backend
        self.id = wid
        self.runtime = runtime
        self.load: dict[str, Any] | None = None
        self.runs: list[list[dict[str, Any]]] = []  # the cases of each run frame it was sent
        self.handled: list[dict[str, Any]] = []  # the cases the handler was called with, in order
        self.answered = 0
        self.killed = False
        self.output_overflow = asyncio.Event()
        self.egress: EgressGate | None = None
        self.reader = asyncio.StreamReader()  # host reads replies
        self._inbox = asyncio.StreamReader()  # the harness reads requests
        self.writer, self._to_worker = _writer(self._inbox, loop)
        self._reply, self._to_host = _writer(self.reader, loop)
        self._raw = RawOutput()
        self._exit: ExitInfo | None = None
        self._ended = asyncio.Event()
        self._running = asyncio.Event()  # cleared by pause(): the harness answers nothing until resume()
        self._running.set()
        self._task = asyncio.ensure_future(self._serve())

    def __repr__(self) -> str:
        return f"<FakeWorker {self.id} answered={self.answered} killed={self.killed}>"

    @property
    def sent(self) -> list[dict[str, Any]]:
        """Every case this worker was sent, in order (it may have died before handling them all)."""
        return [case for run in self.runs for case in run]

    @property
    def alive(self) -> bool:
        """Whether the worker has not ended."""
        return self._exit is None

    def pause(self) -> None:
        """Freeze it as ``docker pause`` or SIGSTOP does: it answers nothing (a load frame, a run frame
        read after this) until :meth:`resume`; ``kill`` still ends it."""
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    # -- the Worker Protocol -------------------------------------------------------------
    def oom_kills(self) -> int:
        """Fake workers are never OOM-killed by a kernel."""
        return 0

    async def reap_strays(self) -> bool:
        """Fake workers start no processes: nothing to reap."""
        return True

    def set_output_limit(self, limit: int) -> None:
        """Cap the raw output kept per evaluation."""
        self._raw.cap = limit

    def take_raw_output(self) -> str:
        """Raw output (``raw_output`` of replies) since the last call."""
        return self._raw.take()

    def raw_behind(self) -> None:
        """Nothing to wait for: raw output arrives inside the replies"""
        return None

    async def kill(self) -> ExitInfo:
        """End the worker now (code -9 unless it had already ended); idempotent."""
        if self._exit is None:
            self.killed = True
            self.backend.events.append(("kill", self.id, None))
            self._end(ExitInfo(returncode=-9, raw_output=self._raw.tail))
            self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait([self._task])
        return await self.wait()

    async def wait(self) -> ExitInfo:
        """Wait until the worker has ended; how it ended."""
        await self._ended.wait()
        assert self._exit is not None
        return self._exit

    # -- the harness side ----------------------------------------------------------------
    def _end(self, info: ExitInfo) -> None:
        if self._exit is not None:
            return
        self._exit = info
        self._to_host.close()
        self._to_worker.close()
        self._ended.set()

    def _die(self, returncode: int, *, oom: bool = False) -> None:
        self.backend.events.append(("exit", self.id, returncode))
        self._end(ExitInfo(returncode=returncode, oom_killed=oom, raw_output=self._raw.tail))

    def _send(self, message: dict[str, Any]) -> None:
        self._reply.write(encode_frame(message))

    async def _serve(self) -> None:
        try:
            await self._harness()
        except asyncio.IncompleteReadError:
            self._die(0)  # the host closed our stdin
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # noqa: BLE001 - a bug in a hook: kept for the test to see, not hidden
            self.backend.errors.append(exc)
            self._die(70)

    async def _harness(self) -> None:
        load = await read_frame(self._inbox, _MAX_FRAME)
        await self._running.wait()
        self.load = load
        self.backend.events.append(("load", self.id, load))
        if load.get("ack"):
            self._send({"type": "loading"})
        outcome = await _resolve(self.backend.load_hook(load)) if self.backend.load_hook else None
        if isinstance(outcome, Action):
            await self._act(outcome)
            return
        self._send({"type": "ready", "load_error": outcome})
        while True:
            message = await read_frame(self._inbox, _MAX_FRAME)
            if message.get("op") != "run":
                self._die(0)
                return
            if "rows" in message:  # job rows: the cases picked as a harness picks them (no copies)
                cases = list(picked_cases(message["rows"], message["pick"]))
            else:
                cases = list(message.get("cases", []))
            self.runs.append(cases)
            for index, case in enumerate(cases):
                self.handled.append(case)
                self.backend.events.append(("case", self.id, case))
                try:
                    reply = await _resolve(self.backend.handler(load, case))
                except Exception as exc:  # noqa: BLE001 - user code raising is an outcome
                    reply = {"status": "error", "error": error_info(type(exc).__name__, str(exc))}
                if isinstance(reply, Action):
                    if reply is not MEMORY:
                        await self._act(reply)
                        return
                    reply = {"status": "memory_limit", "error": error_info("MemoryError", "")}
                reply = dict(reply)
                raw = reply.pop("raw_output", None)
                if raw and self._raw.feed(str(raw).encode()) and not self.output_overflow.is_set():
                    self.output_overflow.set()
                reply = {"status": "ok", "duration_ms": 0.0, **reply, "type": "result", "index": index}
                self._send({"id": message.get("id"), **reply})  # a handler may set its own "id" (a forgery)
                self.answered += 1
                if reply.get("retire"):
                    self._die(0)  # the reply is already in the host's buffer
                    return

    async def _act(self, action: Action) -> None:
        if action is HANG:
            await asyncio.Event().wait()  # until killed
        elif action is DIE:
            self._die(1)
        elif action is OOM:
            self._die(-9, oom=True)
        elif action is FLOOD:
            self._raw.feed(b"x" * (self._raw.cap + 1))
            self.output_overflow.set()
            self._die(-9)


async def _resolve(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class FakeBackend:
    """A :class:`~evaluator_host.sandbox.base.SandboxBackend` whose workers are :class:`FakeWorker`.

    ``handler(load, case)`` decides every answer (see the module docstring); ``load`` and
    ``start`` are the optional hooks for binding and starting. After :meth:`close` every
    worker is dead and ``start_worker`` raises ``SandboxError``.
    """

    name = "fake"
    egress: EgressProxy | None = None

    def __init__(
        self,
        handler: Handler = _ok,
        *,
        load: LoadHook | None = None,
        start: StartHook | None = None,
        builder: FakeBuilder | None = None,
    ) -> None:
        self.handler = handler
        self.load_hook = load
        self.start_hook = start
        self._builder = builder or FakeBuilder()
        self.workers: list[FakeWorker] = []
        self.events: list[tuple[str, int, Any]] = []
        self.errors: list[Exception] = []  # exceptions raised by the load or start hooks inside workers
        self.closed = False

    @property
    def builder(self) -> FakeBuilder:
        """The fake builder."""
        return self._builder

    @property
    def isolation(self) -> dict[str, Any]:
        """None at all: this backend runs no code."""
        return {"backend": self.name, "sandboxed": False}

    @property
    def started(self) -> int:
        """How many workers were started."""
        return len(self.workers)

    @property
    def alive(self) -> list[FakeWorker]:
        """The workers that have not ended."""
        return [w for w in self.workers if w.alive]

    def worker_of(self, case: dict[str, Any]) -> FakeWorker:
        """The last worker whose handler was called with ``case`` (compared by equality)."""
        for worker in reversed(self.workers):
            if case in worker.handled:
                return worker
        raise LookupError(f"no handler was called with {case!r}")

    async def start_worker(self, runtime: RuntimeKey) -> FakeWorker:
        """Run the ``start`` hook, then start an unbound fake worker for ``runtime``."""
        if self.closed:
            raise SandboxError("the fake backend is closed")
        if self.start_hook is not None:
            await _resolve(self.start_hook(runtime))
        worker = FakeWorker(self, len(self.workers), runtime)
        self.workers.append(worker)
        self.events.append(("start", worker.id, runtime))
        return worker

    async def close(self) -> None:
        """Kill every worker."""
        self.closed = True
        await asyncio.gather(*(w.kill() for w in self.workers))
