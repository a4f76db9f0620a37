"""Rows of an awaitable evaluator, many in flight on one event loop (a ``run`` frame's ``in_flight``).

A run frame with ``in_flight`` N > 1 (the host sends it only for an evaluator it detected as async:
``async def`` evaluate/main) is answered by :func:`run_in_flight` instead of the one-row-at-a-time loop
of :mod:`.serve`. Contract:

* rows start in order, at most N awaiting at once, on the harness's one asyncio loop; a row whose call
  returns a plain value (not an awaitable) is done at once;
* each row has its own output budget and captures: ``sys.stdout``/``sys.stderr`` route each write to the
  row whose task wrote it (a :class:`contextvars.ContextVar` every row's task carries); past
  ``output_limit`` the row raises :class:`~.cases.OutputLimitExceeded`, its reply is ``output_limit``;
* each row has its own timer: ``timeout_s`` after it started, a row still awaiting is answered
  ``timeout`` (with the line it was waiting at) and its task cancelled; the others go on. No SIGALRM
  in such a run: code that blocks the loop (a busy loop, a blocking call in an ``async def``) stops
  every row, and the host's own timer (``timeout_s`` plus its margin) ends the worker;
* a row's exception is its ``error`` reply with the user's line; ``MemoryError`` is ``memory_limit``;
* replies are written in row order, as soon as a row and every row before it are done (one write per
  wake of the loop); plain ok replies join ``results`` frames in a ``flush_ms`` run;
* stray processes are reaped once per run, before its last write (not between rows: another row's
  process may still be in use);
* a timed-out row whose task does not finish within :data:`GRACE_S` of its cancellation (code that
  swallows ``CancelledError``) cannot be trusted to stop: the run's last reply carries ``retire`` and
  the host replaces the worker after the batch.

The gap between two replies is at most ``timeout_s`` (a row starts only once an earlier one is done, and
every row is answered within ``timeout_s`` of its start), so the host's per-reply timer still holds.
"""

from __future__ import annotations

import asyncio
import contextvars
import io
import sys
import time
import traceback
from collections.abc import Iterable
from typing import Any

from .cases import BindingError, Budget, Capture, OutputLimitExceeded, failure
from .memory import crowded
from .metric import InvalidOutput
from .values import ENCODE, SIMPLE, to_wire

GRACE_S = 0.05  # how long a cancelled row's task may take to finish before the worker is retired
BULK_VALUE = 4 * 1024  # as in serve.py: a longer value's reply is a frame of its own

ROW: contextvars.ContextVar[tuple[Budget, Capture, Capture]] = contextvars.ContextVar("evaluator_host_row")


class Router(io.TextIOBase):
    """``sys.stdout`` / ``sys.stderr`` while rows are in flight: each write goes to its row's capture
    (dropped when no row is running: a stray task of a finished row, the harness's own code)."""

    def __init__(self, which: int, name: str) -> None:
        self._which = which
        self.name = name

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        sinks = ROW.get(None)
        if sinks is None:
            if not isinstance(s, str):
                raise TypeError(f"write() argument must be str, not {type(s).__name__}")
            return len(s)
        capture = sinks[self._which]
        assert isinstance(capture, Capture)
        return capture.write(s)


async def _settle(awaitable: Any) -> tuple[bool, Any]:
    """``(True, value)`` or ``(False, exception)``: a row's own failure (``SystemExit`` included) never
    leaves its task; only cancellation does."""
    try:
        return True, await awaitable
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # noqa: BLE001 - every user failure is an outcome
        return False, exc


def _awaiting(task: asyncio.Task[Any]) -> list[Any]:
    """The frames of the coroutines ``task`` waits in, outermost first (at most 64)."""
    frames: list[Any] = []
    coro: Any = task.get_coro()
    while coro is not None and len(frames) < 64:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            frames.append(frame)
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return frames


class Row:
    """One row in flight: its sinks, its start, its reply once known."""

    __slots__ = ("index", "sinks", "start", "reply", "task", "timer")

    def __init__(self, index: int, sinks: tuple[Budget, Capture, Capture]) -> None:
        self.index = index
        self.sinks = sinks
        self.start = time.perf_counter_ns()
        self.reply: dict[str, Any] | None = None
        self.task: asyncio.Task[tuple[bool, Any]] | None = None
        self.timer: asyncio.TimerHandle | None = None


class InFlight:
    """One ``in_flight`` run of a harness (``harness``: a :class:`~.serve.Harness`)."""

    def __init__(self, harness: Any, key: str, request: Any, timeout_s: float, flush_s: float, limit: int) -> None:
        self.h = harness
        self.key = key
        self.request = request
        self.timeout_s = timeout_s
        self.bulk = flush_s > 0
        self.limit = max(1, limit)
        self.rows: dict[int, Row] = {}
        self.running = 0
        self.next_reply = 0
        self.stubborn: set[asyncio.Task[tuple[bool, Any]]] = set()
        self.wake: asyncio.Event | None = None

    # -- one row ---------------------------------------------------------------------------
    def start(self, index: int, case: Any) -> None:
        h = self.h
        budget = Budget(h.output_limit)
        sinks = (budget, Capture(budget, "<stdout>"), Capture(budget, "<stderr>"))
        row = self.rows[index] = Row(index, sinks)
        if h.load_error is not None:
            self.finish(row, {"type": "result", "status": "error", "error": h.load_error})
            return
        context = contextvars.copy_context()
        context.run(ROW.set, sinks)
        try:
            args, kwargs = h._args(case, self.key)
            value = context.run(h.fn, *args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - the call itself raised (a sync part of the row)
            self.finish(row, self.failed(exc))
            return
        if not hasattr(value, "__await__"):
            self.finish(row, self.settled(row, value))
            return
        task = asyncio.get_running_loop().create_task(_settle(value), context=context)
        row.task = task
        self.running += 1
        task.add_done_callback(lambda done: self.done(row, done))
        if self.timeout_s > 0:
            row.timer = asyncio.get_running_loop().call_later(self.timeout_s, self.expire, row)

    def done(self, row: Row, task: asyncio.Task[tuple[bool, Any]]) -> None:
        if row.reply is not None:  # answered already (timeout): its task only finished its cancellation
            self.stubborn.discard(task)
            return
        self.running -= 1
        if row.timer is not None:
            row.timer.cancel()
        if task.cancelled():  # cancelled by its own code (or an outer cancel): an error of the row
            reply = {
                "type": "result",
                "status": "error",
                "error": failure("CancelledError", "the evaluation was cancelled"),
            }
        else:
            ok, value = task.result()
            reply = self.settled(row, value) if ok else self.failed(value)
        self.finish(row, reply)

    def expire(self, row: Row) -> None:
        """The row's ``timeout_s`` is up: answer ``timeout`` (at the line it waits at), cancel its task."""
        task = row.task
        if row.reply is not None or task is None or task.done():
            return
        self.running -= 1
        frames = [f for f in _awaiting(task) if f.f_code.co_filename == self.h.code_path]
        message = f"the evaluation exceeded timeout_s={self.timeout_s:g}"
        text = f"Timeout: {message}\n"
        line = None
        if frames:
            line = frames[-1].f_lineno
            listed = traceback.format_list([(self.h.code_path, f.f_lineno, f.f_code.co_name, None) for f in frames])
            text = "Traceback (most recent call last):\n" + "".join(listed).replace(self.h.code_path, "evaluator.py")
            text += f"Timeout: {message}\n"
        error = {"type": "Timeout", "message": message, "line": line, "traceback": text}
        self.finish(row, {"type": "result", "status": "timeout", "error": error})
        self.stubborn.add(task)
        task.cancel()

    def failed(self, exc: BaseException) -> dict[str, Any]:
        reply: dict[str, Any] = {"type": "result", "status": "error"}
        if isinstance(exc, OutputLimitExceeded):
            reply["status"] = "ok"  # the budget's overflow makes it output_limit (finish)
        elif isinstance(exc, MemoryError):
            reply.update(status="memory_limit", error=self.h.error(exc))
            if crowded(self.h.memory_mb):
                reply["retire"] = True
        elif isinstance(exc, BindingError):
            reply["error"] = failure("BindingError", str(exc))
        elif isinstance(exc, InvalidOutput):
            reply.update(status="invalid_result", error=failure("InvalidResult", str(exc)))
        else:
            reply["error"] = self.h.error(exc)
        return reply

    def settled(self, row: Row, value: Any) -> dict[str, Any]:
        reply: dict[str, Any] = {"type": "result", "status": "ok"}
        encoded = SIMPLE.get(value) if type(value) is bool or value is None else None
        if encoded is None:
            try:
                encoded = ENCODE(to_wire(value))
            except ValueError:
                reply["status"] = "invalid_result"
                return reply
        if len(encoded) > self.h.result_limit:
            message = f"the returned value is {len(encoded)} bytes of JSON; the cap is {self.h.result_limit}"
            reply.update(status="output_limit", error=failure("OutputLimit", message))
        else:
            reply["value_json"] = encoded
        return reply

    def finish(self, row: Row, reply: dict[str, Any]) -> None:
        budget, out, err = row.sinks
        reply["duration_ms"] = (time.perf_counter_ns() - row.start) / 1e6
        if budget.overflow and reply["status"] not in ("memory_limit", "timeout"):
            message = f"stdout+stderr exceeded {budget.limit} bytes"
            reply.pop("value_json", None)
            reply.update(status="output_limit", error=failure("OutputLimit", message))
        reply["stdout"] = out.text() if out.parts else ""
        reply["stderr"] = err.text() if err.parts else ""
        reply["truncated"] = budget.overflow
        row.reply = reply
        if self.wake is not None:
            self.wake.set()

    # -- the run ---------------------------------------------------------------------------
    def emit(self, last: bool) -> None:
        """Hold every reply ready in row order (``last``: the run's final one is among them)."""
        channel, request = self.h.channel, self.request
        while (row := self.rows.get(self.next_reply)) is not None and row.reply is not None:
            reply = row.reply
            index = self.next_reply
            del self.rows[index]
            self.next_reply += 1
            final = last and not self.rows
            value = reply.get("value_json") if self.bulk else None
            if (
                value is not None
                and not (final and self.stubborn)
                and reply["status"] == "ok"
                and len(value) <= BULK_VALUE
                and len(reply) == 7
                and not (reply["stdout"] or reply["stderr"] or reply["truncated"])
            ):
                channel.hold_bulk(index, request, value, repr(reply["duration_ms"]))
                continue
            if final and self.stubborn:
                reply["retire"] = True
            reply["index"], reply["id"] = index, request
            try:
                channel.hold(reply)
            except ValueError:  # a marker-free value that still is not JSON (cannot happen)
                channel.hold({"type": "result", "index": index, "id": request, "status": "invalid_result"})

    async def drive(self, cases: Iterable[Any]) -> None:
        self.wake = asyncio.Event()
        channel = self.h.channel
        upcoming = enumerate(cases)
        exhausted = False
        while True:
            while not exhausted and self.running < self.limit:
                item = next(upcoming, None)
                if item is None:
                    exhausted = True
                else:
                    self.start(*item)
            if exhausted and self.running == 0:
                break
            self.emit(last=False)
            channel.flush()
            self.wake.clear()
            await self.wake.wait()
        if self.stubborn:  # timed-out rows still finishing their cancellation: a moment for them
            await asyncio.wait(self.stubborn, timeout=GRACE_S)
        self.emit(last=True)


def run_in_flight(
    harness: Any, cases: Iterable[Any], key: str, request: Any, timeout_s: float, flush_s: float, limit: int
) -> None:
    """Answer one ``in_flight`` run (the module's contract); every reply is written when it returns."""
    if harness.loop is None:
        harness.loop = asyncio.new_event_loop()
    channel = harness.channel
    reap = channel._on_flush
    channel._on_flush = lambda: None  # rows still in flight may use the processes they started
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Router(1, "<stdout>"), Router(2, "<stderr>")
    run = InFlight(harness, key, request, timeout_s, flush_s, limit)
    try:
        harness.loop.run_until_complete(run.drive(cases))
    finally:
        sys.stdout, sys.stderr = saved
        channel._on_flush = reap
    channel.flush()
