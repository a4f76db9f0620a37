"""Waiting for a condition instead of sleeping for it: the suite's one polling loop.

A test that needs something to have happened (a job finished, a worker gone, a span exported) asks
:func:`wait_until` for it; it never sleeps "long enough". A sleep is left only where time passing is
the behaviour under test (an evaluator that sleeps, an idle TTL that must expire, "nothing more
happens in the next 0.5 s").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Literal, TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T | Literal[False] | None],
    timeout: float = 60.0,
    interval: float = 0.05,
    *,
    what: str | Callable[[], str] = "the condition",
    ignoring: tuple[type[BaseException], ...] = (),
) -> T:
    """Call ``predicate`` every ``interval`` s until it returns something truthy, and return that.

    Fails the test (AssertionError naming ``what``, or what the callable ``what`` answers then, and the
    last value seen) once ``timeout`` s have passed without it. An exception of ``ignoring`` raised by
    ``predicate`` counts as "not yet" (a server still starting); any other propagates at once.
    """
    deadline = time.monotonic() + timeout
    while True:
        seen: object
        try:
            seen = value = predicate()
        except ignoring as exc:
            seen = exc  # not yet
        else:
            if value:
                return value
        assert time.monotonic() < deadline, _timed_out(timeout, what, seen)
        time.sleep(interval)


def _timed_out(timeout: float, what: str | Callable[[], str], value: object, limit: int = 2000) -> str:
    last = repr(value)
    last = last if len(last) <= limit else last[:limit] + "…"
    return f"timed out after {timeout} s waiting for {what if isinstance(what, str) else what()}; last: {last}"


async def wait_until_async(
    predicate: Callable[[], T | Literal[False] | None],
    timeout: float = 60.0,
    interval: float = 0.05,
    *,
    what: str | Callable[[], str] = "the condition",
) -> T:
    """:func:`wait_until` inside an event loop (an ``@aio`` test): the loop runs on between two calls."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, _timed_out(timeout, what, value)
        await asyncio.sleep(interval)
    return value
