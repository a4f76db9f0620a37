"""The idle back-off of the background loops (``evaluator_host/shared/idle.py``), driven by a fake clock and by
counting: a loop that finds nothing waits twice as long each pass up to the cap, work or a wake brings it back to
its own period at once, every due time cuts the wait until a wait has passed it, a wake from another thread ends
a wait (or, before the first, is kept for it), and the cap is a bounded setting."""

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


def test_a_due_time_cuts_the_wait_until_a_wait_has_passed_it_and_passes_are_counted() -> None:
    now = [100.0]
    ticker = IdleTicker(0.2, 2.0, clock=lambda: now[0])

    def waited(seconds: float) -> None:  # a wait of that long ended (the clock moved; passed due times served)
        now[0] += seconds
        ticker.served()

    for _ in range(6):
        ticker.interval(False)
    assert ticker.interval(False) == 2.0  # resting at the cap
    ticker.due_in(0.5)  # a row put back for half a second
    assert ticker.interval(False) == pytest.approx(0.51)  # its wait ends then (plus a clock tick's margin)
    waited(0.51)
    assert ticker.interval(False) == 2.0  # the due time was served: back to the cap
    ticker.due_in(5.0)
    ticker.due_in(1.0)  # the earliest counts first
    assert ticker.interval(False) == pytest.approx(1.01)
    waited(1.01)
    waited(3.0)
    assert ticker.interval(False) == pytest.approx(1.0)  # the later one was kept: its wait ends at 5.01
    waited(1.0)
    ticker.due_in(30.0)  # later than the back-off's wait: the back-off decides, the due time stays
    assert ticker.interval(False) == 2.0
    now[0] += 29.5
    assert ticker.interval(False) == pytest.approx(0.51)
    ticker.due_in(-3.0)  # already due: only the clock tick's margin is waited
    assert ticker.interval(True) == pytest.approx(0.01)
    assert (ticker.passes, ticker.idle_passes) == (14, 13)


def test_a_wake_that_ends_a_wait_before_a_due_time_keeps_that_time() -> None:
    now = [0.0]
    ticker = IdleTicker(0.2, 2.0, clock=lambda: now[0])
    for _ in range(6):
        ticker.interval(False)  # resting at the cap
    ticker.due_in(1.5)
    assert ticker.interval(False) == pytest.approx(1.51)
    now[0] += 0.3  # a wake ended the wait early: the pass ran before the row was due
    ticker.served()
    ticker.backoff.reset()
    assert ticker.interval(False) == pytest.approx(0.2)  # its own period after the wake
    now[0] += 0.2
    ticker.served()
    for _ in range(3):
        ticker.interval(False)  # backing off again: 0.4, 0.8, 1.6 would pass the due time
    assert ticker.interval(False) == pytest.approx(1.51 - 0.5)  # but the wait still ends when the row is due


def test_a_wake_from_another_thread_before_the_first_wait_is_kept_for_it() -> None:
    async def scenario() -> IdleTicker:
        ticker = IdleTicker(3600.0, 3600.0)  # only a wake can end these waits
        woken = threading.Thread(target=ticker.wake)
        woken.start()
        woken.join()  # the loop is not known yet: nothing to call back into
        await asyncio.wait_for(ticker.wait(False), 60)  # returns at once: the wake was kept
        return ticker

    ticker = asyncio.run(scenario())
    assert ticker.passes == 1 and not ticker._event.is_set()


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
    assert not ticker._pending and not ticker._event.is_set()  # a busy loop is not made to run more often
    ticker.interval(False)
    assert ticker.backoff.backed_off
    ticker.nudge()
    assert ticker._pending and not ticker.backoff.backed_off  # looks now (the first wait returns at once), at its
    # own period again
