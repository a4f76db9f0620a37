"""The warm pool on the fake backend: a pool of its own per test, the cases it runs, the fake's handlers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from evaluator_host.sandbox.base import RawOutcome, RuntimeKey, WorkerSpec
from evaluator_host.sandbox.pool.workers import WorkerPool
from evaluator_host.settings import Settings
from evaluator_host.testing.fake import FakeBackend, Handler, LoadHook, Reply, StartHook

R1 = RuntimeKey("fam", None, 256)
R2 = RuntimeKey("fam", "fake:two", 256)
R3 = RuntimeKey("fam", "fake:three", 256)
SLOW = 5.0  # the per-case timeout where a timeout is not the behaviour under test


def spec(key: str = "a", runtime: RuntimeKey = R1) -> WorkerSpec:
    return WorkerSpec(
        key=key,
        runtime=runtime,
        runtime_id=f"rt-{runtime.location}",
        load={"code": f"# evaluator {key}", "entrypoint": "evaluate", "interface": "evaluate"},
        output_limit=1024,
        result_limit=1024,
    )


def cases(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"inputs": {"i": i}} for i in range(start, start + n)]


def at(index: int, reply: Reply) -> Handler:
    """A handler answering ``reply`` for case ``index`` and ok (value = the index) for every other."""

    def handler(_load: dict[str, Any], case: dict[str, Any]) -> Reply:
        i = case["inputs"]["i"]
        return reply if i == index else {"value": float(i)}

    return handler


def ok(_load: dict[str, Any], case: dict[str, Any]) -> Reply:
    return {"value": float(case["inputs"]["i"])}


@asynccontextmanager
async def pooled(
    handler: Handler = ok, *, load: LoadHook | None = None, start: StartHook | None = None, **overrides: Any
) -> AsyncIterator[tuple[WorkerPool, FakeBackend]]:
    """A pool on a fake backend (no spares unless asked); closed afterwards."""
    settings = Settings(data_dir=Path("/nonexistent"), **{"spare_workers": 0, **overrides})
    backend = FakeBackend(handler, load=load, start=start)
    pool = WorkerPool(backend, settings)
    try:
        yield pool, backend
    finally:
        await pool.close()
    assert backend.errors == []


async def run(pool: WorkerPool, batch: list[dict[str, Any]], s: WorkerSpec | None = None, **kw: Any) -> list[Any]:
    outcomes = await pool.run(
        s or spec(), batch, timeout_s=kw.get("timeout_s", SLOW), correct_answer_key="correct_answer"
    )
    assert len(outcomes) == len(batch)
    return outcomes


async def settle() -> None:
    """Let background tasks (spare starts, reaps) run to completion: the fake needs no real time."""
    for _ in range(20):
        await asyncio.sleep(0)


def statuses(outcomes: list[RawOutcome]) -> list[str]:
    return [o.status for o in outcomes]
