"""The chunk executor's rules on an injected clock and back-off: retries, waits for the backend, a full
disk and an unanswering database — all without sleeping (the clock only moves when the executor waits).

The bound revision here is a scripted stand-in (it fails as told, then answers); the executor on a real
``Bound`` over a real pool is what tests/jobs/test_runner.py and tests/queue/ run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

import pytest
from sqlalchemy.exc import OperationalError

from evaluator_host.errors import BackendUnavailable, SandboxError, StorageFull
from evaluator_host.evaluation.path import Bound
from evaluator_host.jobs.running.executor import ChunkExecutor, DatabaseAway, database_backoff, retry_backoff
from evaluator_host.observability.metrics import Metrics
from evaluator_host.sandbox.base import RawOutcome
from evaluator_host.sandbox.protocol import JobCases
from evaluator_host.settings import Settings
from evaluator_host.tenancy.quotas import Charged

RUN_S = 0.5  # what one attempt of a chunk takes on the fake clock


class FakeClock:
    """Time that moves only when someone waits (or :meth:`advance` says so); every wait recorded."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds

    def advance(self, seconds: float) -> None:
        self.t += seconds


class Scripted:
    """A bound revision whose ``run`` raises ``failures`` in turn (each after ``RUN_S``), then answers."""

    def __init__(self, clock: FakeClock, failures: list[Exception]) -> None:
        self.clock = clock
        self.failures = failures
        self.calls = 0
        self.workspace = "ws_default"

    async def run(
        self, cases: list[Any], *, held_replies: bool, job_cases: JobCases, charged: Charged
    ) -> list[RawOutcome]:
        assert held_replies and isinstance(job_cases, JobCases)
        charged.spend(self.workspace, len(cases))  # a job's chunk: the executor's receipt, unmetered
        self.calls += 1
        self.clock.advance(RUN_S)
        if self.failures:
            raise self.failures.pop(0)
        return cast(list[RawOutcome], [f"outcome of {case}" for case in cases])


def executor(clock: FakeClock, **kwargs: Any) -> ChunkExecutor:
    settings = Settings(job_retries=kwargs.pop("job_retries", 2), queue_db_retry_s=kwargs.pop("db_retry_s", 3.0))
    return ChunkExecutor(settings, clock=clock, **kwargs)


def run(ex: ChunkExecutor, bound: Scripted) -> Any:
    return asyncio.run(ex.run(cast(Bound, bound), ["a", "b"], JobCases()))  # type: ignore[list-item]


def test_a_chunk_is_retried_job_retries_times_with_the_backoff_then_its_failure_is_raised() -> None:
    clock = FakeClock()
    bound = Scripted(clock, [SandboxError("gone")] * 5)
    with pytest.raises(SandboxError, match="gone"):
        run(executor(clock), bound)
    assert bound.calls == 3  # the first attempt and job_retries=2 retries
    assert clock.slept == [retry_backoff(0), retry_backoff(1)] == [1.0, 2.0]


def test_a_transient_failure_is_retried_and_the_chunk_time_counts_the_retry() -> None:
    clock = FakeClock()
    waits: list[int] = []

    def backoff(attempt: int) -> float:
        waits.append(attempt)
        return 0.25

    bound = Scripted(clock, [SandboxError("restarting")])
    ran = run(executor(clock, backoff=backoff), bound)
    assert ran.outcomes == ["outcome of a", "outcome of b"]
    assert waits == [0] and bound.calls == 2
    assert ran.seconds == pytest.approx(RUN_S + 0.25 + RUN_S)


def test_an_unreachable_backend_is_waited_for_without_limit_by_the_service() -> None:
    clock = FakeClock()
    bound = Scripted(clock, [BackendUnavailable("the engine restarts")] * 6)
    ran = run(executor(clock), bound)  # 6 failures, more than job_retries=2: still waited for
    assert len(ran.outcomes) == 2 and bound.calls == 7
    assert clock.slept == [retry_backoff(min(n, 3)) for n in range(6)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_job_backoff_max_s_caps_every_wait_of_the_service_s_executor() -> None:
    clock = FakeClock()
    settings = Settings(job_retries=3, job_backoff_max_s=1.5)
    bound = Scripted(clock, [BackendUnavailable("away")] * 4 + [SandboxError("gone")] * 3)
    ran = run(ChunkExecutor(settings, clock=clock), bound)
    assert len(ran.outcomes) == 2 and bound.calls == 8
    assert clock.slept == [1.0, 1.5, 1.5, 1.5] + [1.0, 1.5, 1.5]  # the backend's waits, then the retries'
    assert ChunkExecutor(settings).disk_backoff(5) == 1.5  # and a full disk's


def test_a_worker_host_counts_an_unreachable_backend_as_an_infrastructure_failure() -> None:
    clock = FakeClock()
    bound = Scripted(clock, [BackendUnavailable("no engine")] * 6)
    with pytest.raises(BackendUnavailable):
        run(executor(clock, await_backend=False), bound)
    assert bound.calls == 3 and clock.slept == [1.0, 2.0]


def test_once_stopped_nothing_is_retried_or_waited_for() -> None:
    for failure in (SandboxError("x"), BackendUnavailable("y")):
        clock = FakeClock()
        ex = executor(clock)
        ex.stop()
        bound = Scripted(clock, [failure])
        with pytest.raises(SandboxError):
            run(ex, bound)
        assert bound.calls == 1 and clock.slept == []


def test_a_write_to_a_full_disk_waits_with_the_disk_backoff_until_it_lands() -> None:
    clock = FakeClock()
    tries: list[int] = []
    landed: list[str] = []

    def write() -> str:
        tries.append(len(tries))
        if len(tries) < 4:
            raise StorageFull("the data disk is full")
        return "stored"

    ex = executor(clock, disk_backoff=lambda attempt: 10.0 * (attempt + 1))
    assert asyncio.run(ex.until_stored(write, what="job j", landed=landed.append)) == "stored"
    assert tries == [0, 1, 2, 3] and clock.slept == [10.0, 20.0, 30.0]
    assert landed == ["stored"]  # called once, for the write that landed


def test_a_write_to_a_full_disk_is_given_up_when_told_or_stopped() -> None:
    def full() -> None:
        raise StorageFull("the data disk is full")

    clock = FakeClock()
    given_up = [False, False, True]
    with pytest.raises(StorageFull):
        asyncio.run(executor(clock).until_stored(full, give_up=lambda: given_up.pop(0)))
    assert clock.slept == [1.0, 2.0]  # two waits, then give_up() said so
    clock = FakeClock()
    ex = executor(clock)
    ex.stop()
    with pytest.raises(StorageFull):
        asyncio.run(ex.until_stored(full))
    assert clock.slept == []


def test_a_shielded_write_cancelled_meanwhile_lands_and_is_reported_before_the_cancel() -> None:
    landed: list[int] = []

    async def scenario() -> None:
        release = asyncio.Event()
        loop = asyncio.get_running_loop()
        started = asyncio.Event()

        def write() -> int:
            loop.call_soon_threadsafe(started.set)
            asyncio.run_coroutine_threadsafe(release.wait(), loop).result()
            return 7

        task = asyncio.ensure_future(executor(FakeClock()).until_stored(write, landed=landed.append))
        await started.wait()
        task.cancel()
        await asyncio.sleep(0)
        assert not task.done() and landed == []  # the write is still under way: the cancel waits for it
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert landed == [7]

    asyncio.run(scenario())


def test_an_unanswering_database_is_asked_again_until_queue_db_retry_s_then_database_away() -> None:
    clock = FakeClock()
    calls: list[float] = []

    def query() -> None:
        calls.append(clock.now())
        raise OperationalError("SELECT 1", {}, Exception("connection refused"))

    with pytest.raises(DatabaseAway, match="did not answer for 3 s"):
        asyncio.run(executor(clock, db_retry_s=3.0).database(query))
    assert clock.slept == [database_backoff(n) for n in range(4)] == pytest.approx([0.2, 0.4, 0.8, 1.6])
    assert len(calls) == 5 and sum(clock.slept) <= 3.0  # the next pause (3.2 s) would pass the deadline


def test_a_database_that_answers_again_is_used() -> None:
    clock = FakeClock()
    answers: list[Callable[[], int]] = [_refuse, lambda: 42]

    assert asyncio.run(executor(clock).database(lambda: answers.pop(0)())) == 42
    assert clock.slept == [0.2]


def _refuse() -> int:
    raise OperationalError("SELECT 1", {}, Exception("connection refused"))


def test_committed_rows_are_counted_by_status() -> None:
    metrics = Metrics()
    ex = ChunkExecutor(Settings(), metrics)
    ex.count(10, 3)
    ex.count(5, 0)
    sample = metrics.registry.get_sample_value
    assert sample("evaluator_host_job_rows_total", {"status": "ok"}) == 12
    assert sample("evaluator_host_job_rows_total", {"status": "failed"}) == 3
    ChunkExecutor(Settings()).count(1, 1)  # without metrics: counted nowhere, no error
