"""One case: its arguments per interface, its captured output, its soft timeout, its reply.

Output: ``sys.stdout`` and ``sys.stderr`` are capped sinks sharing one budget per case (``output_limit``
bytes); past it :class:`OutputLimitExceeded` (a BaseException) is raised in the user's code and the
reply is ``output_limit``. The returned value's JSON past ``result_limit`` is ``output_limit`` too.

Soft timeouts: with ``timeout_s``, each case's call is interrupted after that long (a ``SIGALRM``
raises in the user's code, between two bytecodes or in an interrupted system call) and answered
``timeout`` with the line it was at, and the worker stays warm. Code that swallows the
interruption, or is stuck in native code, is still ended by the host's own timer, a little later,
which kills the worker. The timer is set once per batch (see :meth:`Runner._on_alarm`).
"""

from __future__ import annotations

import io
import signal
import sys
import time
from typing import Any

from .memory import crowded
from .metric import InvalidOutput
from .values import ENCODE, SIMPLE, to_wire


class OutputLimitExceeded(BaseException):
    """Raised inside user code when stdout+stderr exceed the cap (not catchable by ``except Exception``)."""


class Budget:
    """The output one case may print (``limit`` bytes), what it printed, and whether it overflowed."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.overflow = False


class Capture(io.TextIOBase):
    """A capped text sink shared by stdout and stderr for one evaluation."""

    def __init__(self, budget: Budget, name: str) -> None:
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


class SoftTimeout(BaseException):
    """Raised in the user's code when its case's time is up (a BaseException: ``except Exception`` in
    user code does not swallow it)."""


class BindingError(Exception):
    """A ``main`` interface parameter no case variable can fill."""


def failure(type_name: str, message: str) -> dict[str, Any]:
    """An ``error`` of the harness's own making (no user line, no traceback)."""
    return {"type": type_name, "message": message, "line": None, "traceback": ""}


class Runner:
    """Runs cases of the loaded evaluator (a mixin of the harness: ``fn``, ``params``, the limits and
    ``error`` come from :class:`~.loader.Loader`)."""

    fn: Any
    params: list[Any]
    load_error: dict[str, Any] | None
    interface: str
    output_limit: int
    result_limit: int

    def error(self, exc: BaseException) -> dict[str, Any]:
        raise NotImplementedError

    def __init__(self) -> None:
        self.loop: Any = None  # an asyncio loop, created for the first awaitable
        self._armed = False  # a case's soft timer runs: SIGALRM interrupts the user's code
        self._period = 0.0  # the running batch's timeout_s (0: no soft timeouts)
        self._case_start = 0.0
        self._sinks: tuple[Budget, Capture, Capture] | None = None

    def _args(self, case: dict[str, Any], correct_answer_key: str) -> tuple[list[Any], dict[str, Any]]:
        inputs = case.get("inputs")
        outputs = case.get("outputs")
        trace = case.get("trace")
        if self.interface in ("evaluate", "metric"):  # a metric: MetricAdapter(inputs, outputs, trace)
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
                raise BindingError(
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
        raise SoftTimeout

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
        error = self.error(exc, to_user_line=True)  # the user's frames, not the timer's handler
        message = f"the evaluation exceeded timeout_s={timeout_s:g}"
        trace = error["traceback"].splitlines(keepends=True)[:-1] if error["traceback"] else []
        error.update(type="Timeout", message=message, traceback="".join(trace) + f"Timeout: {message}\n")
        reply.update(status="timeout", error=error)
        if self.loop is not None:  # an interrupted event loop is not trusted again: a fresh worker
            reply["retire"] = True

    def _captures(self) -> tuple[Budget, Capture, Capture]:
        """This case's output budget and sinks (reset, not remade, for each case: same evaluator)."""
        if self._sinks is None:
            budget = Budget(self.output_limit)
            self._sinks = budget, Capture(budget, "<stdout>"), Capture(budget, "<stderr>")
        budget, out, err = self._sinks
        budget.limit, budget.used, budget.overflow = self.output_limit, 0, False
        out.parts.clear()
        err.parts.clear()
        return budget, out, err

    def run_case(self, case: dict[str, Any], correct_answer_key: str, timeout_s: float = 0.0) -> dict[str, Any]:
        """Call the evaluator on ``case``; its reply (``value_json``: the returned value's JSON)."""
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
                encoded = SIMPLE.get(value) if type(value) is bool or value is None else None
                if encoded is None:
                    try:
                        encoded = ENCODE(to_wire(value))
                    except ValueError:  # a marker-free value that still is not JSON (cannot happen)
                        reply["status"] = "invalid_result"
                if encoded is not None and len(encoded) > self.result_limit:
                    message = f"the returned value is {len(encoded)} bytes of JSON; the cap is {self.result_limit}"
                    reply.update(status="output_limit", error=failure("OutputLimit", message))
                elif encoded is not None:
                    reply["value_json"] = encoded
        except SoftTimeout as exc:
            self._timed_out(exc, timeout_s, reply)
        except OutputLimitExceeded:
            pass  # budget.overflow is set: reported below
        except MemoryError as exc:
            reply.update(status="memory_limit", error=self.error(exc))
            if crowded(self.memory_mb):  # the worker stays, unless what it still holds is near the limit
                reply["retire"] = True
        except BindingError as exc:
            reply.update(status="error", error=failure("BindingError", str(exc)))
        except InvalidOutput as exc:
            reply.update(status="invalid_result", error=failure("InvalidResult", str(exc)))
        except BaseException as exc:  # noqa: BLE001 - every user failure is an outcome
            reply.update(status="error", error=self.error(exc))
        # whole nanoseconds, in ms: the float's repr (on the wire, and again in the host's stored row)
        # has at most 6 decimals, half the cost of a full-precision one
        reply["duration_ms"] = (time.perf_counter_ns() - start) / 1e6
        if budget.overflow and reply["status"] != "memory_limit":
            message = f"stdout+stderr exceeded {self.output_limit} bytes"
            reply.update(status="output_limit", error=failure("OutputLimit", message))
        reply["stdout"] = out.text() if out.parts else ""
        reply["stderr"] = err.text() if err.parts else ""
        reply["truncated"] = budget.overflow
        return reply
