"""Admission per evaluator: an interactive call (``/v1/evaluate``, by id) whose key's queue would keep it
waiting far longer than its own timeout is answered at once (:class:`~evaluator_host.errors.EvaluatorOverloaded`,
HTTP 429 ``Overloaded`` with ``Retry-After``) instead of queueing behind calls that time out one after the
other; a job's chunks are never refused (jobs queue by design).

The estimate, per key: the interactive calls of the key already in the pool (waiting or running) × the
running mean of one row's share of a lease (:class:`~evaluator_host.sandbox.pool.key_stats.KeyStats`) ÷ the
workers the key holds (at least one). A call is refused when that exceeds ``admission_wait_factor`` ×
its ``timeout_s`` (0: never refused), with ``Retry-After`` the estimate rounded up (1 to 60 s).

A key with no lease measured yet (new, or forgotten once idle) takes as its row time how long its
oldest lease running now has run (a lower bound of that row's time: one row per lease until a row
time is known, nothing is coalesced): a burst of calls on a new evaluator whose first row times out
is refused from a fraction of that timeout on, instead of all of it queueing behind one worker (issue
33 measured 44 calls admitted in the first second, the last answered after 16 s). Only the calls that
arrive while its first worker starts are admitted unmeasured. A call is never refused while nothing
of its key is pending, so a well-behaved evaluator (rows of milliseconds against a timeout of
seconds) practically never is.

The estimate can be wrong (the calls admitted while a new key's first worker starts; a key whose rows
turn slow): an admitted call that has not got a worker by its admission bound (``admission_wait_factor``
× its ``timeout_s`` after it arrived) leaves the queue then with the same 429 (:func:`waited_too_long`,
raised by the leasing: :data:`WAIT_DEADLINE`). Only the wait for a worker counts: a call that has one
runs to its end, and a call of several batches is bound by it only until its first. A wait for a pre-warm
under way (``Holdings.awaits_prewarm``) is not bound: it is the start the call would otherwise pay itself.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextvars import ContextVar

from evaluator_host.errors import EvaluatorOverloaded
from evaluator_host.sandbox.pool.key_stats import KeyStats

__all__ = ["WAIT_DEADLINE", "Admission", "waited_too_long"]

_RETRY_MAX_S = 60

# an interactive call's (monotonic deadline to get a worker by, its bound in seconds): set by the pool
# around the call (None: a job's chunk, or admission off), read by the leasing while the call waits
WAIT_DEADLINE: ContextVar[tuple[float, float] | None] = ContextVar("evaluator_host_wait_deadline", default=None)


def waited_too_long(bound_s: float) -> EvaluatorOverloaded:
    """The 429 of an admitted call that has waited ``bound_s`` for a worker without getting one."""
    return EvaluatorOverloaded(
        f"this evaluator's call waited {bound_s:.1f} s for one of its workers without getting one (its recent "
        "calls are slow or time out): retry later, or run many rows as a job (POST /v1/jobs)",
        retry_after_s=min(_RETRY_MAX_S, max(1, math.ceil(bound_s))),
    )


class Admission:
    """The interactive calls pending per key, and the rule above (``held``: the workers a key holds;
    ``running``: how long its oldest running lease has run)."""

    def __init__(
        self, factor: float, stats: KeyStats, held: Callable[[str], int], running: Callable[[str], float]
    ) -> None:
        self.factor = factor
        self.stats = stats
        self.held = held
        self.running = running
        self.pending: dict[str, int] = {}

    def wait_s(self, key: str) -> float:
        """How long a call of ``key`` arriving now would likely wait for a worker (0: no estimate)."""
        pending = self.pending.get(key, 0)
        if not pending:
            return 0.0
        row_s = self.stats.row_s.get(key)
        if row_s is None:  # nothing measured yet: the row running longest, so far
            row_s = self.running(key)
        return pending * row_s / max(1, self.held(key))

    def enter(self, key: str, timeout_s: float) -> tuple[float, float] | None:
        """Admit a call of ``key`` (counted pending until :meth:`leave`), or raise :class:`EvaluatorOverloaded`.
        Returns what :data:`WAIT_DEADLINE` holds for it: (the moment it must have a worker by, that bound in
        seconds); None when admission is off."""
        deadline = None
        if self.factor > 0:
            wait_s = self.wait_s(key)
            bound_s = self.factor * timeout_s
            if wait_s > bound_s:
                raise EvaluatorOverloaded(
                    f"this evaluator's calls would wait about {wait_s:.1f} s for its workers (more than "
                    f"{self.factor:g} × its timeout_s={timeout_s:g}): its recent calls are slow or time out; "
                    "retry later, or run many rows as a job (POST /v1/jobs)",
                    retry_after_s=min(_RETRY_MAX_S, max(1, math.ceil(wait_s))),
                )
            deadline = time.monotonic() + bound_s, bound_s
        self.pending[key] = self.pending.get(key, 0) + 1
        return deadline

    def leave(self, key: str) -> None:
        """A call admitted by :meth:`enter` is answered."""
        left = self.pending.get(key, 0) - 1
        if left > 0:
            self.pending[key] = left
        else:
            self.pending.pop(key, None)
