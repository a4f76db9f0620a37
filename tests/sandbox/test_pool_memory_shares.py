"""Each workspace's fair share of the worker memory budget (issue 47.7), on the fake backend.

Work-conserving: a workspace alone may fill the whole budget; once another workspace within its share
waits, the memory lent is reclaimed — the first workspace's released worker is stopped for it (not kept,
nor handed to its own next call), its new workers are refused or queued first, and its burst never evicts
the warm worker of a workspace within its share. The API half (a real backend) is
tests/sandbox/test_pool_memory.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from evaluator_host.errors import Overloaded
from evaluator_host.sandbox.base import WorkerSpec
from evaluator_host.testing.fake import Reply
from tests.support.aio import aio
from tests.support.pool import R1, cases, pooled, run, settle, statuses

BUDGET = 1024  # MiB: four workers of R1's 256


def spec(key: str, workspace: str) -> WorkerSpec:
    return WorkerSpec(
        key=f"{workspace}/{key}",
        runtime=R1,
        runtime_id="rt",
        load={"code": f"# {workspace} {key}", "entrypoint": "evaluate", "interface": "evaluate"},
        output_limit=1024,
        result_limit=1024,
        workspace=workspace,
    )


async def until(condition: Callable[[], bool]) -> None:
    """Wait for ``condition`` (the fake backend needs no real time: a few loop turns at most)."""
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the condition never held")


def gated(gates: dict[int, asyncio.Event], running: list[int]) -> Any:
    """A handler that holds case ``i`` until ``gates[i]`` is set (other cases answer at once)."""

    async def handler(_load: dict[str, Any], case: dict[str, Any]) -> Reply:
        i = case["inputs"]["i"]
        running[0] += 1
        try:
            if i in gates:
                await gates[i].wait()
        finally:
            running[0] -= 1
        return {"value": float(i)}

    return handler


@aio
async def test_a_workspace_filling_the_memory_budget_gives_way_to_another_within_its_share() -> None:
    gates, running = {i: asyncio.Event() for i in range(5)}, [0]
    async with pooled(gated(gates, running), max_workers=8, max_worker_memory_mb=BUDGET) as (pool, _backend):
        # work-conserving: alone, ws_a's four long calls take the whole budget
        a = [asyncio.ensure_future(run(pool, cases(1, i), spec(f"k{i}", "ws_a"))) for i in range(4)]
        await until(lambda: running[0] == 4)
        assert pool.live_mb() == BUDGET
        excess = asyncio.ensure_future(run(pool, cases(1, 4), spec("k0", "ws_a")))  # its key's worker is busy
        # ws_b's call is not refused: it waits for the memory ws_a holds beyond its share
        b = asyncio.ensure_future(run(pool, cases(1, 100), spec("k", "ws_b")))
        for _ in range(10):
            await settle()
        assert not b.done(), b.exception() if b.done() else None
        # ws_a's new key is the one refused while ws_b waits (ws_a is over its share)
        with pytest.raises(Overloaded):
            await run(pool, cases(1, 5), spec("k5", "ws_a"))
        # one of ws_a's calls ends: its worker is stopped for ws_b, not handed to ws_a's waiting call
        gates[1].set()
        assert statuses(await asyncio.wait_for(b, 10)) == ["ok"]
        assert not excess.done() and pool.live_mb() <= BUDGET
        for gate in gates.values():
            gate.set()
        outcomes = await asyncio.gather(*a, excess)
        assert all(statuses(o) == ["ok"] for o in outcomes)
        assert pool.live_mb() <= BUDGET


@aio
async def test_a_workspace_over_its_memory_share_never_evicts_the_warm_worker_of_one_within_it() -> None:
    gates, running = {i: asyncio.Event() for i in range(4)}, [0]
    async with pooled(gated(gates, running), max_workers=8, max_worker_memory_mb=BUDGET) as (pool, backend):
        await run(pool, cases(1, 100), spec("k", "ws_b"))  # ws_b: one warm worker, idle
        warm = backend.workers[0]
        a = [asyncio.ensure_future(run(pool, cases(1, i), spec(f"k{i}", "ws_a"))) for i in range(3)]
        await until(lambda: running[0] == 3)
        assert pool.live_mb() == BUDGET  # ws_a borrows what ws_b does not use
        with pytest.raises(Overloaded):  # a fourth of ws_a's would take ws_b's warm worker: refused instead
            await run(pool, cases(1, 3), spec("k3", "ws_a"))
        assert warm.alive
        await run(pool, cases(1, 101), spec("k", "ws_b"))
        assert len(warm.handled) == 2  # still warm: ws_b's next call started nothing
        for gate in gates.values():
            gate.set()
        assert all(statuses(o) == ["ok"] for o in await asyncio.gather(*a))


@aio
async def test_idle_workers_of_a_workspace_that_filled_the_budget_are_evicted_for_another() -> None:
    async with pooled(max_workers=8, max_worker_memory_mb=BUDGET) as (pool, backend):
        for i in range(4):
            await run(pool, cases(1, i), spec(f"k{i}", "ws_a"))  # the whole budget, idle now
        assert pool.live_mb() == BUDGET
        assert statuses(await run(pool, cases(1, 9), spec("k", "ws_b"))) == ["ok"]
        assert pool.live_mb() <= BUDGET and backend.started == 5
