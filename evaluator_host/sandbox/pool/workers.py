"""The warm worker pool, for every backend: spares, bound workers, reuse, replacement.

Rules:

* a worker is started *unbound* for a :class:`RuntimeKey` and bound to one
  :class:`WorkerSpec` key (one evaluator revision on one runtime with its limits) by its
  ``load`` frame; it only ever serves that key, never another evaluator's code;
* ``spare_workers`` unbound workers are kept started per runtime key in recent use (the
  bare runtimes from the start), so binding a never-seen revision costs a load frame,
  not a process or container start; at most ``max_workers`` spares exist in all (the
  least recently used runtime's go first), and a runtime's spares go after ``idle_ttl_s``
  without use;
* who gets a worker when (the share of each key, waiting versus starting, eviction) is decided by
  the pool's :class:`~evaluator_host.sandbox.pool.leasing.Leasing` (:attr:`WorkerPool.leasing`);
* a worker is discarded after a timeout its harness did not answer itself (a harness that
  announces ``soft_timeouts`` interrupts the case and stays warm; the host waits a little
  longer than the timeout before it kills), any crash, output flood or memory kill (a
  ``memory_limit`` its harness answered itself keeps the worker unless it says ``retire``), after
  ``max_uses`` evaluations, and after ``idle_ttl_s`` without use;
* the rows of one call are sent in batches (``batch_size`` per message, at least an async evaluator's
  ``in_flight``; a job's chunk whole) to one worker (:mod:`evaluator_host.sandbox.pool.batches`); if a row
  ends the worker, only that row carries the failure and the rest of the batch goes on in a fresh worker
  (an async evaluator's rows run ``in_flight`` at once: when a worker is lost with rows in flight, those
  rows run again one at a time, so the failure is the outcome of the row that caused it);
* single-case calls to one key that wait for a worker together are coalesced into one
  batch (:mod:`evaluator_host.sandbox.pool.coalesce`), each call still getting its own row;
* an interactive call whose key's queue would keep it waiting far past its timeout is refused at
  once (:mod:`evaluator_host.sandbox.pool.admission`: 429 ``Overloaded``); a job's chunks never are.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from evaluator_host.errors import SandboxError
from evaluator_host.observability import tracing
from evaluator_host.observability.metrics import Metrics
from evaluator_host.sandbox.base import RawOutcome, RuntimeKey, SandboxBackend, WorkerSpec, error_info
from evaluator_host.sandbox.pool.admission import WAIT_DEADLINE, Admission
from evaluator_host.sandbox.pool.batches import FRAME_OVERHEAD, ByteBudget, Call, frame_max, run_batch, send
from evaluator_host.sandbox.pool.coalesce import Coalescer, Group
from evaluator_host.sandbox.pool.leasing import Leasing, Slot
from evaluator_host.sandbox.pool.replies import Unanswered
from evaluator_host.sandbox.pool.spares import Spares
from evaluator_host.sandbox.protocol import FrameTooLarge, JobCases, WireCase, encode_frame, read_frame
from evaluator_host.settings import Settings

__all__ = ["PoolStats", "WorkerPool", "load_frame"]

_LOAD_TIMEOUT_S = 60.0
_FLUSH_MS = 2.0  # how long a harness may hold fast replies back (``held_replies``)


@dataclass(frozen=True)
class PoolStats:
    """Counts for ``/healthz`` and benchmarks."""

    workers: int
    idle: int
    started: int
    spares: int


def load_frame(spec: WorkerSpec) -> bytes:
    """The frame that binds an unbound worker to ``spec`` (the same on every backend)."""
    return encode_frame(
        {"op": "load", "ack": True, "output_limit": spec.output_limit, "result_limit": spec.result_limit, **spec.load}
    )


class WorkerPool:
    """Binds warm workers per key (leased by its :attr:`leasing`'s rules) and runs cases on them."""

    def __init__(self, backend: SandboxBackend, settings: Settings, metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.metrics = metrics = metrics or Metrics()
        self.backend = backend
        self._started = 0
        self._sweeper: asyncio.Task[None] | None = None
        self._starts = metrics.worker_starts.labels(backend.name)
        self.leasing = Leasing(
            settings,
            metrics,
            start=self._start,
            backend_name=backend.name,
            spare_mb=lambda: self.spares.memory_mb(),
            drop_spare=lambda: self.spares.drop_one(),
            spare_for=lambda runtime: self.spares.claimable(runtime),
        )
        self.spares = Spares(backend, settings, self.leasing.reap, self._starts.inc, self.leasing.fits)
        metrics.watch_pool(self._states)
        self._ids = random.Random(os.urandom(16))  # request ids: unpredictable to a sandbox, cheap here
        self.coalescer = Coalescer()
        holdings = self.leasing.holdings
        self.admission = Admission(
            settings.admission_wait_factor, self.leasing.stats, holdings.held, holdings.running_s
        )

    # -- what the leasing knows ----------------------------------------------------------------
    @property
    def workspace_caps(self) -> dict[str, int | None]:
        """Workspace -> its ``max_warm_workers`` quota (None: no cap); the service keeps it current."""
        return self.leasing.workspace_caps

    @property
    def memory_budget_mb(self) -> int | None:
        """The ``memory_mb`` all workers together may hold (None: unknown, no bound)."""
        return self.leasing.memory_budget_mb

    def live_mb(self) -> int:
        """The ``memory_mb`` of every worker alive or starting (bound and spare)."""
        return self.leasing.live_mb()

    def failing(self, key: str) -> bool:
        """Whether most of ``key``'s recent leases ended with its worker discarded."""
        return self.leasing.failing(key)

    def coalesce_limit(self, key: str) -> int:
        """How many single-case calls of ``key`` may share one batch."""
        return self.leasing.coalesce_limit(key)

    # -- spares --------------------------------------------------------------------------
    def warm(self, runtime: RuntimeKey) -> None:
        """Keep ``spare_workers`` unbound workers of ``runtime`` started (in the background)."""
        self._sweep_soon()
        self.spares.warm(runtime)

    def _sweep_soon(self) -> None:
        if self._sweeper is None and not self.leasing.closed:
            self._sweeper = asyncio.ensure_future(self._sweep())

    # -- binding ---------------------------------------------------------------------------
    def _states(self) -> dict[str, int]:
        bound, idle = self.leasing.counts()
        return {"busy": bound - idle, "idle": idle, "spare": self.spares.count()}

    def stats(self) -> PoolStats:
        """Current worker counts."""
        bound, idle = self.leasing.counts()
        return PoolStats(workers=bound, idle=idle, started=self._started, spares=self.spares.count())

    async def _start(self, spec: WorkerSpec, *, retry: bool = True, fresh: bool = False) -> Slot:
        """A worker bound to ``spec`` that answered its load: a spare of its runtime (unless
        ``fresh``), else a new one.

        One that dies before it answers (e.g. a spare container removed from outside), or says
        nothing at all within ``worker_ack_timeout_s`` (a paused container, a stopped process), is
        replaced once, transparently — the second time by a worker started for it.
        """
        # a failing key's replacements take a spare but add no burst demand (Spares.take)
        demand = not self.failing(spec.key)
        worker = None if fresh else await self.spares.take_or_wait(spec.runtime, demand=demand)
        self.warm(spec.runtime)
        self.backend.builder.touch(spec.runtime_id)
        try:
            if worker is None:
                worker = await self.backend.start_worker(spec.runtime)
                self._started += 1
                self._starts.inc()
            worker.set_output_limit(spec.output_limit)
            if worker.egress is not None:  # what this worker may reach: the evaluator's declared network
                worker.egress.bind(spec.workspace, spec.network, spec.headers, spec.in_flight)
            send(worker, load_frame(spec))
            await worker.writer.drain()
        except (SandboxError, ConnectionError, OSError):
            if worker is not None:
                await worker.kill()
            if not retry or self.leasing.closed:
                raise
            return await self._start(spec, retry=False, fresh=True)
        limit = spec.output_limit * 2 + FRAME_OVERHEAD
        try:
            try:
                # a bound worker answers "loading" as soon as it reads its load frame; silence this long
                # means it is frozen (a paused container, a SIGSTOPped process) or wedged, not slow user code
                async with asyncio.timeout(self.settings.worker_ack_timeout_s):
                    ready = await read_frame(worker.reader, limit)
            except TimeoutError:
                ready = None  # not a word: frozen or wedged (the user's code has not even started)
            if ready is None and retry and not self.leasing.closed:
                await worker.kill()
                return await self._start(spec, retry=False, fresh=True)
            if ready is None or ready.get("type") == "loading":
                async with asyncio.timeout(_LOAD_TIMEOUT_S):
                    ready = await read_frame(worker.reader, limit)
        except (TimeoutError, asyncio.IncompleteReadError, FrameTooLarge, ValueError) as exc:
            info = await worker.kill()
            if isinstance(exc, TimeoutError):
                message = f"loading the evaluator took longer than {_LOAD_TIMEOUT_S:.0f} s"
                ready = {"load_error": error_info("Timeout", message)}
            elif retry and isinstance(exc, asyncio.IncompleteReadError):
                return await self._start(spec, retry=False, fresh=True)
            else:
                raise SandboxError(
                    f"the worker failed to start (exit {info.returncode}): {info.raw_output[-2000:]}"
                ) from exc
        except BaseException:  # cancelled while it loads (a job cancelled or stopping): never leak it
            await asyncio.shield(worker.kill())
            raise
        return Slot(
            worker,
            spec,
            oom_seen=worker.oom_kills(),
            load_error=ready.get("load_error"),
            soft_timeouts=ready.get("soft_timeouts") is True,
        )

    async def _release(self, slot: Slot, healthy: bool) -> None:
        """Give a worker back after a batch (:meth:`Leasing.release`); after its first (each, for a worker whose
        load failed: it runs none), tell the builder its runtime answered (a new runtime's bytecode compile
        waits for its first result: ``Builder.answered``)."""
        first = slot.uses_at_lease == 0
        await self.leasing.release(slot, healthy)
        if first:
            self.backend.builder.answered(slot.spec.runtime_id)

    async def _sweep(self) -> None:
        while not self.leasing.closed:
            await asyncio.sleep(min(5.0, self.settings.idle_ttl_s / 2))
            await self.sweep()

    async def sweep(self, now: float | None = None) -> None:
        """One pass of the idle sweeper (which runs it every ``min(5, idle_ttl_s / 2)`` s): discard
        idle workers and the spares of runtimes unused for more than ``idle_ttl_s`` as of ``now``
        (default: ``time.monotonic()``), and spares that died while they waited."""
        now = time.monotonic() if now is None else now
        self.spares.sweep(now)
        await self.leasing.sweep_idle(now)

    async def _acquire_traced(self, spec: WorkerSpec) -> Slot:
        """A worker for ``spec`` (:meth:`Leasing.acquire`) in a ``pool.acquire`` span: the wait for a worker
        of its key, or its start (then a ``worker.start`` span inside)."""
        if not tracing.enabled():
            return await self.leasing.acquire(spec)
        with tracing.span("pool.acquire"):
            return await self.leasing.acquire(spec)

    async def prewarm(self, spec: WorkerSpec) -> None:
        """Start a worker for ``spec`` ahead of its first evaluation (best effort)."""
        self._sweep_soon()
        with contextlib.suppress(SandboxError):
            with self.leasing.holdings.prewarming(spec.key):  # the first callers wait for it: Leasing.acquire
                slot = await self.leasing.acquire(spec, warm=True)
            await self.leasing.release(slot, healthy=True)

    # -- running -------------------------------------------------------------------------
    async def run(
        self,
        spec: WorkerSpec,
        cases: Sequence[WireCase],
        *,
        timeout_s: float,
        correct_answer_key: str,
        max_bytes: int | None = None,
        held_replies: bool = False,
        job_cases: JobCases | None = None,
        interactive: bool = False,
    ) -> list[RawOutcome]:
        """Run ``cases`` on warm workers of ``spec``; one outcome per case, in order.

        ``interactive`` (``/v1/evaluate``, by id; never a job's chunk): the call passes the key's
        admission first (:mod:`evaluator_host.sandbox.pool.admission`): :class:`EvaluatorOverloaded` at once
        when its key's queue would keep it waiting far past its timeout.

        With ``held_replies`` (job chunks, whose caller waits for every outcome anyway) the harness
        may hold the replies of fast cases back and write them together (the protocol's
        ``flush_ms``); a worker that dies holding replies has its unanswered cases run again
        one reply at a time, so every failure is still the outcome of the case that caused it.
        ``job_cases``: the cases are a job's rows, sent as :class:`JobCases` says.

        With ``max_bytes``, the replies of the whole call may add up to that many bytes: past it
        the call stops (its worker is discarded) with :class:`ResponseTooLarge`, so what one
        call holds in memory stays bounded whatever the evaluator returns or prints.
        """
        if not interactive:
            return await self._run(spec, cases, timeout_s, correct_answer_key, max_bytes, held_replies, job_cases)
        deadline = WAIT_DEADLINE.set(self.admission.enter(spec.key, timeout_s))
        try:
            return await self._run(spec, cases, timeout_s, correct_answer_key, max_bytes, held_replies, job_cases)
        finally:
            WAIT_DEADLINE.reset(deadline)
            self.admission.leave(spec.key)

    async def _run(
        self,
        spec: WorkerSpec,
        cases: Sequence[WireCase],
        timeout_s: float,
        correct_answer_key: str,
        max_bytes: int | None,
        held_replies: bool,
        job_cases: JobCases | None,
    ) -> list[RawOutcome]:
        self._sweep_soon()
        only = cases[0] if len(cases) == 1 and self.settings.coalesce and job_cases is None else None
        if isinstance(only, dict) and (max_bytes is None or max_bytes >= frame_max(spec)):
            # one reply can't exceed this call's budget: it may share a frame with other calls
            key = (spec.key, timeout_s, correct_answer_key)
            if not self.coalescer.open(key) and self.leasing.idle_now(spec.key):  # nothing to join or wait for
                self.coalescer.alone()
                slot = await self._acquire_traced(spec)
                return await self._run_rows(Call(spec, [only], timeout_s, correct_answer_key), slot)

            async def runner(group: Group) -> list[RawOutcome]:
                slot = await self._acquire_traced(spec)
                return await self._run_rows(Call(spec, self.coalescer.seal(group), timeout_s, correct_answer_key), slot)

            return [await self.coalescer.submit(key, only, runner, self.leasing.coalesce_limit(spec.key))]
        call = Call(spec, cases, timeout_s, correct_answer_key, ByteBudget(max_bytes), job_cases)
        return await self._run_rows(call, None, _FLUSH_MS if held_replies else 0.0)

    async def _run_rows(self, call: Call, slot: Slot | None, flush_ms: float = 0.0) -> list[RawOutcome]:
        """Every row of ``call`` in batches (the first on ``slot`` when given); outcomes in order. A job's
        chunk (``flush_ms``) goes whole, in one message: the worker runs it without waiting for the host
        between batches (its replies come back in bursts anyway)."""
        pending = list(range(len(call.cases)))
        in_flight = call.spec.in_flight
        size = max(self.settings.batch_size, in_flight)  # an async evaluator's batch fills its in-flight rows
        size = max(size, len(call.cases)) if flush_ms else size
        while pending:
            batch, pending = pending[:size], pending[size:]
            held = flush_ms
            serial = 0  # rows to run one at a time: those that were in flight when a worker was lost
            while batch:
                part = batch[:serial] if serial else batch
                try:
                    done = await run_batch(
                        call,
                        part,
                        slot or await self._acquire_traced(call.spec),
                        request=f"{self._ids.getrandbits(64):016x}",  # every reply carries it, and its index
                        release=self._release,
                        backend_name=self.backend.name,
                        flush_ms=0.0 if serial else held,
                        in_flight=1 if serial else in_flight,
                    )
                    serial = max(0, serial - done)
                except Unanswered as lost:  # the worker died holding replies: the rest, one reply at a time
                    done, held = lost.done, 0.0
                    if in_flight > 1 and not serial:  # which in-flight row ended it: each of them alone
                        serial = in_flight
                slot = None
                batch = batch[done:]
                if WAIT_DEADLINE.get() is not None:  # it had a worker: the rest of the call is not bound
                    WAIT_DEADLINE.set(None)
        return call.outcomes()

    async def close(self) -> None:
        """Kill every worker (spares included), then close the backend."""
        self.leasing.stop()
        if self._sweeper is not None:
            self._sweeper.cancel()
        await self.coalescer.close()
        spares = await self.spares.close()
        slots = self.leasing.close()  # the idle workers; every waiter looks again, sees the pool closed, leaves
        await asyncio.gather(*(w.kill() for w in [*spares, *(s.worker for s in slots)]), return_exceptions=True)
        await self.leasing.reaped()
        await self.backend.close()
