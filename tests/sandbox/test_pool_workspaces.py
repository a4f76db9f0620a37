"""The pool's workspace rules on the fake backend: a workspace's warm-worker quota, and its share
of the pool that another workspace's burst cannot take."""

from __future__ import annotations

import asyncio
from typing import Any

from evaluator_host.sandbox.base import WorkerSpec
from evaluator_host.testing.fake import Reply
from tests.support.aio import aio
from tests.support.pool import R1, cases, pooled, run, settle, statuses


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


@aio
async def test_identical_code_in_two_workspaces_never_shares_a_worker() -> None:
    async with pooled(max_workers=4) as (pool, backend):
        for _ in range(3):
            await run(pool, cases(1), spec("same", "ws_a"))
            await run(pool, cases(1), spec("same", "ws_b"))
        assert backend.started == 2
        assert {w.load["code"] for w in backend.workers if w.load} == {"# ws_a same", "# ws_b same"}


@aio
async def test_a_workspace_holds_at_most_its_max_warm_workers() -> None:
    gate, running, most = asyncio.Event(), [0], [0]

    async def handler(_load: dict[str, Any], case: dict[str, Any]) -> Reply:
        running[0] += 1
        most[0] = max(most[0], running[0])
        await gate.wait()
        running[0] -= 1
        return {"value": 1.0}

    async with pooled(handler, max_workers=8) as (pool, backend):
        pool.workspace_caps["ws_a"] = 2
        calls = [asyncio.ensure_future(run(pool, cases(1), spec(f"k{i}", "ws_a"))) for i in range(4)]
        other = asyncio.ensure_future(run(pool, cases(1), spec("k", "ws_b")))  # another workspace is not held up
        for _ in range(10):
            await settle()
        assert running[0] == 3 and backend.started == 3  # two of ws_a's keys, and ws_b's
        gate.set()
        outcomes = await asyncio.gather(*calls, other)
        assert all(statuses(o) == ["ok"] for o in outcomes)
        assert most[0] == 3
        alive_a = [w for w in backend.workers if w.alive and w.load and "ws_a" in w.load["code"]]
        assert len(alive_a) <= 2


@aio
async def test_a_burst_of_one_workspace_leaves_another_its_share_of_warm_workers() -> None:
    async with pooled(max_workers=4) as (pool, backend):
        for key in ("v1", "v2"):
            await run(pool, cases(1), spec(key, "ws_v"))  # ws_v: two warm workers, idle now
        warm = list(backend.workers)
        await asyncio.sleep(0.06)  # long idle: without workspaces they would be fair game
        for round_ in range(3):
            await asyncio.gather(*(run(pool, cases(1, round_), spec(f"w{i}", "ws_w")) for i in range(4)))
            await asyncio.sleep(0.06)
        assert all(w.alive for w in warm)  # two of four workers: ws_v's share, untouched by ws_w's burst
        await run(pool, cases(1), spec("v1", "ws_v"))
        assert warm[0].alive and len(warm[0].handled) == 2  # and still warm: no start for ws_v's next call
