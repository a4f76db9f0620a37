"""What the pool makes of a worker's replies: outcomes, and the failures that stand for missing ones.

* :func:`bulk_outcomes`: the outcomes of a ``results`` frame (plain ok replies in bulk), checked
  first: a frame answering more cases than are pending, or with lists that disagree or durations
  that are not finite numbers, is :class:`Foreign`; each row is a :class:`PlainOutcome`;
* :class:`Foreign`: a frame that is not the reply the pool waits for (the pool discards the worker
  and the case being run gets a ``ProtocolError``); :class:`Unanswered`: a worker holding replies
  was lost (the pool runs the rest again, one reply at a time);
* :func:`failure`: the outcome the host writes for a case it got no reply to (timeout, crash, caps);
* :func:`hard_timeout`: how long the host waits for a reply before it kills the worker.
"""

from __future__ import annotations

import math
from typing import Any

from evaluator_host.sandbox.base import RawOutcome, error_info, plain_outcomes

__all__ = ["Foreign", "Unanswered", "bulk_outcomes", "failure", "hard_timeout"]


def hard_timeout(timeout_s: float, soft: bool) -> float:
    """How long the host waits for a case's reply before it kills the worker: the timeout itself, or,
    when the harness interrupts cases at their timeout (and answers ``timeout`` itself, staying warm),
    a little longer, so its answer arrives first (1 s + 10%, at most 2 s: the Node harness reloads the
    evaluator in a fresh thread after ending a case, and a case sent meanwhile starts only once that is done)."""
    return timeout_s + min(2.0, 1.0 + 0.1 * timeout_s) if soft else timeout_s


class Foreign(Exception):
    """A frame that is not the reply the pool waits for (another request's id, or another index)."""


class Unanswered(Exception):  # noqa: N818 - control flow, never leaves the pool
    """A worker running with held replies was lost after ``done`` answered rows of its batch."""

    def __init__(self, done: int) -> None:
        super().__init__(done)
        self.done = done


def bulk_outcomes(reply: dict[str, Any], batch: list[int], done: int, results: list[RawOutcome | None]) -> int:
    """Store the outcomes a ``results`` frame answers (cases ``done`` onwards of ``batch``); return the new
    ``done``. A malformed frame, or one answering more cases than are pending, is :class:`Foreign`."""
    values, durations = reply.get("values"), reply.get("durations")
    if type(values) is not list or type(durations) is not list or not 0 < len(values) == len(durations):
        raise Foreign(reply)
    if len(values) > len(batch) - done:
        raise Foreign(reply)
    try:
        millis = [float(ms) for ms in durations if type(ms) is float or type(ms) is int]
    except OverflowError:
        raise Foreign(reply) from None
    if len(millis) != len(values) or not all(map(math.isfinite, millis)):
        raise Foreign(reply)
    made = plain_outcomes(values, millis)
    first, n = batch[done], len(made)
    if batch[done : done + n] == list(range(first, first + n)):
        results[first : first + n] = made  # the usual batch: consecutive cases
        return done + n
    for outcome in made:
        results[batch[done]] = outcome
        done += 1
    return done


def failure(status: str, type_name: str, message: str, **extra: Any) -> RawOutcome:
    """The outcome of a case the host answers itself (``status``, an error of ``type_name``)."""
    return RawOutcome(status=status, error=error_info(type_name, message), **extra)
