"""``tests.support.wait``: the suite's one polling loop answers what it waited for, or fails saying what."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.wait import wait_until, wait_until_async


def test_it_answers_the_first_truthy_value() -> None:
    answers = iter([None, 0, [], {"done": True}])
    assert wait_until(lambda: next(answers), 5, 0.001) == {"done": True}


def test_it_fails_naming_what_and_the_last_value_seen() -> None:
    with pytest.raises(AssertionError, match=r"after 0.05 s waiting for the job; last: \[\]"):
        wait_until(lambda: [], 0.05, 0.01, what="the job")
    seen = {"status": "running"}
    with pytest.raises(AssertionError, match="waiting for the job to finish .running.; last: False"):
        wait_until(lambda: seen["status"] == "done", 0.05, 0.01, what=lambda: f"the job to finish ({seen['status']})")


def test_ignored_exceptions_are_not_yet_and_others_propagate() -> None:
    calls: list[int] = []

    def starting() -> bool:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionRefusedError("not listening yet")
        return True

    assert wait_until(starting, 5, 0.001, ignoring=(ConnectionRefusedError,)) is True

    def refused() -> bool:
        raise ConnectionRefusedError("never listening")

    with pytest.raises(AssertionError, match="last: ConnectionRefusedError"):
        wait_until(refused, 0.05, 0.01, ignoring=(ConnectionRefusedError,))
    with pytest.raises(ZeroDivisionError):
        wait_until(lambda: 1 / 0, 5, 0.001, ignoring=(ConnectionRefusedError,))


def test_the_async_form_lets_the_loop_run_between_calls() -> None:
    async def main() -> str:
        flag: list[str] = []
        asyncio.get_running_loop().call_later(0.01, flag.append, "set")
        return (await wait_until_async(lambda: flag, 5, 0.001))[0]

    assert asyncio.run(main()) == "set"
