"""A docker worker's ending (``sandbox/docker/worker.py``, ``DockerWorker.kill``) runs to its end when the caller
is cancelled — the container removed, the connection closed — and every later call gets the same answer; the
backend is a scripted one here (the removal held until the test lets it go), the worker and its loop are real."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import pytest

from evaluator_host.sandbox.docker.worker import DockerWorker


class HeldRemoval:
    """A backend whose removal waits until ``release`` is set."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.removed: list[str] = []

    async def remove(
        self, container_id: str, *, inspect: bool, told: Callable[[], Awaitable[bool | None]] | None = None
    ) -> tuple[int | None, bool]:
        await self.release.wait()
        self.removed.append(container_id)
        return -9, False


async def _worker(backend: HeldRemoval) -> tuple[DockerWorker, socket.socket]:
    ours, theirs = socket.socketpair()
    raw, writer = await asyncio.open_connection(sock=ours)
    return DockerWorker(backend, "container-1", raw, writer), theirs


def test_a_cancelled_callers_ending_still_removes_the_container_and_closes_the_connection() -> None:
    async def scenario() -> None:
        backend = HeldRemoval()
        worker, theirs = await _worker(backend)
        caller = asyncio.ensure_future(worker.kill())
        await asyncio.sleep(0.05)  # the ending is under way: the removal is held
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        assert backend.removed == []
        backend.release.set()
        for _ in range(100):  # nobody awaits the ending now: it finishes by itself
            if backend.removed:
                break
            await asyncio.sleep(0.01)
        assert backend.removed == ["container-1"]
        await asyncio.sleep(0)
        assert worker.writer.is_closing()
        first = await worker.kill()
        assert await worker.kill() is first and first.returncode == -9
        assert backend.removed == ["container-1"]  # removed once
        theirs.close()

    asyncio.run(scenario())


def test_concurrent_calls_share_one_ending() -> None:
    async def scenario() -> None:
        backend = HeldRemoval()
        worker, theirs = await _worker(backend)
        calls = [asyncio.ensure_future(worker.kill()) for _ in range(3)]
        await asyncio.sleep(0.02)
        backend.release.set()
        answers = await asyncio.gather(*calls)
        assert all(a is answers[0] for a in answers)
        assert backend.removed == ["container-1"]
        theirs.close()

    asyncio.run(scenario())
