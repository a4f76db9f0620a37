"""An exited container's OOM flag, waited for on the event loop (``sandbox/docker/engine.py``, ``oom_flag_settled``).

The engine's ``OOMKilled`` flag can lag a container's exit on a loaded host (its cgroup, with the kernel's count,
is gone by then): a memory bomb was answered "error" 1 time in 120. The lag cannot be forced on a real engine, so
these tests drive the waiting with scripted reads of ``(exit code, OOM-killed)`` — what the engine would answer at
each read — and prove what is waited for, for how long, and what stands when the container goes meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

from evaluator_host.sandbox.docker.engine import NotFound, oom_flag_settled

SIGKILLED = 137


def _reads(
    *answers: tuple[int, bool] | type[Exception],
) -> tuple[Callable[[], Coroutine[Any, Any, tuple[int, bool]]], list[float]]:
    """A ``read`` that answers ``answers`` in turn (the last one from then on), and the times it was called."""
    calls: list[float] = []

    async def read() -> tuple[int, bool]:
        calls.append(time.monotonic())
        answer = answers[min(len(calls) - 1, len(answers) - 1)]
        if isinstance(answer, type):
            raise answer("gone")
        return answer

    return read, calls


def test_a_flag_that_comes_late_is_waited_for() -> None:
    read, calls = _reads((SIGKILLED, False), (SIGKILLED, True))
    assert asyncio.run(oom_flag_settled((SIGKILLED, False), read)) == (SIGKILLED, True)
    assert len(calls) == 2  # read again until the flag came, not after


def test_a_sigkill_never_flagged_stays_a_sigkill_and_the_wait_is_bounded() -> None:
    read, calls = _reads((SIGKILLED, False))
    assert asyncio.run(oom_flag_settled((SIGKILLED, False), read, wait_s=0.3)) == (SIGKILLED, False)
    # pauses of 20, 40, 80 and (the rest of the deadline) 160 ms spend the 0.3 s: four reads, backing off rather
    # than polling (three when a loaded machine stretched the first pauses: the deadline is the clock's)
    assert 3 <= len(calls) <= 4
    assert calls[-1] - calls[0] >= 0.28 - 0.01  # the whole wait was given (the first pause precedes calls[0])


def test_other_exits_and_flagged_ones_are_not_read_again() -> None:
    for first in ((0, False), (1, False), (SIGKILLED, True), (-9, False)):
        read, calls = _reads((SIGKILLED, True))
        assert asyncio.run(oom_flag_settled(first, read)) == first
        assert calls == []


def test_a_container_gone_meanwhile_keeps_what_was_read() -> None:
    read, calls = _reads((SIGKILLED, False), NotFound)
    assert asyncio.run(oom_flag_settled((SIGKILLED, False), read)) == (SIGKILLED, False)
    assert len(calls) == 2


def test_the_wait_holds_no_thread_the_loop_runs_other_work_meanwhile() -> None:
    read, _ = _reads((SIGKILLED, False))
    ticks = 0

    async def both() -> tuple[int, bool]:
        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.ensure_future(tick())
        try:
            return await oom_flag_settled((SIGKILLED, False), read, wait_s=0.2)
        finally:
            ticker.cancel()

    assert asyncio.run(both()) == (SIGKILLED, False)
    assert ticks >= 3  # the loop kept running other tasks through the pauses


def _told(answer: bool | None) -> tuple[Callable[[], Coroutine[Any, Any, bool | None]], list[float]]:
    asked: list[float] = []

    async def told() -> bool | None:
        asked.append(time.monotonic())
        return answer

    return told, asked


def test_the_services_own_evidence_of_an_oom_ends_it_without_waiting_for_the_flag() -> None:
    read, calls = _reads((SIGKILLED, False))
    told, asked = _told(True)
    assert asyncio.run(oom_flag_settled((SIGKILLED, False), read, told=told)) == (SIGKILLED, True)
    assert len(asked) == 1 and calls == []


def test_own_evidence_of_no_oom_still_waits_for_the_flag_which_wins() -> None:
    """A watch that says no (or cannot tell) is not the last word: the engine's flag is still waited for."""
    for answer in (False, None):
        read, calls = _reads((SIGKILLED, False), (SIGKILLED, True))
        told, asked = _told(answer)
        assert asyncio.run(oom_flag_settled((SIGKILLED, False), read, told=told)) == (SIGKILLED, True)
        assert len(asked) == 1 and len(calls) == 2


def test_own_evidence_is_asked_only_for_an_unflagged_sigkill() -> None:
    for first in ((0, False), (1, False), (SIGKILLED, True)):
        read, _ = _reads((SIGKILLED, True))
        told, asked = _told(True)
        assert asyncio.run(oom_flag_settled(first, read, told=told)) == first
        assert asked == []
