"""The warm pool's rules on the fake backend: fast and deterministic (no process, no sleep).

Each test drives the real :class:`WorkerPool` against :class:`FakeBackend` workers whose
answers a handler decides, then asserts on what the backend recorded (which worker was
started, bound, sent which case, killed). Only the timeout test waits, and only for its
own 50 ms timeout.
"""

from __future__ import annotations

import ast
import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from evaluator_host.errors import Overloaded, SandboxError
from evaluator_host.sandbox.base import RuntimeKey
from evaluator_host.sandbox.pool.workers import WorkerPool
from evaluator_host.testing.fake import (
    DIE,
    FLOOD,
    HANG,
    MEMORY,
    OOM,
    Reply,
)
from tests.support.aio import aio
from tests.support.pool import R1, R2, R3, at, cases, pooled, run, settle, spec, statuses

# -- reuse -------------------------------------------------------------------------------


@aio
async def test_a_warm_worker_is_reused_and_cases_go_in_batches() -> None:
    async with pooled(batch_size=2) as (pool, backend):
        for n in range(3):
            outcomes = await run(pool, cases(5, 10 * n))
            assert [o.value for o in outcomes] == [float(10 * n + i) for i in range(5)]
        assert backend.started == 1
        (worker,) = backend.workers
        assert worker.load is not None and worker.load["op"] == "load" and worker.load["code"] == "# evaluator a"
        assert [len(r) for r in worker.runs] == [2, 2, 1] * 3
        assert [e for e, *_ in backend.events].count("load") == 1  # bound once
        assert pool.stats().workers == 1 and pool.stats().idle == 1


@aio
async def test_the_builder_hears_of_each_workers_first_answered_batch_and_not_of_later_ones() -> None:
    """What a new runtime's background bytecode compile waits for (sandbox/process/bytecode.py): the pool tells
    its builder when a worker has answered its first batch (the evaluator loaded, its imports done), once per
    worker."""
    async with pooled() as (pool, backend):
        await run(pool, cases(1), spec("a"))
        assert backend.builder.answers == [spec("a").runtime_id]
        await run(pool, cases(1, 1), spec("a"))  # the warm worker again: said once already
        await run(pool, cases(1), spec("b", R2))
        assert backend.builder.answers == [spec("a").runtime_id, spec("b", R2).runtime_id]


@aio
async def test_workers_are_never_shared_across_keys() -> None:
    async with pooled() as (pool, backend):
        await run(pool, cases(1), spec("a"))
        await run(pool, cases(1, 1), spec("b"))
        await run(pool, cases(1, 2), spec("a"))
        a, b = backend.workers
        assert a.handled == [cases(1)[0], cases(1, 2)[0]] and b.handled == cases(1, 1)
        assert a.load is not None and b.load is not None
        assert (a.load["code"], b.load["code"]) == ("# evaluator a", "# evaluator b")


@aio
async def test_a_worker_is_discarded_after_max_uses() -> None:
    async with pooled(max_uses=3) as (pool, backend):
        for i in range(4):
            await run(pool, cases(1, i))
        first, second = backend.workers
        assert len(first.handled) == 3 and first.killed
        assert second.handled == cases(1, 3) and second.alive


# -- the bound: eviction and waiting ----------------------------------------------------


@aio
async def test_when_full_the_least_recently_used_idle_worker_of_another_key_is_evicted() -> None:
    async with pooled(max_workers=2) as (pool, backend):
        await run(pool, cases(1), spec("a"))
        await run(pool, cases(1), spec("b"))
        await run(pool, cases(1), spec("a"))  # b is now the least recently used
        await run(pool, cases(1), spec("c"))
        a, b, c = backend.workers
        assert b.killed and a.alive and c.alive
        assert pool.stats().workers == 2
        await run(pool, cases(1, 1), spec("a"))  # a kept its warm worker
        assert backend.started == 3


async def slow_start(_runtime: RuntimeKey) -> None:
    await asyncio.sleep(0.1)  # about a container start's half: ≫ a fast call, even on a loaded machine


async def slow_import(_load: dict[str, Any]) -> None:
    await asyncio.sleep(0.2)  # numpy's import: a call comes while the worker's start (its load) runs


@aio
async def test_a_burst_of_fast_calls_queues_on_the_warm_worker_instead_of_starting_more() -> None:
    async with pooled(start=slow_start, max_workers=8) as (pool, backend):
        await run(pool, cases(1), spec("a"))  # the pool learns what a start and a call of "a" cost
        await run(pool, cases(1), spec("a"))
        await asyncio.gather(*(run(pool, cases(1, i), spec("a")) for i in range(20)))
        assert backend.started == 1  # twenty calls, one warm worker: waiting beat starting


@aio
async def test_slow_calls_get_more_workers_when_waiting_would_cost_more_than_a_start() -> None:
    async def slow(_load: dict[str, Any], case: dict[str, Any]) -> Reply:
        await asyncio.sleep(0.05)
        return {"value": 1.0}

    async with pooled(slow, max_workers=8) as (pool, backend):
        await run(pool, cases(1), spec("a"))
        await asyncio.gather(*(run(pool, cases(1, i), spec("a")) for i in range(4)))
        assert backend.started >= 3  # a start (instant here) beats queueing behind a 50 ms call


@aio
async def test_a_burst_of_one_key_evicts_from_the_key_holding_most_not_everyone_s_last_worker() -> None:
    gate = asyncio.Event()

    async def hold(_load: dict[str, Any], case: dict[str, Any]) -> Reply:
        if case["inputs"].get("hold"):
            await gate.wait()
        return {"value": 1.0}

    async with pooled(hold, max_workers=3) as (pool, backend):
        held = [{"inputs": {"hold": True}}]
        both = asyncio.gather(run(pool, held, spec("a")), run(pool, held, spec("a")))  # "a" gets two workers
        await settle()
        await run(pool, cases(1), spec("b"))  # "b" gets the third
        gate.set()
        await both  # now idle: a, a, b
        await run(pool, cases(1), spec("c"))  # full: c takes one of a's, not b's only one
        a1, a2, b, c = backend.workers
        assert b.alive and (a1.killed or a2.killed) and not (a1.killed and a2.killed)


@aio
async def test_a_call_during_its_keys_pre_warm_waits_for_that_worker_instead_of_starting_another() -> None:
    """A saved evaluator's pre-warm starts its worker; a call arriving before that start ends waits for it (the
    start is paid already, and nobody else is behind it) rather than starting a second worker for the key."""

    async with pooled(load=slow_import) as (pool, backend):
        warming = asyncio.ensure_future(pool.prewarm(spec()))
        await settle()
        assert pool.leasing.holdings.starting == {"a": 1}
        assert statuses(await run(pool, cases(2))) == ["ok", "ok"]
        await warming
        assert backend.started == 1 and pool.stats().workers == 1
        (worker,) = backend.workers
        assert worker.handled == cases(2)


@aio
async def test_a_call_waiting_for_a_pre_warm_is_not_refused_by_its_admission_bound() -> None:
    """The admission bound (``admission_wait_factor`` × ``timeout_s``) refuses calls stuck behind slow calls of
    their key; a pre-warm's start is what the call would have paid starting a worker itself, so waiting for it is
    not bound: an evaluator with a 50 ms timeout whose imports take 300 ms is answered, as it was before calls
    waited for pre-warms."""

    async def slow_import(_load: dict[str, Any]) -> None:
        await asyncio.sleep(0.3)

    async with pooled(load=slow_import) as (pool, backend):
        warming = asyncio.ensure_future(pool.prewarm(spec()))
        await settle()
        outcomes = await pool.run(
            spec(), cases(1), timeout_s=0.05, correct_answer_key="correct_answer", interactive=True
        )
        await warming
        assert statuses(outcomes) == ["ok"] and backend.started == 1


@aio
async def test_a_second_call_during_a_pre_warm_with_one_waiting_already_starts_its_own() -> None:
    """The pre-warm's worker goes to one caller; a second caller waiting behind it would wait for a whole
    lease too, so the usual rule (start when waiting costs more) decides for it."""

    async with pooled(load=slow_import) as (pool, backend):
        warming = asyncio.ensure_future(pool.prewarm(spec()))
        await settle()
        first, second = await asyncio.gather(run(pool, cases(1)), run(pool, cases(1, 1)))
        await warming
        assert statuses(first + second) == ["ok", "ok"]
        assert backend.started == 2  # nothing known of the key's lease time yet: starting is the rule


@aio
async def test_under_a_budget_of_one_worker_a_call_during_another_keys_pre_warm_waits_for_it_to_go_idle() -> None:
    """A service with memory for one worker, a saved evaluator's pre-warm starting: a call of another evaluator found
    the budget held by that start and no idle worker to evict, and was answered 503 ``Overloaded`` — while the
    pre-warmed worker was a moment from idle. It now waits for that start to end, evicts the idle worker and is
    answered; nothing else is started."""

    async with pooled(load=slow_import, max_worker_memory_mb=R1.memory_mb) as (pool, backend):
        warming = asyncio.ensure_future(pool.prewarm(spec("a")))
        await settle()
        assert pool.leasing.holdings.starting == {"a": 1}
        assert statuses(await run(pool, cases(1), spec("b"))) == ["ok"]
        await warming
        a, b = backend.workers
        assert a.killed and b.handled == cases(1) and backend.started == 2


@aio
async def test_a_call_refused_for_memory_does_not_wait_for_a_start_that_another_call_will_hold() -> None:
    """Only a pre-warm's start is waited for (its worker goes idle at once): a worker starting for another
    evaluator's call will be busy for that call, so a call that does not fit is refused at once, as before."""
    gate = asyncio.Event()

    async def hold(_load: dict[str, Any], case: dict[str, Any]) -> Reply:
        if case["inputs"].get("hold"):
            await gate.wait()
        return {"value": 1.0}

    async with pooled(hold, load=slow_import, max_worker_memory_mb=R1.memory_mb) as (pool, backend):
        busy = asyncio.ensure_future(run(pool, [{"inputs": {"hold": True}}], spec("a")))
        await settle()
        assert pool.leasing.holdings.starting == {"a": 1} and pool.leasing.holdings.warming == {}
        with pytest.raises(Overloaded):
            await run(pool, cases(1), spec("b"))
        gate.set()
        assert statuses(await busy) == ["ok"]


@aio
async def test_a_call_refused_for_memory_does_not_wait_for_a_pre_warm_another_call_already_waits_for() -> None:
    """A pre-warm whose worker a caller of its own key waits for goes to that caller, not idle: a call of another
    evaluator that does not fit is refused at once, as before."""

    async with pooled(load=slow_import, max_worker_memory_mb=R1.memory_mb) as (pool, backend):
        warming = asyncio.ensure_future(pool.prewarm(spec("a")))
        await settle()
        first = asyncio.ensure_future(run(pool, cases(1), spec("a")))  # waits for the pre-warm's worker
        await settle()
        assert pool.leasing.holdings.waiting == {"a": 1} and pool.leasing.holdings.starting == {"a": 1}
        with pytest.raises(Overloaded):
            await run(pool, cases(1), spec("b"))
        assert statuses(await first) == ["ok"]
        await warming


@aio
async def test_a_key_whose_calls_hang_does_not_take_the_pool_from_the_others() -> None:
    def handler(load: dict[str, Any], case: dict[str, Any]) -> Reply:
        return HANG if "bad" in load["code"] else {"value": 1.0}

    async with pooled(handler, max_workers=4) as (pool, backend):
        good = [spec(f"good-{i}") for i in range(2)]
        for s in good:
            await run(pool, cases(1), s)  # each good key has its warm worker
        bad = [asyncio.ensure_future(run(pool, cases(1, i), spec("bad"), timeout_s=0.2)) for i in range(12)]
        await settle()
        served = await asyncio.gather(*(run(pool, cases(1), s) for s in good for _ in range(10)))
        assert all(statuses(o) == ["ok"] for o in served)  # every good call, while twelve bad ones hang
        assert {statuses(o)[0] for o in await asyncio.gather(*bad)} == {"timeout"}
        first, second = backend.workers[:2]  # the good keys' warm workers: never evicted for the bad one
        assert first.alive and second.alive and len(first.handled) == len(second.handled) == 11


@aio
async def test_when_full_and_nothing_is_idle_the_caller_waits() -> None:
    gate, holding = asyncio.Event(), asyncio.Event()

    async def handler(_load: dict[str, Any], case: dict[str, Any]) -> Reply:
        if case["inputs"].get("hold"):
            holding.set()
            await gate.wait()
        return {"value": 1.0}

    async with pooled(handler, max_workers=1) as (pool, backend):
        first = asyncio.ensure_future(run(pool, [{"inputs": {"hold": True}}], spec("a")))
        await holding.wait()
        second = asyncio.ensure_future(run(pool, cases(1), spec("b")))
        await settle()
        assert not second.done() and backend.started == 1  # b waits for a's worker to be released
        gate.set()
        assert statuses(await first) == statuses(await second) == ["ok"]
        a, b = backend.workers
        assert a.killed and b.alive  # a's idle worker was evicted for b
        assert pool.stats().workers == 1


# -- spares ------------------------------------------------------------------------------


@aio
async def test_a_bound_worker_comes_from_a_spare_which_is_refilled() -> None:
    async with pooled(spare_workers=1) as (pool, backend):
        pool.warm(R1)
        await settle()
        assert pool.stats().spares == 1 and backend.started == 1
        spare = backend.workers[0]
        assert spare.load is None  # unbound
        assert statuses(await run(pool, cases(2))) == ["ok", "ok"]
        assert spare.handled == cases(2) and spare.load is not None  # the spare was bound and served
        assert pool.stats().started == 0  # nothing was started on the request path
        await settle()
        assert pool.stats().spares == 1 and backend.started == 2 and backend.workers[1].load is None


@aio
async def test_a_burst_of_new_revisions_keeps_more_spares_starting_then_they_go() -> None:
    async with pooled(spare_workers=1, max_workers=16) as (pool, backend):
        pool.warm(R1)
        await settle()
        for i in range(8):  # never-seen revisions back to back
            await run(pool, cases(1), spec(f"burst-{i}"))
            await settle()
        assert pool.stats().spares == 1 + 7  # the setting, plus one per recent take but the first
        assert pool.stats().started == 0  # every bind found a spare
        await pool.sweep(time.monotonic() + 11)  # the burst is over
        assert pool.stats().spares == 1


@aio
async def test_the_spares_a_burst_adds_are_capped_at_half_of_max_workers() -> None:
    async with pooled(spare_workers=1, max_workers=8) as (pool, backend):
        pool.warm(R1)
        await settle()
        for i in range(12):
            await run(pool, cases(1), spec(f"burst-{i}"))
            await settle()
        assert pool.stats().spares == 1 + 4


@aio
async def test_a_frozen_spare_is_replaced_by_a_fresh_worker_and_its_cases_run() -> None:
    async with pooled(spare_workers=1, worker_ack_timeout_s=0.05) as (pool, backend):  # production: 15 s
        pool.warm(R1)
        await settle()
        frozen = backend.workers[0]
        frozen.pause()  # a paused container / a SIGSTOPped process, waiting as a spare
        outcomes = await run(pool, cases(3))
        assert statuses(outcomes) == ["ok", "ok", "ok"]  # no case pays for the frozen spare
        assert frozen.killed and frozen.handled == []
        assert [w.handled for w in backend.workers if w is not frozen and w.handled] == [cases(3)]


@aio
async def test_a_worker_slow_to_load_its_code_is_not_mistaken_for_a_frozen_one() -> None:
    async def slow_import(_load: dict[str, Any]) -> None:
        await asyncio.sleep(0.3)  # the user's module takes its time; the worker said "loading" at once

    async with pooled(load=slow_import, worker_ack_timeout_s=0.05) as (pool, backend):
        assert statuses(await run(pool, cases(2))) == ["ok", "ok"]
        assert backend.started == 1 and not backend.workers[0].killed


@aio
async def test_a_key_whose_workers_keep_dying_takes_spares_without_growing_the_burst_stock() -> None:
    def handler(load: dict[str, Any], case: dict[str, Any]) -> Reply:
        return DIE if "crash" in load["code"] else {"value": 1.0}

    async with pooled(handler, spare_workers=1, max_workers=8) as (pool, backend):
        pool.warm(R1)
        await settle()
        for _ in range(12):  # every call kills its worker: the key is failing after the first few
            assert statuses(await run(pool, cases(1), spec("crash"))) == ["error"]
            await settle()
        assert pool.failing("crash")
        # only its first takes (before it counted as failing) were burst demand; its replacements
        # were not, so the stock stays near the setting instead of 1 + max_workers // 2 starting
        assert pool.stats().spares <= 2
        before = backend.started
        for i in range(3):  # a burst of healthy never-seen revisions still grows it
            await run(pool, cases(1), spec(f"burst-{i}"))
            await settle()
        assert pool.stats().spares > 1 and backend.started > before


@aio
async def test_a_bind_that_finds_no_spare_takes_the_first_one_that_finishes_starting() -> None:
    async with pooled(spare_workers=1, max_workers=16) as (pool, backend):
        pool.warm(R1)  # starting, not started yet: the bind waits for it instead of starting its own
        assert statuses(await run(pool, cases(1), spec("first"))) == ["ok"]
        assert pool.stats().started == 0  # nothing was started on the request path
        assert backend.workers[0].load is not None  # the spare that was starting was bound


@aio
async def test_under_a_budget_of_one_worker_a_bind_takes_the_spare_still_starting_instead_of_starting_another() -> None:
    """A service with room for one worker warms its spare at start. A bind arriving while that spare was still
    starting was not admitted (the budget counted the spare, and the start asked 256 MiB more): it waited, reaped
    the spare once started, and started another. A start that takes a spare needs no more memory: the bind gets
    it, nothing else is started."""
    async with pooled(spare_workers=1, max_workers=16, max_worker_memory_mb=256) as (pool, backend):
        pool.warm(R1)  # the spare's memory counted, the worker not started yet
        assert statuses(await run(pool, cases(1), spec("first"))) == ["ok"]
        assert backend.started == 1 and pool.stats().started == 0  # the spare, bound; none of its own
        assert backend.workers[0].load is not None


@aio
async def test_a_spare_that_died_while_it_waited_is_not_used() -> None:
    async with pooled(spare_workers=1) as (pool, backend):
        pool.warm(R1)
        await settle()
        await backend.workers[0].kill()  # e.g. its container was removed from outside
        assert statuses(await run(pool, cases(1))) == ["ok"]
        assert backend.workers[0].sent == [] and backend.worker_of(cases(1)[0]).id > 0


@aio
async def test_a_spare_whose_channel_closed_is_replaced_like_a_dead_one() -> None:
    """Regression (CI, process backend, every worker SIGKILLed mid-job): the replacement took a spare
    whose pipe to it the loop had closed while its replies had not ended yet; writing the load frame
    raised uvloop's RuntimeError, which nothing expected, and the job failed."""
    async with pooled(spare_workers=1) as (pool, backend):
        pool.warm(R1)
        await settle()
        dead = backend.workers[0]
        dead._to_worker._closing = True  # the loop closed the host's end of its stdin (the process is gone)
        await settle()
        assert not dead.reader.at_eof()  # and its stdout's end has not been read yet
        assert statuses(await run(pool, cases(1))) == ["ok"]
        assert dead.sent == [] and backend.worker_of(cases(1)[0]).id > 0


@aio
async def test_spares_are_capped_by_max_workers_least_recently_used_runtime_first() -> None:
    async with pooled(spare_workers=1, max_workers=2) as (pool, backend):
        for runtime in (R1, R2, R3):
            pool.warm(runtime)
            await settle()
        assert pool.stats().spares == 2
        first, second, third = backend.workers
        assert first.runtime == R1 and first.killed  # R1's spare went first
        assert second.alive and third.alive


@aio
async def test_the_spare_cap_holds_while_spares_are_still_starting() -> None:
    async with pooled(spare_workers=1, max_workers=2) as (pool, backend):
        for runtime in (R1, R2, R3):  # as warm_bare_runtimes does: no start has finished yet
            pool.warm(runtime)
        await settle()
        assert pool.stats().spares <= 2
        assert len(backend.alive) <= 2


@aio
async def test_spares_of_a_runtime_unused_for_idle_ttl_expire() -> None:
    async with pooled(spare_workers=1, idle_ttl_s=100.0) as (pool, backend):
        pool.warm(R1)
        await asyncio.sleep(0.001)  # R1 last used strictly before `between`
        between = time.monotonic()
        await asyncio.sleep(0.001)
        pool.warm(R2)
        await settle()
        assert pool.stats().spares == 2
        await pool.sweep(now=between + 50.0)
        assert pool.stats().spares == 2  # nothing is that old yet
        await pool.sweep(now=between + 100.0)  # R1 unused for > 100 s, R2 for < 100 s
        await settle()
        r1, r2 = backend.workers
        assert r1.runtime == R1 and r1.killed and r2.alive
        assert pool.stats().spares == 1


@aio
async def test_idle_bound_workers_expire() -> None:
    async with pooled(idle_ttl_s=100.0) as (pool, backend):
        await run(pool, cases(1))
        await pool.sweep(now=time.monotonic() + 50.0)
        assert pool.stats().workers == 1
        await pool.sweep(now=time.monotonic() + 101.0)
        assert pool.stats().workers == 0 and backend.workers[0].killed
        await run(pool, cases(1))
        assert backend.started == 2


# -- binding -----------------------------------------------------------------------------


@aio
async def test_keys_whose_workers_all_expired_are_forgotten() -> None:
    async with pooled(max_workers=4) as (pool, _backend):
        for i in range(20):
            await run(pool, cases(1), spec(f"one-off-{i}"))
        await pool.sweep(time.monotonic() + 10 * pool.settings.idle_ttl_s)
        held, leasing = pool.leasing.holdings, pool.leasing
        tables = (held.idle, held.leased, held.waiting, leasing._waiters, leasing.stats.lease_s)
        assert [len(t) for t in tables] == [0] * 5  # per-release work stays with the keys in use
        assert statuses(await run(pool, cases(1), spec("one-off-0"))) == ["ok"]


@aio
async def test_a_worker_that_dies_before_ready_is_replaced_once_transparently() -> None:
    loads: list[int] = []

    def load(_frame: dict[str, Any]) -> Any:
        loads.append(1)
        return DIE if len(loads) == 1 else None

    async with pooled(load=load) as (pool, backend):
        assert statuses(await run(pool, cases(2))) == ["ok", "ok"]
        dead, good = backend.workers
        assert not dead.alive and dead.sent == [] and good.handled == cases(2)


@aio
async def test_a_worker_that_dies_before_ready_twice_is_a_sandbox_error() -> None:
    async with pooled(load=lambda _frame: DIE, max_workers=1) as (pool, backend):
        with pytest.raises(SandboxError, match="failed to start"):
            await run(pool, cases(1))
        assert backend.started == 2 and not backend.alive
        assert pool.stats().workers == 0  # its place in the bound was given back
        backend.load_hook = None
        assert statuses(await run(pool, cases(1))) == ["ok"]


@aio
async def test_a_load_error_answers_every_case_of_the_call_with_it() -> None:
    error = {"type": "SyntaxError", "message": "invalid syntax", "line": 1, "traceback": ""}
    async with pooled(load=lambda _frame: error, batch_size=2) as (pool, backend):
        outcomes = await run(pool, cases(5))
        assert statuses(outcomes) == ["error"] * 5 and all(o.error == error for o in outcomes)
        assert statuses(await run(pool, cases(1))) == ["error"]
        (worker,) = backend.workers  # kept: it answers the same error without being sent anything
        assert worker.runs == [] and worker.alive


# -- failures of one case ----------------------------------------------------------------


@aio
async def test_a_timeout_marks_only_its_case_and_the_batch_goes_on_in_a_fresh_worker() -> None:
    async with pooled(at(2, HANG)) as (pool, backend):
        outcomes = await run(pool, cases(5), timeout_s=0.05)
        assert statuses(outcomes) == ["ok", "ok", "timeout", "ok", "ok"]
        assert outcomes[2].error is not None and outcomes[2].error["type"] == "Timeout"
        assert [o.value for o in outcomes[3:]] == [3.0, 4.0]
        first, second = backend.workers
        assert first.handled == cases(3) and first.killed  # it hung on case 2
        assert second.sent == cases(2, 3) and second.alive


@aio
async def test_a_crash_mid_batch_is_that_case_s_error() -> None:
    async with pooled(at(2, DIE)) as (pool, backend):
        outcomes = await run(pool, cases(5))
        assert statuses(outcomes) == ["ok", "ok", "error", "ok", "ok"]
        assert outcomes[2].error is not None and outcomes[2].error["type"] == "WorkerExited"
        first, second = backend.workers
        assert first.handled == cases(3) and not first.alive and second.sent == cases(2, 3)


@aio
async def test_a_reply_of_another_request_is_a_protocol_error_and_the_worker_is_replaced() -> None:
    async with pooled(at(1, {"id": "not-this-request", "value": 0.777})) as (pool, backend):
        outcomes = await run(pool, cases(4))
        assert statuses(outcomes) == ["ok", "error", "ok", "ok"]
        assert outcomes[1].error is not None and outcomes[1].error["type"] == "ProtocolError"
        assert [o.value for o in outcomes if o.status == "ok"] == [0.0, 2.0, 3.0]  # nothing shifted
        first, second = backend.workers
        assert not first.alive and second.sent == cases(2, 2)


@aio
async def test_a_memory_kill_mid_batch_is_that_case_s_memory_limit() -> None:
    async with pooled(at(1, OOM)) as (pool, backend):
        assert statuses(await run(pool, cases(3))) == ["ok", "memory_limit", "ok"]
        assert backend.started == 2


@aio
async def test_an_output_flood_is_output_limit() -> None:
    async with pooled(at(1, FLOOD)) as (pool, backend):
        outcomes = await run(pool, cases(3))
        assert statuses(outcomes) == ["ok", "output_limit", "ok"] and outcomes[1].truncated
        assert backend.started == 2 and not backend.workers[0].alive


@aio
async def test_a_reply_larger_than_the_caps_is_output_limit() -> None:
    async with pooled(at(1, {"value": "x" * 100_000})) as (pool, backend):
        assert statuses(await run(pool, cases(3))) == ["ok", "output_limit", "ok"]
        assert backend.workers[0].killed and backend.started == 2


@aio
async def test_raw_output_is_appended_to_the_case_s_stderr() -> None:
    async with pooled(at(1, {"value": 1.0, "stderr": "captured\n", "raw_output": "raw\n"})) as (pool, _backend):
        # one case per call: within a burst of replies, raw output goes to the reply read next
        outcomes = [(await run(pool, cases(1, i)))[0] for i in range(3)]
        assert [o.stderr for o in outcomes] == ["", "captured\nraw\n", ""]


@aio
async def test_a_raising_handler_is_a_user_error_and_the_worker_lives_on() -> None:
    def handler(_load: dict[str, Any], case: dict[str, Any]) -> Reply:
        if case["inputs"]["i"] == 1:
            raise ValueError("bad row")
        return {"value": 1.0}

    async with pooled(handler) as (pool, backend):
        outcomes = await run(pool, cases(3))
        assert statuses(outcomes) == ["ok", "error", "ok"]
        assert outcomes[1].error == {"type": "ValueError", "message": "bad row", "line": None, "traceback": ""}
        assert backend.started == 1


@aio
async def test_a_memory_limit_keeps_the_worker_and_retire_hands_the_rest_to_a_fresh_one() -> None:
    # a memory_limit the harness caught (its own limit, below the sandbox's) keeps the worker (issue 33)
    def handler(_load: dict[str, Any], case: dict[str, Any]) -> Reply:
        i = case["inputs"]["i"]
        return MEMORY if i == 1 else {"value": float(i), "retire": i == 3}

    async with pooled(handler) as (pool, backend):
        outcomes = await run(pool, cases(5))
        assert statuses(outcomes) == ["ok", "memory_limit", "ok", "ok", "ok"]
        assert outcomes[3].value == 3.0
        first, second = backend.workers
        assert first.sent == cases(5) and first.handled == cases(4)  # it retired after case 3
        assert not first.alive and not first.killed
        assert second.sent == cases(1, 4) and second.alive


@aio
async def test_a_memory_limit_that_retires_hands_the_rest_of_the_batch_to_a_fresh_worker() -> None:
    def handler(_load: dict[str, Any], case: dict[str, Any]) -> Reply:
        i = case["inputs"]["i"]
        if i == 1:
            return {"status": "memory_limit", "error": {"type": "MemoryError", "message": ""}, "retire": True}
        return {"value": float(i)}

    async with pooled(handler) as (pool, backend):
        outcomes = await run(pool, cases(4))
        assert statuses(outcomes) == ["ok", "memory_limit", "ok", "ok"]
        first, second = backend.workers
        assert first.handled == cases(2) and not first.alive  # the heap was still near its limit
        assert second.sent == cases(2, 2) and second.alive


@aio
async def test_a_cancelled_run_kills_its_worker() -> None:
    async with pooled(at(1, HANG)) as (pool, backend):
        task = asyncio.ensure_future(run(pool, cases(3)))
        while not backend.workers or len(backend.workers[0].handled) < 2:
            await asyncio.sleep(0)
        await settle()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert backend.workers[0].killed and pool.stats().workers == 0


# -- close -------------------------------------------------------------------------------


@aio
async def test_close_kills_every_worker_and_later_calls_are_refused() -> None:
    async with pooled(spare_workers=1) as (pool, backend):
        pool.warm(R2)
        await run(pool, cases(1), spec("a"))
        await run(pool, cases(1), spec("b"))
        await settle()
        # R2's spare, and R1's: two revisions bound back to back are a burst, which keeps one more
        assert pool.stats().spares == 3 and pool.stats().workers == 2
        await pool.close()
        assert backend.workers and not backend.alive and backend.closed
        with pytest.raises(SandboxError):
            await run(pool, cases(1))
        pool.warm(R1)
        await settle()
        assert not backend.alive


def test_nothing_in_the_package_imports_the_fake_backend() -> None:
    package = Path(__file__).resolve().parents[2] / "evaluator_host"
    assert (package / "testing" / "fake.py").exists()
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{a.name}" for a in node.names] + [str(node.module)]
            if any(n == "evaluator_host.testing.fake" or n.startswith("evaluator_host.testing.fake.") for n in names):
                found.append(f"{path.relative_to(package)}:{node.lineno}")
    assert found == []


# -- coalescing ----------------------------------------------------------------------------


async def learned(pool: WorkerPool, key: str = "a") -> None:
    """Two calls: the pool now knows what a start and a row of ``key`` cost."""
    await run(pool, cases(1, 100), spec(key))
    await run(pool, cases(1, 101), spec(key))


@aio
async def test_concurrent_single_calls_of_a_fast_key_share_a_batch_each_getting_its_own_row() -> None:
    async with pooled(start=slow_start) as (pool, backend):
        await learned(pool)
        outcomes = await asyncio.gather(*(run(pool, cases(1, i)) for i in range(20)))
        assert [o[0].value for o in outcomes] == [float(i) for i in range(20)]
        (worker,) = backend.workers
        # the burst's first call found the worker idle and ran at once, alone; the 19 that came while it ran
        # waited for the worker together and shared one frame
        assert [len(r) for r in worker.runs] == [1, 1, 1, 19]
        assert pool.coalescer.calls == 22 and pool.coalescer.groups == 4


@aio
async def test_a_lone_call_on_an_idle_worker_runs_in_its_own_task_and_its_cancel_discards_only_its_worker() -> None:
    async def slow(_load: dict[str, Any], case: dict[str, Any]) -> Reply:
        await asyncio.sleep(30 if case["inputs"]["i"] == 7 else 0)  # (row 7 runs until cancelled)
        return {"value": float(case["inputs"]["i"])}

    async with pooled(slow, start=slow_start) as (pool, backend):
        await learned(pool)
        tasks = len(asyncio.all_tasks())
        alone = asyncio.ensure_future(run(pool, cases(1, 7)))
        await asyncio.sleep(0.01)  # it holds the idle worker, running in its own task: no driver task started
        assert len(asyncio.all_tasks()) == tasks + 1 and pool.stats().idle == 0
        alone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await alone
        await settle()
        (first,) = backend.workers
        assert first.killed  # a batch cancelled mid-run leaves no worker to trust
        assert [o.value for o in await run(pool, cases(1, 8))] == [8.0]  # the next call: a fresh worker
        assert backend.started == 2


@aio
async def test_a_row_that_ends_the_worker_fails_alone_in_a_shared_batch() -> None:
    async with pooled(at(7, DIE), start=slow_start) as (pool, backend):
        await learned(pool)
        outcomes = [o[0] for o in await asyncio.gather(*(run(pool, cases(1, i)) for i in range(12)))]
        assert [o.status for o in outcomes] == ["ok"] * 7 + ["error"] + ["ok"] * 4
        assert outcomes[7].error is not None and outcomes[7].error["type"] == "WorkerExited"
        assert [o.value for o in outcomes[8:]] == [8.0, 9.0, 10.0, 11.0]  # went on in a fresh worker
        assert backend.started == 2


@aio
async def test_a_cancelled_call_in_a_shared_batch_cancels_no_other() -> None:
    async with pooled(start=slow_start) as (pool, backend):
        await learned(pool)
        busy = asyncio.ensure_future(run(pool, cases(1, 99)))  # on the idle worker: the calls below must wait
        await asyncio.sleep(0)
        calls = [asyncio.ensure_future(run(pool, cases(1, i))) for i in range(6)]
        await asyncio.sleep(0)  # every call joined the group
        calls[0].cancel()  # the call that opened it
        calls[3].cancel()
        done = await asyncio.gather(*calls, return_exceptions=True)
        assert isinstance(done[0], asyncio.CancelledError) and isinstance(done[3], asyncio.CancelledError)
        assert [d[0].value for d in done if isinstance(d, list)] == [1.0, 2.0, 4.0, 5.0]
        assert len(backend.workers[0].runs[-1]) == 6  # they did share one batch
        assert [o.value for o in await busy] == [99.0]
        await settle()
        assert pool.stats().idle == 1  # the worker came back healthy


@aio
async def test_slow_rows_are_not_coalesced() -> None:
    async def slow(_load: dict[str, Any], case: dict[str, Any]) -> Reply:
        await asyncio.sleep(0.2)  # a row costs more than a start (0.1 s): more workers, not longer batches
        return {"value": float(case["inputs"]["i"])}

    async with pooled(slow, start=slow_start) as (pool, backend):
        await learned(pool)
        assert pool.coalesce_limit("a") == 1
        await asyncio.gather(*(run(pool, cases(1, i)) for i in range(4)))
        assert all(len(r) == 1 for w in backend.workers for r in w.runs)


# -- a failing neighbour ---------------------------------------------------------------------


@aio
async def test_a_key_whose_calls_keep_killing_workers_is_held_to_a_lane_and_takes_no_healthy_worker() -> None:
    starting = {"now": 0, "most": 0}

    async def counted_start(_runtime: RuntimeKey) -> None:
        starting["now"] += 1
        starting["most"] = max(starting["most"], starting["now"])
        await asyncio.sleep(0.005)
        starting["now"] -= 1

    def handler(load: dict[str, Any], case: dict[str, Any]) -> Reply:
        return DIE if "bad" in load["code"] else {"value": float(case["inputs"]["i"])}

    async with pooled(handler, start=counted_start, max_workers=4) as (pool, backend):
        for key in "gh":  # two healthy keys, each with its warm worker
            await run(pool, cases(1), spec(key))
        for _ in range(2):  # the failing key's first calls: every one ends its worker
            await run(pool, cases(1), spec("bad"))
        assert pool.failing("bad") and not pool.failing("g")
        healthy = {w for w in backend.workers if w.alive}
        assert len(healthy) == 2
        starting["most"] = 0
        bursts = [run(pool, cases(1, i), spec("bad")) for i in range(8)]
        busy = [run(pool, cases(1, i), spec(k)) for i in range(4) for k in "gh"]
        outcomes = await asyncio.gather(*bursts, *busy)
        assert all(o[0].status == "error" for o in outcomes[:8])
        assert all(o[0].status == "ok" for o in outcomes[8:])
        assert healthy <= {w for w in backend.workers if w.alive}  # the healthy keys kept their workers
        assert starting["most"] == 1  # its eight calls started workers one at a time
        assert pool.failing("bad")


@aio
async def test_a_key_whose_calls_take_long_leaves_the_others_their_share_of_the_free_room() -> None:
    gate = asyncio.Event()

    async def handler(load: dict[str, Any], case: dict[str, Any]) -> Reply:
        if "slow" in load["code"]:
            await asyncio.sleep(0.05)  # longer than a start: waiting would cost more than starting
        else:
            await gate.wait()  # the other key's calls are running the whole time
        return {"value": float(case["inputs"]["i"])}

    async with pooled(handler, max_workers=8) as (pool, backend):
        other = asyncio.ensure_future(run(pool, cases(1), spec("fast")))
        await settle()
        await asyncio.gather(*(run(pool, cases(1, i), spec("slow")) for i in range(12)))
        slow_workers = [w for w in backend.workers if w.load is not None and "slow" in w.load["code"]]
        assert len(slow_workers) == 8 // 2  # two keys in demand: half the pool each, not seven of eight
        gate.set()
        await other
