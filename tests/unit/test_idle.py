"""The idle back-off of the background loops (``evaluator_host/shared/idle.py``), driven by a fake clock and by
counting: a loop that finds nothing waits twice as long each pass up to the cap, work or a wake brings it back to
its own period at once, a due time cuts the wait, a wake from another thread ends a wait, and the cap is a
bounded setting."""

from __future__ import annotations

import asyncio
import threading

import pytest
from pydantic import ValidationError

from evaluator_host.settings import Settings
from evaluator_host.shared.idle import Backoff, IdleTicker


def test_an_idle_loop_doubles_its_wait_up_to_the_cap_and_work_resets_it() -> None:
    backoff = Backoff(0.1, 2.0)
    idle = [backoff.after(False) for _ in range(8)]
    assert idle == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0])
    assert backoff.after(True) == 0.1  # found work: its own period again
    assert backoff.after(False) == 0.1  # the first idle wait is the old fixed period
    assert backoff.after(False) == pytest.approx(0.2)
    backoff.reset()  # a wake
    assert backoff.after(False) == 0.1


def test_a_cap_below_the_loops_own_period_never_shortens_it() -> None:
    backoff = Backoff(5.0, 2.0)
    assert [backoff.after(False) for _ in range(3)] == [5.0, 5.0, 5.0]
    assert Backoff(3600.0, 2.0).after(True) == 3600.0  # a test's "never on its own" period stays


def test_a_due_time_cuts_the_wait_once_and_passes_are_counted() -> None:
    now = [100.0]
    ticker = IdleTicker(0.2, 2.0, clock=lambda: now[0])
    for _ in range(6):
        ticker.interval(False)
    assert ticker.interval(False) == 2.0  # resting at the cap
    ticker.due_in(0.5)  # a row put back for half a second
    assert ticker.interval(False) == pytest.approx(0.51)  # its wait ends then (plus a clock tick's margin)
    assert ticker.interval(False) == 2.0  # the due time was used: back to the cap
    ticker.due_in(5.0)
    ticker.due_in(1.0)  # the earliest counts
    assert ticker.interval(False) == pytest.approx(1.01)
    ticker.due_in(30.0)  # later than the back-off's wait: the back-off decides, the due time stays
    assert ticker.interval(False) == 2.0
    now[0] += 29.5
    assert ticker.interval(False) == pytest.approx(0.51)
    ticker.due_in(-3.0)  # already due: only the clock tick's margin is waited
    assert ticker.interval(True) == pytest.approx(0.01)
    assert (ticker.passes, ticker.idle_passes) == (13, 12)


def test_a_wake_from_another_thread_ends_a_long_wait_and_resets_the_back_off() -> None:
    async def scenario() -> tuple[IdleTicker, float]:
        ticker = IdleTicker(3600.0, 3600.0)  # only a wake can end these waits
        waiting = asyncio.ensure_future(ticker.wait(False))
        await asyncio.sleep(0)  # the wait has started (its loop is known)
        threading.Thread(target=ticker.wake).start()
        await asyncio.wait_for(waiting, 60)  # ends at the wake, not after an hour
        return ticker, ticker.backoff.after(False)

    ticker, next_wait = asyncio.run(scenario())
    assert ticker.passes == 1 and next_wait == 3600.0


def test_a_wake_during_a_pass_is_not_lost() -> None:
    async def scenario() -> None:
        ticker = IdleTicker(3600.0, 3600.0)
        ticker.wake()  # came while the pass ran (before its wait)
        await asyncio.wait_for(ticker.wait(False), 60)  # returns at once
        assert not ticker._event.is_set()  # consumed: the next wait waits

    asyncio.run(scenario())


def test_idle_poll_max_s_defaults_to_two_seconds_and_is_bounded() -> None:
    assert Settings().idle_poll_max_s == 2.0
    assert Settings(idle_poll_max_s=60.0).idle_poll_max_s == 60.0
    for wrong in (0.0, -1.0, 60.5):
        with pytest.raises(ValidationError):
            Settings(idle_poll_max_s=wrong)


def test_a_nudge_wakes_a_loop_that_backed_off_and_leaves_a_busy_one_alone() -> None:
    ticker = IdleTicker(1.0, 2.0)
    ticker.interval(True)  # busy: at its own period
    ticker.nudge()
    assert not ticker._event.is_set()  # a frequent event does not make a busy loop run more often
    ticker.interval(False)
    assert ticker.backoff.backed_off
    ticker.nudge()
    assert ticker._event.is_set() and not ticker.backoff.backed_off  # looks now, at its own period again
