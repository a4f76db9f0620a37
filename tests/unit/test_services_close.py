"""A service asked to stop always stops: a part that never does is logged by name and left behind."""

from __future__ import annotations

import asyncio
import logging

import pytest

from evaluator_host import services


def test_a_part_that_never_stops_is_logged_and_left_behind(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(services, "CLOSE_STEP_S", 0.05)
    stopped: list[str] = []

    async def never() -> None:
        await asyncio.Event().wait()

    async def quick() -> None:
        stopped.append("quick")

    async def close() -> None:
        await services._bounded("the stuck part", never())
        await services._bounded("the next part", quick())

    with caplog.at_level(logging.ERROR, logger="evaluator_host.services"):
        asyncio.run(asyncio.wait_for(close(), 10))
    assert stopped == ["quick"]  # the parts after it still stop
    assert "the stuck part did not stop within 0 s" in caplog.text
