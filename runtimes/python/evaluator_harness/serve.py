"""The harness: a worker's main loop over ``run`` frames (``runtimes/PROTOCOL.md``).

A run frame with ``in_flight`` > 1 (an async evaluator's) is answered by :mod:`.inflight` (many rows
awaiting at once on one event loop); every other run by the loop here, one row at a time.

Started config (one JSON argument)::

    {"site_dirs": ["..."], "vendor_dirs": ["..."], "work_dir": "/tmp/.evaluator", "reap_strays": false,
     "sync": false, "egress": null}

``reap_strays`` (set only when the harness has a pid namespace of its own: a container, or the
process backend's namespaces): processes an evaluation starts do not outlive it. Before any reply is
written, if any descendant is left, everything in the namespace but the harness and its init is
SIGKILLed and reaped. The harness is pid 1 or a child subreaper, so orphans come back to it and "none
left" costs one ``waitpid``. A reply is written after its case, except in a ``flush_ms`` run, where
fast ok replies are held back (at most ``flush_ms`` and 64 KiB): there the check runs once per write,
not once per case, so a process a fast case started may live on while the next cases of that same
run execute, but never past the write of its case's reply. (The host checks again after every batch,
from outside the sandbox.)
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from .cases import Runner
from .channel import Channel
from .loader import Loader
from .rows import picked_cases
from .values import own

SLOW_CASE_MS = 0.2  # a case this slow has its reply (and the held ones) written at once
HELD_BYTES = 64 * 1024  # replies held back at most, in bytes
PLAIN_REPLY_KEYS = 7  # run_case's ok reply with a value: _OK_KEYS of channel.py but index and id, plus value_json
BULK_VALUE = 4 * 1024  # a longer value's reply is a frame of its own


def _coroutine(fn: Any) -> bool:
    """Whether ``fn`` is an ``async def`` function (its code's ``CO_COROUTINE`` flag: no import needed)."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    return code is not None and bool(code.co_flags & 0x80)


class Harness(Loader, Runner):
    """Loads one evaluator and serves evaluations over the framed channel."""

    def __init__(self, config: dict[str, Any]) -> None:
        Loader.__init__(self, config)
        Runner.__init__(self)
        self.reap = bool(config.get("reap_strays"))
        if self.reap and os.getpid() != 1:
            import ctypes

            ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come back to us
        # looked up at each write: code that replaces the reaper (through gc) disables it, as the host must expect
        self.channel = Channel(lambda: self.reap_strays(), sync=bool(config.get("sync")))
        self._out = self.channel._out  # the reply descriptor (as user code could find it anyway)
        self.configure(config)

    def reap_strays(self) -> None:
        """Kill and reap whatever processes the last case left (only with ``reap_strays``)."""
        if not self.reap:
            return
        try:
            os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return  # no descendant at all: the common case, one syscall
        try:
            os.kill(-1, signal.SIGKILL)  # every process of the namespace but us and its init
        except ProcessLookupError:
            pass
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                return
            except InterruptedError:
                continue

    def serve(self) -> None:
        """Answer ``run`` frames until EOF or another op (``exit``)."""
        channel = self.channel
        signal.signal(signal.SIGALRM, self._on_alarm)
        if _coroutine(self.fn):  # an `async def` evaluator: asyncio imported now, not in its first row's time
            from . import inflight  # noqa: F401
        channel.send({"type": "ready", "load_error": self.load_error, "soft_timeouts": True})
        while True:
            try:
                message = channel.recv()
            except EOFError:
                return
            if message.get("op") != "run":
                return
            key = message.get("correct_answer_key") or "correct_answer"
            request = message.get("id")
            timeout_s = float(message.get("timeout_s") or 0.0)
            flush_s = float(message.get("flush_ms") or 0.0) / 1000.0
            cases = message.get("cases")
            if cases is None:  # job rows: each case picked from its row here
                cases = picked_cases(message.get("rows") or [], message.get("pick") or {}, own)
            in_flight = message.get("in_flight")
            if in_flight is not None and in_flight > 1:  # an async evaluator: many rows awaiting at once
                from .inflight import run_in_flight  # (asyncio is most of a start's imports: only async ones pay it)

                run_in_flight(self, cases, key, request, timeout_s, flush_s, int(in_flight))
                continue
            self._start_timer(timeout_s)
            bulk = flush_s > 0
            for index, case in enumerate(cases):
                reply = self.run_case(case, key, timeout_s)
                status, ms = reply["status"], reply["duration_ms"]
                value = reply.get("value_json") if bulk else None
                if (  # a plain ok reply (run_case always sets type, status, duration_ms, stdout, stderr
                    # and truncated; 7 keys: no error, no retire) joins the open "results" frame
                    value is not None
                    and len(reply) == PLAIN_REPLY_KEYS
                    and status == "ok"
                    and len(value) <= BULK_VALUE
                    and not (reply["stdout"] or reply["stderr"] or reply["truncated"])
                ):
                    channel.hold_bulk(index, request, value, repr(ms))
                else:
                    reply["index"], reply["id"] = index, request
                    try:
                        channel.hold(reply)
                    except ValueError:  # a marker-free value that still is not JSON (cannot happen)
                        channel.hold({"type": "result", "index": index, "id": request, "status": "invalid_result"})
                if (
                    status != "ok"
                    or ms >= SLOW_CASE_MS
                    or channel.held_bytes >= HELD_BYTES
                    or time.perf_counter() - channel.held_since >= flush_s
                ):
                    channel.flush()
            channel.flush()
            if timeout_s > 0:
                self._stop_timer()
