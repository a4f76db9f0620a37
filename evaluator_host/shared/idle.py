"""Idle back-off of the background loops: a loop that finds nothing waits longer, any local event wakes it at once.

A service's background loops (assembly, routing, scoring, backfill planning, sink delivery) look for work on a
timer. Each look is a database transaction, so a service with nothing to do paid tens of transactions a second
(docs/architecture.md, *idle loops back off*). Contract:

* :class:`Backoff` — the policy, pure: the wait after a pass is ``base_s`` while passes find work; each pass that
  finds nothing doubles the next wait, up to ``max_s`` (never below ``base_s``); :meth:`Backoff.reset` (a wake)
  goes back to ``base_s``. So the first idle waits are the loop's old fixed period, and an idle loop looks every
  ``max_s`` (``idle_poll_max_s``, 2 s): another service's work on a shared database is found within that.
* :class:`IdleTicker` — one loop's wait: :meth:`IdleTicker.wait` after each pass (whether it found work) sleeps
  the back-off's interval or until :meth:`IdleTicker.wake` (thread-safe: the receiver's threads call it), which
  also resets the back-off; a wake during a pass makes the next wait return at once (never lost).
  :meth:`IdleTicker.nudge` — a wake only for a loop that has backed off (a frequent event, a score stored,
  does not make a busy loop run more often). :meth:`IdleTicker.due_in` — time-based work this service knows
  of (a row deferred for 1 s, a delivery's retry): every such time is kept until a wait has passed it, and no
  wait runs past the earliest, whatever the back-off says, so such work stays on time (a wake that ends a wait
  before a due time keeps that time for the next wait). A wake from another thread before the loop's first wait
  is kept and honoured by that wait.
* ``passes`` and ``idle_passes`` count the passes (tests count them; no timing).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import threading
import time
from collections.abc import Callable

__all__ = ["Backoff", "IdleTicker"]

_DUE_MARGIN_S = 0.01  # a due time's wait ends this much later (a timer may fire a clock tick early)


class Backoff:
    """A loop's wait after each pass (see the module docstring)."""

    def __init__(self, base_s: float, max_s: float) -> None:
        self.base_s = base_s
        self.max_s = max(base_s, max_s)
        self._next = base_s

    def after(self, found: bool) -> float:
        """The wait after a pass that ``found`` work or not."""
        if found:
            self._next = self.base_s
            return self.base_s
        wait = self._next
        self._next = min(wait * 2, self.max_s)
        return wait

    def reset(self) -> None:
        """Back to ``base_s`` (something happened here: work is likely)."""
        self._next = self.base_s

    @property
    def backed_off(self) -> bool:
        """Whether the next idle wait is longer than ``base_s`` (the last pass found nothing)."""
        return self._next > self.base_s

    @property
    def resting(self) -> bool:
        """Whether the next idle wait is the cap (the loop has been idle long enough to reach it)."""
        return self._next >= self.max_s


class IdleTicker:
    """One background loop's waits (see the module docstring)."""

    def __init__(self, base_s: float, max_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.backoff = Backoff(base_s, max_s)
        self.clock = clock
        self.passes = 0  # passes waited after
        self.idle_passes = 0  # of them, those that found nothing
        self._event = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._bound = threading.Lock()  # _loop and _pending: a wake from a thread vs the first wait
        self._pending = False  # a wake came before the loop was known: the first wait honours it
        self._dues: list[float] = []  # heap of clock() times by which a pass must run (due_in), until passed

    def wake(self) -> None:
        """Run a pass now and go back to the base period (any thread)."""
        with self._bound:
            loop = self._loop
            if loop is None:  # no wait has started: the first one honours it
                self._pending = True
                self.backoff.reset()
                return
        if _running_loop() is loop:
            self._set()
            return
        with contextlib.suppress(RuntimeError):  # the loop closed: nothing waits any more
            loop.call_soon_threadsafe(self._set)

    def nudge(self) -> None:
        """:meth:`wake` if the loop has backed off (work may follow an idle spell); at its own period, nothing:
        a busy loop is not made to run more often by a frequent event."""
        if self.backoff.backed_off:
            self.wake()

    def _set(self) -> None:
        self.backoff.reset()
        self._event.set()

    def due_in(self, seconds: float) -> None:
        """Work this service knows of is due in ``seconds``: the wait running then ends by that time."""
        heapq.heappush(self._dues, self.clock() + max(seconds, 0.0) + _DUE_MARGIN_S)

    def interval(self, found: bool) -> float:
        """The wait after a pass (counted): the back-off's, cut to the earliest :meth:`due_in` time."""
        self.passes += 1
        self.idle_passes += not found
        wait = self.backoff.after(found)
        if self._dues:
            wait = min(wait, max(self._dues[0] - self.clock(), 0.0))  # ends at the due time (or a wake before)
        return wait

    async def wait(self, found: bool) -> None:
        """Sleep after a pass: :meth:`interval`, or until :meth:`wake` (then cleared)."""
        if self._loop is None:
            with self._bound:
                self._loop = asyncio.get_running_loop()
                pending, self._pending = self._pending, False
            if pending:
                self._set()
        timeout = self.interval(found)
        if timeout > 0 and not self._event.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event.wait(), timeout)
        self._event.clear()
        self.served()

    def served(self) -> None:
        """A wait ended now: the due times it passed are served by the next pass (dropped); later ones stay."""
        now = self.clock()
        while self._dues and self._dues[0] <= now:
            heapq.heappop(self._dues)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
