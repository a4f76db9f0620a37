"""Python evaluator harness (stdlib only).

Started once per worker with one argument, a JSON config::

    {"site_dirs": ["..."], "vendor_dirs": ["..."], "work_dir": "/tmp/.evaluator", "reap_strays": false}

``vendor_dirs`` hold what the harness itself needs besides the standard library
(RestrictedPython); they are put on ``sys.path`` only for the ``restricted`` policy.

``reap_strays`` (set only when the harness has a pid namespace of its own: a container,
or the process backend's namespaces): processes an evaluation starts do not outlive it.
Before any reply is written, if any descendant is left, everything in the namespace but the
harness and its init is SIGKILLed and reaped. The harness is pid 1 or a child subreaper, so
orphans come back to it and "none left" costs one ``waitpid``. A reply is written after its
case, except in a ``flush_ms`` run, where fast ok replies are held back (at most ``flush_ms``
and 64 KiB): there the check runs once per write, not once per case, so a process a fast
case started may live on while the next cases of that same run execute, but never past the
write of its case's reply. (The host checks again after every batch, from outside the sandbox.)

Every worker starts *unbound* (the pool keeps such spares warm per runtime, on every
backend) and waits for one ``load`` frame carrying the code and the evaluator's config
(``entrypoint``, ``interface``, ``policy``, ``output_limit``, ``result_limit``); it writes the code
under ``work_dir`` so line numbers and tracebacks are the user's own, then goes on as
above. (A ``code_path`` in the start config binds it at once: the selftest uses that.)

Protocol: the host's pipes arrive as fd 0 (requests) and fd 1 (replies). The harness
moves them to private descriptors, points fd 0 at /dev/null and fd 1 at fd 2, so
nothing the user's code prints can reach the reply channel. Frames are a 4-byte
big-endian length followed by UTF-8 JSON.

    worker → host   {"type": "ready", "load_error": null | ERROR, "soft_timeouts": true}
    host → worker   {"op": "load", "code": "...", "entrypoint": ..., ...}   (unbound start only)
    worker → host   {"type": "loading"}   (at once, when the load frame says "ack": true; then "ready")
    host → worker   {"op": "run", "id": "...", "correct_answer_key": "...", "timeout_s": T, "cases": [CASE, ...]}
    worker → host   one {"type": "result", "id": "...", "index": i, ...} per case, in order (the host
                    checks both: a reply of another request, or none expected, retires the worker)

A ``run`` frame may carry ``"flush_ms": F`` (the host sends it for job chunks): replies of fast
cases (ok, under 0.2 ms) are then held back and written together, at the latest F ms after the
first one was held, when 64 KiB are held, before a slow or failed case's reply, and at the end of
the frame, so a chunk of trivial cases costs one ``write`` per burst instead of one per case. Replies
still leave in order; a worker that dies holding replies loses them, and the host runs the unanswered
cases again without ``flush_ms`` (it cannot tell which one killed the worker).

In a ``flush_ms`` run, consecutive replies that are ``ok`` with nothing printed (and a value of at most
4 KiB of JSON) are held as ONE frame, answering cases ``i`` to ``i + n - 1``::

    worker → host   {"type": "results", "id": "...", "index": i, "values": [V, ...], "durations": [MS, ...]}

so a chunk of trivial cases costs the host one decode per burst, not one per case (a frame holds
at most 32 KiB of values; any other reply closes it first).

A job's ``run`` frame may carry its rows as they are stored, with the columns to pick, instead of
``cases`` (one decode of each row, here, instead of one on each side)::

    host → worker   {"op": "run", ..., "rows": [ROW, ...], "pick": {"outputs": C | null, "trace": C, "app_params": C}}

Case ``i`` is ``{"inputs": ROW_i, "outputs": ROW_i[outputs], "trace": ROW_i[trace], "app_params":
ROW_i[app_params]}``: a column the row lacks is null; ``"outputs": null`` picks the row's ``outputs``,
else its ``output``; a list or dict picked is a copy (``inputs`` shares nothing with the others).

    host → worker   {"op": "exit"}

Soft timeouts: with ``timeout_s``, each case's call is interrupted after that long (a
``SIGALRM`` raises in the user's code, between two bytecodes or in an interrupted system call)
and answered ``timeout`` with the line it was at, and the worker stays warm. Code that swallows
the interruption, or is stuck in native code, is still ended by the host's own timer, a little
later, which kills the worker as before.

The user's module is imported from ``code_path`` so error line numbers are the
user's own. With ``policy: "restricted"`` it is compiled and run under ``restricted.py``
(next to this file): RestrictedPython with the guard set described there.
Values are made JSON-safe here; normalization happens on the host.
"""

from __future__ import annotations

import io
import json
import math
import os
import signal
import struct
import sys
import time
import types
from typing import Any

# asyncio, inspect, traceback and site are imported only when needed: together they
# cost tens of milliseconds of worker start-up, which is the first call's latency.

_HEADER = struct.Struct(">I")
_MAX_REQUEST = 1 << 31
_SLOW_CASE_MS = 0.2  # a case this slow has its reply (and the held ones) written at once
_HELD_BYTES = 64 * 1024  # replies held back at most, in bytes
_OK_KEYS = frozenset({"type", "status", "duration_ms", "stdout", "stderr", "truncated", "index", "id"})
_PLAIN_REPLY_KEYS = 7  # run_case's ok reply with a value: _OK_KEYS but index and id, plus value_json
_BULK_BYTES = 32 * 1024  # values and durations one "results" frame holds, at most
_BULK_VALUE = 4 * 1024  # a longer value's reply is a frame of its own
_SIMPLE = {True: "true", False: "false", None: "null"}  # the commonest returned values' JSON, by identity


_DUMPS = json.dumps  # taken before user code runs: replacing json.dumps later does not reach replies
_ENCODE = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode  # one encoder, built once


class OutputLimitExceeded(BaseException):
    """Raised inside user code when stdout+stderr exceed the cap (not catchable by ``except Exception``)."""


class _Capture(io.TextIOBase):
    """A capped text sink shared by stdout and stderr for one evaluation."""

    def __init__(self, budget: _Budget, name: str) -> None:
        self._budget = budget
        self.name = name
        self.parts: list[str] = []

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        size = len(s.encode("utf-8", "replace"))
        room = self._budget.limit - self._budget.used
        if size > room:
            if room > 0:
                self.parts.append(s.encode("utf-8", "replace")[:room].decode("utf-8", "ignore"))
                self._budget.used = self._budget.limit
            self._budget.overflow = True
            raise OutputLimitExceeded("stdout+stderr exceeded the output cap")
        self._budget.used += size
        self.parts.append(s)
        return len(s)

    def text(self) -> str:
        return "".join(self.parts)


class _Budget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.overflow = False


def _to_wire(value: Any, depth: int = 0) -> Any:
    """Turn a returned value into JSON-safe data with markers the host understands."""
    if depth > 64:
        return {"$unserializable": "structure nested deeper than 64 levels"}
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value if abs(value) <= 2**53 else _to_wire(float(value), depth)
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {"$nonfinite": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(key, bool | int | float) or key is None:
                key = json.dumps(key)
            elif not isinstance(key, str):
                return {"$unserializable": f"dict with {type(key).__name__} keys"}
            out[key] = _to_wire(item, depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [_to_wire(item, depth + 1) for item in value]
    module = type(value).__module__ or ""
    if module.split(".")[0] == "numpy":
        if hasattr(value, "tolist"):  # numpy scalars and arrays
            return _to_wire(value.tolist(), depth + 1)
    if type(value).__name__ == "Decimal":
        return _to_wire(float(value), depth)
    return {"$unserializable": f"{module}.{type(value).__qualname__}" if module != "builtins" else type(value).__name__}


class _SoftTimeout(BaseException):
    """Raised in the user's code when its case's time is up (a BaseException: ``except Exception`` in
    user code does not swallow it)."""


class Harness:
    """Loads one evaluator and serves evaluations over the framed channel."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.code_path: str = ""
        self.entrypoint = self.interface = ""
        self.output_limit = self.result_limit = 1 << 20
        self.fn: Any = None
        self.params: list[Any] = []  # inspect.Parameter, for the main interface only
        self.loop: Any = None  # an asyncio loop, created for the first awaitable
        self.load_error: dict[str, Any] | None = None
        self._armed = False  # a case's soft timer runs: SIGALRM interrupts the user's code
        self._period = 0.0  # the running batch's timeout_s (0: no soft timeouts)
        self._case_start = 0.0
        self._sinks: tuple[_Budget, _Capture, _Capture] | None = None
        self._held: list[bytes] = []  # replies not written yet (a ``flush_ms`` run of fast cases)
        self._held_bytes = 0
        self._held_since = 0.0
        self._bulk: list[str] = []  # held values of a "results" frame not closed yet, and their durations
        self._bulk_ms: list[str] = []
        self._bulk_first: tuple[int, Any] = (0, None)  # the index of its first case and the request id
        self._bulk_bytes = 0
        self.policy = "standard"
        self.site_dirs: list[str] = []
        self.vendor_dirs: list[str] = []
        self.reap = bool(config.get("reap_strays"))
        self.work_dir = config.get("work_dir") or "/tmp/evaluator"
        if self.reap and os.getpid() != 1:
            import ctypes

            ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come back to us
        self._in = os.dup(0)
        self._out = os.dup(1)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(2, 1)
        sys.stdin = open(os.devnull)  # noqa: SIM115 - lives as long as the process
        self.configure(config)

    def configure(self, config: dict[str, Any]) -> None:
        """Take the evaluator's settings (at start, or from the ``load`` frame)."""
        self.code_path = config.get("code_path", self.code_path)
        self.entrypoint = config.get("entrypoint", self.entrypoint)
        self.interface = config.get("interface", self.interface)
        self.output_limit = int(config.get("output_limit", self.output_limit))
        self.result_limit = int(config.get("result_limit", self.result_limit))
        self.policy = config.get("policy", self.policy)
        self.vendor_dirs = list(config.get("vendor_dirs", self.vendor_dirs))
        if config.get("site_dirs"):
            import site

            for path in config["site_dirs"]:
                site.addsitedir(path)
            self.site_dirs += config["site_dirs"]

    def bind(self) -> bool:
        """Wait for the ``load`` frame of an unbound worker; write the code; False on EOF."""
        try:
            message = self.recv()
        except EOFError:
            return False
        if message.get("op") != "load":
            return False
        if message.get("ack"):  # the host learns the worker is alive before the user's code runs
            self.send({"type": "loading"})
        # the workspace secrets the evaluator lists (and, with egress, the proxy variables): its env
        os.environ.update(message.pop("env", None) or {})
        folder = message.get("work_dir") or self.work_dir
        os.makedirs(folder, mode=0o700, exist_ok=True)
        path = os.path.join(folder, message.get("filename") or "evaluator.py")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(message["code"])
        self.configure({**message, "code_path": path})
        return True

    # -- channel -------------------------------------------------------------------------
    def _read_exact(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = os.read(self._in, min(n, 1 << 20))
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def recv(self) -> dict[str, Any]:
        (size,) = _HEADER.unpack(self._read_exact(4))
        if size > _MAX_REQUEST:
            raise EOFError
        message: dict[str, Any] = json.loads(self._read_exact(size))
        return message

    def send(self, message: dict[str, Any]) -> None:
        """Write ``message`` now (after any replies still held back)."""
        self.hold(message)
        self.flush()

    def hold(self, message: dict[str, Any]) -> None:
        """Queue ``message`` for the next :meth:`flush` (replies to a ``flush_ms`` run), as a frame of its own
        (a plain ok reply of a ``flush_ms`` run joins the open "results" frame instead: see ``serve``)."""
        value = message.pop("value_json", None)  # the returned value, encoded once (by run_case)
        self._close_bulk()
        if value is not None and message.keys() == _OK_KEYS and message["status"] == "ok":
            out, err = message["stdout"], message["stderr"]  # the common reply, written without a dict encode
            text = (
                '{"type":"result","status":"ok","duration_ms":'
                + repr(float(message["duration_ms"]))
                + ',"stdout":'
                + (_ENCODE(out) if out else '""')
                + ',"stderr":'
                + (_ENCODE(err) if err else '""')
                + (',"truncated":true' if message["truncated"] else ',"truncated":false')
                + ',"index":'
                + str(int(message["index"]))
                + ',"id":'
                + _ENCODE(message["id"])
                + ',"value":'
                + value
                + "}"
            )
        else:
            text = _ENCODE(message)
            if value is not None:
                text = text[:-1] + ',"value":' + value + "}"
        self._append(text.encode())

    def _append(self, data: bytes) -> None:
        if not self._held:
            self._held_since = time.perf_counter()
        self._held.append(_HEADER.pack(len(data)))
        self._held.append(data)
        self._held_bytes += len(data)

    def _hold_bulk(self, index: int, request: Any, value: str, duration: str) -> None:
        bulk = self._bulk
        if bulk and (
            self._bulk_bytes >= _BULK_BYTES
            or request != self._bulk_first[1]
            or index != self._bulk_first[0] + len(bulk)
        ):
            self._close_bulk()
        if not bulk:
            self._bulk_first = (index, request)
            if not self._held:
                self._held_since = time.perf_counter()
        bulk.append(value)
        self._bulk_ms.append(duration)
        size = len(value) + len(duration) + 2
        self._bulk_bytes += size
        self._held_bytes += size

    def _close_bulk(self) -> None:
        """Turn the open "results" frame, if any, into a held frame (replies stay in order)."""
        if not self._bulk:
            return
        index, request = self._bulk_first
        text = (
            '{"type":"results","id":'
            + _ENCODE(request)
            + ',"index":'
            + str(int(index))
            + ',"values":['
            + ",".join(self._bulk)
            + '],"durations":['
            + ",".join(self._bulk_ms)
            + "]}"
        )
        self._bulk.clear()
        self._bulk_ms.clear()
        self._held_bytes -= self._bulk_bytes
        self._bulk_bytes = 0
        held_since = self._held_since
        self._append(text.encode())
        self._held_since = held_since

    def flush(self) -> None:
        """Write every held frame, in order, in one system call where the pipe allows; first kill
        and reap the processes the cases they answer left behind (see ``reap_strays``)."""
        self._close_bulk()
        if not self._held:
            return
        self.reap_strays()
        view = memoryview(b"".join(self._held))
        self._held.clear()
        self._held_bytes = 0
        while view:
            view = view[os.write(self._out, view) :]

    # -- loading -------------------------------------------------------------------------
    def load(self) -> None:
        budget = _Budget(self.output_limit)
        out, err = _Capture(budget, "<stdout>"), _Capture(budget, "<stderr>")
        sys.stdout, sys.stderr = out, err
        try:
            with open(self.code_path, encoding="utf-8") as fh:
                source = fh.read()
            module = types.ModuleType("evaluator")
            module.__file__ = self.code_path
            sys.modules["evaluator"] = module
            if self.policy == "restricted":
                policy = self._restricted()
                code = policy.compile_restricted(source, self.code_path)
                module.__dict__.update(policy.make_globals("evaluator", policy.runtime_modules(self.site_dirs)))
            else:
                code = compile(source, self.code_path, "exec")
            exec(code, module.__dict__)
            self.fn = getattr(module, self.entrypoint, None)
            if not callable(self.fn):
                raise TypeError(f"{self.entrypoint} is not callable")
            if self.interface == "main":
                import inspect

                self.params = list(inspect.signature(self.fn).parameters.values())
        except BaseException as exc:  # noqa: BLE001 - any failure at import is the user's
            self.load_error = self._error(exc)
            self.load_error["stdout"] = out.text()
            self.load_error["stderr"] = err.text()

    def _restricted(self) -> Any:
        """``restricted.py`` (next to this file), with RestrictedPython from ``vendor_dirs``."""
        import importlib.util

        sys.path[:0] = [path for path in self.vendor_dirs if path not in sys.path]
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "restricted.py")
        spec = importlib.util.spec_from_file_location("evaluator_host_restricted", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    # -- evaluation ----------------------------------------------------------------------
    def _error(self, exc: BaseException) -> dict[str, Any]:
        import traceback

        frames = traceback.extract_tb(exc.__traceback__)
        user = [i for i, f in enumerate(frames) if f.filename == self.code_path]
        line = frames[user[-1]].lineno if user else None
        if isinstance(exc, SyntaxError) and exc.filename == self.code_path:
            line = exc.lineno
        kept = frames[user[0] :] if user else []
        if user and self.policy == "restricted":  # the guards' own frames tell the user nothing
            kept = frames[user[0] : user[-1] + 1]
        text = "Traceback (most recent call last):\n" if kept else ""
        text += "".join(traceback.format_list(kept)).replace(self.code_path, "evaluator.py")
        text += "".join(traceback.format_exception_only(type(exc), exc)).replace(self.code_path, "evaluator.py")
        message = str(exc)
        if isinstance(exc, SystemExit):
            message = f"the evaluator called sys.exit({exc.code!r})"
        return {"type": type(exc).__name__, "message": message, "line": line, "traceback": text}

    def _args(self, case: dict[str, Any], correct_answer_key: str) -> tuple[list[Any], dict[str, Any]]:
        inputs = case.get("inputs")
        outputs = case.get("outputs")
        trace = case.get("trace")
        if self.interface == "evaluate":
            return [inputs, outputs, trace], {}
        if self.interface == "legacy":
            correct = inputs.get(correct_answer_key) if isinstance(inputs, dict) else None
            return [case.get("app_params") or {}, inputs, outputs, correct], {}
        variables: dict[str, Any] = dict(inputs) if isinstance(inputs, dict) else {}
        variables.update(inputs=inputs, outputs=outputs, output=outputs, completion=outputs, trace=trace)
        import inspect

        kwargs: dict[str, Any] = {}
        for param in self.params:
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                kwargs.update({k: v for k, v in variables.items() if k not in kwargs})
            elif param.kind is inspect.Parameter.VAR_POSITIONAL:
                continue
            elif param.name in variables and param.kind is not inspect.Parameter.POSITIONAL_ONLY:
                kwargs[param.name] = variables[param.name]
            elif param.default is inspect.Parameter.empty:
                raise _BindingError(
                    f"main() parameter {param.name!r} is not available; available names: {', '.join(sorted(variables))}"
                )
        return [], kwargs

    def _await(self, awaitable: Any) -> Any:
        import asyncio

        if self.loop is None:
            self.loop = asyncio.new_event_loop()

        async def wrap() -> Any:
            return await awaitable

        return self.loop.run_until_complete(wrap())

    def _on_alarm(self, _signum: int, _frame: Any) -> None:
        """The batch's timer: raise in the running case once its ``timeout_s`` is up, else set the timer
        again for what is left of it (a case that started after the timer was set is not cut short)."""
        if not self._armed:  # between cases, in the harness's own code: the next case gets a full period
            if self._period > 0:
                signal.setitimer(signal.ITIMER_REAL, self._period)
            return
        left = self._case_start + self._period - time.perf_counter()
        if left > 0.0005:
            signal.setitimer(signal.ITIMER_REAL, left)
            return
        self._armed = False
        signal.setitimer(signal.ITIMER_REAL, self._period)  # for the cases after this one
        raise _SoftTimeout

    def _start_timer(self, timeout_s: float) -> None:
        """Set the timer once for a whole batch (one system call, not one per case: see ``_on_alarm``)."""
        self._period = timeout_s
        if timeout_s > 0:
            signal.setitimer(signal.ITIMER_REAL, timeout_s)

    def _arm(self) -> None:
        """A case starts: from now on the timer may interrupt it."""
        if self._period > 0:
            self._case_start = time.perf_counter()
            self._armed = True

    def _disarm(self) -> None:
        """The case is over: the timer's signal, if it comes now, only sets the timer again."""
        self._armed = False

    def _stop_timer(self) -> None:
        self._period = 0.0
        signal.setitimer(signal.ITIMER_REAL, 0)

    def _timed_out(self, exc: BaseException, timeout_s: float, reply: dict[str, Any]) -> None:
        error = self._error(exc)
        message = f"the evaluation exceeded timeout_s={timeout_s:g}"
        trace = error["traceback"].splitlines(keepends=True)[:-1] if error["traceback"] else []
        error.update(type="Timeout", message=message, traceback="".join(trace) + f"Timeout: {message}\n")
        reply.update(status="timeout", error=error)
        if self.loop is not None:  # an interrupted event loop is not trusted again: a fresh worker
            reply["retire"] = True

    def _captures(self) -> tuple[_Budget, _Capture, _Capture]:
        """This case's output budget and sinks (reset, not remade, for each case: same evaluator)."""
        if self._sinks is None:
            budget = _Budget(self.output_limit)
            self._sinks = budget, _Capture(budget, "<stdout>"), _Capture(budget, "<stderr>")
        budget, out, err = self._sinks
        budget.limit, budget.used, budget.overflow = self.output_limit, 0, False
        out.parts.clear()
        err.parts.clear()
        return budget, out, err

    def run_case(self, case: dict[str, Any], correct_answer_key: str, timeout_s: float = 0.0) -> dict[str, Any]:
        budget, out, err = self._captures()
        sys.stdout, sys.stderr = out, err
        reply: dict[str, Any] = {"type": "result", "status": "ok"}
        start = time.perf_counter_ns()
        try:
            if self.load_error is not None:
                reply.update(status="error", error=self.load_error)
            else:
                args, kwargs = self._args(case, correct_answer_key)
                try:
                    self._arm()
                    value = self.fn(*args, **kwargs)
                    if hasattr(value, "__await__"):
                        value = self._await(value)
                finally:
                    self._disarm()
                encoded = _SIMPLE.get(value) if type(value) is bool or value is None else None
                if encoded is None:
                    try:
                        encoded = _ENCODE(_to_wire(value))
                    except ValueError:  # a marker-free value that still is not JSON (cannot happen)
                        reply["status"] = "invalid_result"
                if encoded is not None and len(encoded) > self.result_limit:
                    message = f"the returned value is {len(encoded)} bytes of JSON; the cap is {self.result_limit}"
                    reply.update(status="output_limit", error=_failure("OutputLimit", message))
                elif encoded is not None:
                    reply["value_json"] = encoded
        except _SoftTimeout as exc:
            self._timed_out(exc, timeout_s, reply)
        except OutputLimitExceeded:
            pass  # budget.overflow is set: reported below
        except MemoryError as exc:
            reply.update(status="memory_limit", error=self._error(exc))
        except _BindingError as exc:
            reply.update(status="error", error=_failure("BindingError", str(exc)))
        except BaseException as exc:  # noqa: BLE001 - every user failure is an outcome
            reply.update(status="error", error=self._error(exc))
        # whole nanoseconds, in ms: the float's repr (on the wire, and again in the host's stored row)
        # has at most 6 decimals, half the cost of a full-precision one
        reply["duration_ms"] = (time.perf_counter_ns() - start) / 1e6
        if budget.overflow and reply["status"] != "memory_limit":
            message = f"stdout+stderr exceeded {self.output_limit} bytes"
            reply.update(status="output_limit", error=_failure("OutputLimit", message))
        reply["stdout"] = out.text() if out.parts else ""
        reply["stderr"] = err.text() if err.parts else ""
        reply["truncated"] = budget.overflow
        return reply

    def reap_strays(self) -> None:
        """Kill and reap whatever processes the last case left (only with ``reap_strays``)."""
        if not self.reap:
            return
        try:
            os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return  # no descendant at all: the common case, one syscall
        import signal

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
        signal.signal(signal.SIGALRM, self._on_alarm)
        self.send({"type": "ready", "load_error": self.load_error, "soft_timeouts": True})
        while True:
            try:
                message = self.recv()
            except EOFError:
                return
            if message.get("op") != "run":
                return
            key = message.get("correct_answer_key") or "correct_answer"
            request = message.get("id")
            timeout_s = float(message.get("timeout_s") or 0.0)
            flush_s = float(message.get("flush_ms") or 0.0) / 1000.0
            self._start_timer(timeout_s)
            cases = message.get("cases")
            if cases is None:  # job rows: each case picked from its row here
                cases = picked_cases(message.get("rows") or [], message.get("pick") or {})
            bulk = flush_s > 0
            for index, case in enumerate(cases):
                reply = self.run_case(case, key, timeout_s)
                status, ms = reply["status"], reply["duration_ms"]
                value = reply.get("value_json") if bulk else None
                if (  # a plain ok reply (run_case always sets type, status, duration_ms, stdout, stderr
                    # and truncated; 7 keys: no error, no retire) joins the open "results" frame
                    value is not None
                    and len(reply) == _PLAIN_REPLY_KEYS
                    and status == "ok"
                    and len(value) <= _BULK_VALUE
                    and not (reply["stdout"] or reply["stderr"] or reply["truncated"])
                ):
                    self._hold_bulk(index, request, value, repr(ms))
                else:
                    reply["index"], reply["id"] = index, request
                    try:
                        self.hold(reply)
                    except ValueError:  # a marker-free value that still is not JSON (cannot happen)
                        self.hold({"type": "result", "index": index, "id": request, "status": "invalid_result"})
                if (
                    status != "ok"
                    or ms >= _SLOW_CASE_MS
                    or self._held_bytes >= _HELD_BYTES
                    or time.perf_counter() - self._held_since >= flush_s
                ):
                    self.flush()
            self.flush()
            if timeout_s > 0:
                self._stop_timer()


def _own(value: Any) -> Any:
    """``value`` as decoded on its own: a container taken from a row is copied, so that a case's ``inputs``
    and the fields picked from it never share a list or dict (as when the host sent them apart)."""
    if type(value) is dict or type(value) is list:
        return json.loads(_ENCODE(value))
    return value


def picked_cases(rows: list[Any], pick: dict[str, Any]) -> Any:
    """The cases of a ``run`` frame that carries ``rows`` and ``pick`` instead of ``cases`` (see the protocol):
    ``inputs`` is the row; ``outputs``, ``trace`` and ``app_params`` are the row's columns ``pick`` names
    (``outputs``: null means the row's ``outputs``, else its ``output``); a column a row lacks is null."""
    outputs, trace, app_params = (
        pick.get("outputs"),
        pick.get("trace") or "trace",
        pick.get("app_params") or "app_params",
    )
    for row in rows:
        if type(row) is not dict:
            yield {"inputs": row, "outputs": None, "trace": None, "app_params": None}
            continue
        if outputs is not None:
            out = row.get(outputs)
        else:
            out = row["outputs"] if "outputs" in row else row.get("output")
        seen, params = row.get(trace), row.get(app_params)
        yield {  # a copy only of a container (the commonest fields are strings, numbers or absent)
            "inputs": row,
            "outputs": _own(out) if type(out) is dict or type(out) is list else out,
            "trace": _own(seen) if type(seen) is dict or type(seen) is list else seen,
            "app_params": _own(params) if type(params) is dict or type(params) is list else params,
        }


class _BindingError(Exception):
    pass


def _failure(type_name: str, message: str) -> dict[str, Any]:
    return {"type": type_name, "message": message, "line": None, "traceback": ""}


def forward_egress(socket_path: str, port: int) -> None:
    """Forward ``127.0.0.1:port`` (the sandbox's own loopback, named by ``HTTP(S)_PROXY``) to the host's
    egress proxy at ``socket_path``, on a thread of its own (one selector loop: no thread per connection,
    which the pids limit counts). It carries bytes only: every decision is the host proxy's."""
    import selectors
    import socket
    import threading

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)

    def loop() -> None:
        selector = selectors.DefaultSelector()
        selector.register(listener, selectors.EVENT_READ, None)
        peers: dict[socket.socket, socket.socket] = {}

        def drop(sock: socket.socket) -> None:
            for end in (sock, peers.get(sock)):
                if end is not None and end in peers:
                    selector.unregister(end)
                    peers.pop(end)
                    end.close()

        while True:
            for key, _ in selector.select():
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if key.data is None:
                    try:
                        client, _ = sock.accept()
                        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                        upstream.connect(socket_path)
                    except OSError:
                        continue
                    peers[client], peers[upstream] = upstream, client
                    selector.register(client, selectors.EVENT_READ, 1)
                    selector.register(upstream, selectors.EVENT_READ, 1)
                    continue
                try:
                    data = sock.recv(65536)
                    if data:
                        peers[sock].sendall(data)
                except (OSError, KeyError):
                    data = b""
                if not data:
                    drop(sock)

    threading.Thread(target=loop, name="egress-forwarder", daemon=True).start()


def main(argv: list[str]) -> None:
    """Entry point: ``harness.py CONFIG_JSON``."""
    config = json.loads(argv[1])
    if config.get("egress"):
        forward_egress(config["egress"]["socket"], int(config["egress"]["port"]))
    harness = Harness(config)
    if not harness.code_path and not harness.bind():
        os._exit(0)
    harness.load()
    harness.serve()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
