"""Build threads are shared fairly between workspaces (issue 28, item 7)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from evaluator_host.errors import BuildError
from evaluator_host.sandbox.base import Runtime
from evaluator_host.sandbox.process.runtimes import RuntimeBuilder
from tests.support.service import make_settings
from tests.support.wait import wait_until_async


def test_a_workspace_behind_anothers_slow_builds_gets_the_next_free_build_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: one workspace's slow builds (a trickling index) held every other workspace's first
    build for over 120 s — builds queued first in, first out behind all of them. Now a freed build
    thread goes to a workspace under its share (``max_builds_per_workspace``) before the busy
    workspace's next build, so the other workspace waits for one build's end (each bounded by its own
    ``build_timeout_s``), not for all of them."""
    gates = {name: threading.Event() for name in ("a1", "a2", "a3", "a4", "b1")}
    started: list[str] = []

    def gated_build(self: RuntimeBuilder, rid: str, language: str, pins: dict[str, str]) -> Any:
        name = next(iter(pins))
        started.append(name)
        if not gates[name].wait(60):  # an install that lasts as long as the test wants (bounded)
            raise BuildError(f"{name} held too long", runtime_id=rid, output="")
        return Runtime(rid, language, pins, None, [f"{name}==1.0"])

    monkeypatch.setattr(RuntimeBuilder, "build", gated_build)
    monkeypatch.setattr(RuntimeBuilder, "find", lambda self, rid, language, pins: None)
    builder = RuntimeBuilder(make_settings(tmp_path, max_concurrent_builds=2, max_builds_per_workspace=1))

    async def scenario() -> list[str]:
        events: list[str] = []

        async def build(name: str, workspace: str) -> None:
            await builder.ensure("python", {name: "1.0"}, workspace)
            events.append(f"{name} done")

        async def until(condition: Any) -> None:
            await wait_until_async(condition, 60, 0.1, what=lambda: f"the builds (started {started}, events {events})")

        tasks = [asyncio.create_task(build(n, "ws_a")) for n in ("a1", "a2", "a3", "a4")]
        await until(lambda: len(started) == 2)  # a single tenant still uses both threads
        assert sorted(started) == ["a1", "a2"], started  # (in either order: two threads)
        tasks.append(asyncio.create_task(build("b1", "ws_b")))
        await until(lambda: builder.waiting_builds() == {"ws_a": 2, "ws_b": 1})  # b1 queued behind a3, a4
        events.append(f"{started[0]} released")
        gates[started[0]].set()  # one of ws_a's builds ends: its thread goes to ws_b, not to a3
        try:
            await until(lambda: len(started) == 3)
            events.append(f"{started[2]} started")
        finally:
            for gate in gates.values():
                gate.set()
            await asyncio.gather(*tasks, return_exceptions=True)
        return events

    events = asyncio.run(scenario())
    first = events[0].split()[0]
    assert events[:3] == [f"{first} released", f"{first} done", "b1 started"], events


def test_one_workspace_alone_still_uses_every_build_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The share is work-conserving: with no other workspace waiting, one workspace's builds take every
    thread (``max_concurrent_builds``), so a single-tenant service builds as fast as before."""
    entered = threading.Semaphore(0)
    gate = threading.Event()

    def gated_build(self: RuntimeBuilder, rid: str, language: str, pins: dict[str, str]) -> Any:
        entered.release()
        gate.wait(60)
        return Runtime(rid, language, pins, None, [])

    monkeypatch.setattr(RuntimeBuilder, "build", gated_build)
    monkeypatch.setattr(RuntimeBuilder, "find", lambda self, rid, language, pins: None)
    builder = RuntimeBuilder(make_settings(tmp_path, max_concurrent_builds=3, max_builds_per_workspace=1))

    async def scenario() -> None:
        tasks = [asyncio.create_task(builder.ensure("python", {f"p{i}": "1.0"}, "ws_a")) for i in range(3)]
        try:
            for _ in range(3):
                assert await asyncio.to_thread(entered.acquire, True, 30)
        finally:
            gate.set()
            await asyncio.gather(*tasks)

    asyncio.run(scenario())
    assert builder.builds == 3
