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
* who gets a worker when (the share of each key, waiting versus starting, eviction) is
  :mod:`evaluator_host.sandbox.leasing`'s;
* a worker is discarded after a timeout its harness did not answer itself (a harness that
  announces ``soft_timeouts`` interrupts the case and stays warm; the host waits a little
  longer than the timeout before it kills), any crash, output flood or memory kill, after
  ``max_uses`` evaluations, and after ``idle_ttl_s`` without use;
* the rows of one call are sent in batches (``batch_size`` per message; a job's chunk whole) to one worker;
  if a row ends the worker, only that row carries the failure and the rest of the
  batch goes on in a fresh worker;
* single-case calls to one key that wait for a worker together are coalesced into one
  batch (:mod:`evaluator_host.sandbox.coalesce`), each call still getting its own row.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from evaluator_host.errors import ResponseTooLarge, SandboxError
from evaluator_host.observability import tracing
from evaluator_host.observability.metrics import Metrics
from evaluator_host.sandbox.base import RawOutcome, RuntimeKey, SandboxBackend, Worker, WorkerSpec, error_info
from evaluator_host.sandbox.coalesce import Coalescer, Group
from evaluator_host.sandbox.leasing import Leasing, Slot
from evaluator_host.sandbox.protocol import FrameReader, FrameTooLarge, JobCases, WireCase, encode_frame, read_frame
from evaluator_host.sandbox.replies import Foreign, Unanswered, bulk_outcomes, failure, hard_timeout
from evaluator_host.sandbox.spares import Spares
from evaluator_host.settings import Settings

__all__ = ["PoolStats", "WorkerPool", "load_frame"]

_LOAD_TIMEOUT_S = 60.0
# a bound worker answers "loading" as soon as it reads its load frame; silence this long means it
# is frozen (a paused container, a SIGSTOPped process) or wedged, not that the user's code is slow
_ACK_TIMEOUT_S = 15.0
_FRAME_OVERHEAD = 64 * 1024
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


def _send(worker: Worker, data: bytes) -> None:
    """Write ``data`` to ``worker``'s channel; ``ConnectionResetError`` when the channel is closed already
    (a worker killed from outside whose pipe the loop has seen close: uvloop raises ``RuntimeError`` on
    such a write, asyncio drops it), so that every caller treats it as the dead worker it is."""
    if worker.writer.is_closing():
        raise ConnectionResetError("the worker's channel is closed")
    worker.writer.write(data)


class WorkerPool(Leasing):
    """Binds warm workers per key (leasing them by :class:`Leasing`'s rules) and runs cases on them."""

    def __init__(self, backend: SandboxBackend, settings: Settings, metrics: Metrics | None = None) -> None:
        super().__init__(settings, metrics)
        self.backend = backend
        self._backend_name = backend.name
        self._started = 0
        self._sweeper: asyncio.Task[None] | None = None
        self._starts = self.metrics.worker_starts.labels(backend.name)
        self.spares = Spares(backend, settings, self._reap, self._starts.inc, self.fits)
        self.metrics.watch_pool(self._states)
        self._ids = random.Random(os.urandom(16))  # request ids: unpredictable to a sandbox, cheap here
        self.coalescer = Coalescer()

    # -- spares --------------------------------------------------------------------------
    def warm(self, runtime: RuntimeKey) -> None:
        """Keep ``spare_workers`` unbound workers of ``runtime`` started (in the background)."""
        self._sweep_soon()
        self.spares.warm(runtime)

    def _spare_mb(self) -> int:
        return self.spares.memory_mb()

    def _drop_spare(self) -> bool:
        return self.spares.drop_one()

    def _sweep_soon(self) -> None:
        if self._sweeper is None and not self._closed:
            self._sweeper = asyncio.ensure_future(self._sweep())

    # -- binding ---------------------------------------------------------------------------
    def _states(self) -> dict[str, int]:
        idle = sum(len(v) for v in self._idle.values())
        return {"busy": self._count - idle, "idle": idle, "spare": self.spares.count()}

    def stats(self) -> PoolStats:
        """Current worker counts."""
        idle = sum(len(v) for v in self._idle.values())
        return PoolStats(workers=self._count, idle=idle, started=self._started, spares=self.spares.count())

    async def _start(self, spec: WorkerSpec, *, retry: bool = True, fresh: bool = False) -> Slot:
        """A worker bound to ``spec`` that answered its load: a spare of its runtime (unless
        ``fresh``), else a new one.

        One that dies before it answers (e.g. a spare container removed from outside), or says
        nothing at all within :data:`_ACK_TIMEOUT_S` (a paused container, a stopped process), is
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
                worker.egress.bind(spec.workspace, spec.network, spec.headers)
            _send(worker, load_frame(spec))
            await worker.writer.drain()
        except (SandboxError, ConnectionError, OSError):
            if worker is not None:
                await worker.kill()
            if not retry or self._closed:
                raise
            return await self._start(spec, retry=False, fresh=True)
        limit = spec.output_limit * 2 + _FRAME_OVERHEAD
        try:
            try:
                async with asyncio.timeout(_ACK_TIMEOUT_S):
                    ready = await read_frame(worker.reader, limit)
            except TimeoutError:
                ready = None  # not a word: frozen or wedged (the user's code has not even started)
            if ready is None and retry and not self._closed:
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

    async def _sweep(self) -> None:
        while not self._closed:
            await asyncio.sleep(min(5.0, self.settings.idle_ttl_s / 2))
            await self.sweep()

    async def sweep(self, now: float | None = None) -> None:
        """One pass of the idle sweeper (which runs it every ``min(5, idle_ttl_s / 2)`` s): discard
        idle workers and the spares of runtimes unused for more than ``idle_ttl_s`` as of ``now``
        (default: ``time.monotonic()``), and spares that died while they waited."""
        now = time.monotonic() if now is None else now
        self.spares.sweep(now)
        await self.sweep_idle(now)

    async def _acquire_traced(self, spec: WorkerSpec) -> Slot:
        """A worker for ``spec`` (:meth:`_acquire`) in a ``pool.acquire`` span: the wait for a worker of its
        key, or its start (then a ``worker.start`` span inside)."""
        if not tracing.enabled():
            return await self._acquire(spec)
        with tracing.span("pool.acquire"):
            return await self._acquire(spec)

    async def prewarm(self, spec: WorkerSpec) -> None:
        """Start a worker for ``spec`` ahead of its first evaluation (best effort)."""
        self._sweep_soon()
        with contextlib.suppress(SandboxError):
            slot = await self._acquire(spec)
            await self._release(slot, healthy=True)

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
    ) -> list[RawOutcome]:
        """Run ``cases`` on warm workers of ``spec``; one outcome per case, in order.

        With ``held_replies`` (job chunks, whose caller waits for every outcome anyway) the harness
        may hold the replies of fast cases back and write them together (the protocol's
        ``flush_ms``); a worker that dies holding replies has its unanswered cases run again
        one reply at a time, so every failure is still the outcome of the case that caused it.
        ``job_cases``: the cases are a job's rows, sent as :class:`JobCases` says.

        With ``max_bytes``, the replies of the whole call may add up to that many bytes: past it
        the call stops (its worker is discarded) with :class:`ResponseTooLarge`, so what one
        call holds in memory stays bounded whatever the evaluator returns or prints.
        """
        self._sweep_soon()
        only = cases[0] if len(cases) == 1 and self.settings.coalesce and job_cases is None else None
        if isinstance(only, dict) and (max_bytes is None or max_bytes >= self._frame_max(spec)):
            # one reply can't exceed this call's budget: it may share a frame with other calls
            key = (spec.key, timeout_s, correct_answer_key)

            async def runner(group: Group) -> list[RawOutcome]:
                slot = await self._acquire_traced(spec)
                return await self._run_rows(spec, self.coalescer.seal(group), timeout_s, correct_answer_key, slot)

            return [await self.coalescer.submit(key, only, runner, self.coalesce_limit(spec.key))]
        flush_ms = _FLUSH_MS if held_replies else 0.0
        return await self._run_rows(spec, cases, timeout_s, correct_answer_key, None, max_bytes, flush_ms, job_cases)

    @staticmethod
    def _frame_max(spec: WorkerSpec) -> int:
        return spec.output_limit * 2 + spec.result_limit + _FRAME_OVERHEAD

    async def _run_rows(
        self,
        spec: WorkerSpec,
        cases: Sequence[WireCase],
        timeout_s: float,
        correct_answer_key: str,
        slot: Slot | None,
        max_bytes: int | None = None,
        flush_ms: float = 0.0,
        job_cases: JobCases | None = None,
    ) -> list[RawOutcome]:
        """Every row of ``cases`` in batches (the first on ``slot`` when given); outcomes in order. A job's
        chunk (``flush_ms``) goes whole, in one message: the worker runs it without waiting for the host
        between batches (its replies come back in bursts anyway)."""
        results: list[RawOutcome | None] = [None] * len(cases)
        pending = list(range(len(cases)))
        budget = [max_bytes]
        size = max(self.settings.batch_size, len(cases)) if flush_ms else self.settings.batch_size
        while pending:
            batch, pending = pending[:size], pending[size:]
            held = flush_ms
            while batch:
                try:
                    done = await self._run_batch(
                        spec, cases, batch, timeout_s, correct_answer_key, results, budget, slot, held, job_cases
                    )
                except Unanswered as lost:  # the worker died holding replies: the rest, one reply at a time
                    done, held = lost.done, 0.0
                slot = None
                batch = batch[done:]
        return [r for r in results if r is not None]

    async def _run_batch(
        self,
        spec: WorkerSpec,
        cases: Sequence[WireCase],
        batch: list[int],
        timeout_s: float,
        correct_answer_key: str,
        results: list[RawOutcome | None],
        budget: list[int | None],
        slot: Slot | None = None,
        flush_ms: float = 0.0,
        job_cases: JobCases | None = None,
    ) -> int:
        """Run ``batch`` on one worker (``slot``, else one acquired now); return how many of its rows
        now have an outcome. With ``flush_ms``, a worker lost to a timeout or an exit raises
        :class:`Unanswered` instead of blaming the next row (it may have died holding replies)."""
        slot = slot or await self._acquire_traced(spec)
        if slot.load_error is not None:
            status = "timeout" if slot.load_error.get("type") == "Timeout" else "error"
            for index in batch:
                results[index] = RawOutcome(status=status, error=slot.load_error)
            await self._release(slot, healthy=status == "error")
            return len(batch)
        worker = slot.worker
        frames = FrameReader(worker.reader, self._frame_max(spec))
        done = 0
        healthy = False  # only a batch that finished cleanly leaves the worker reusable
        oom_before = slot.oom_seen
        request = f"{self._ids.getrandbits(64):016x}"  # every reply must carry it, with its index in the batch
        span = tracing.start_span("worker.run", {"evaluator_host.backend": self._backend_name})
        try:
            run = {"op": "run", "id": request, "correct_answer_key": correct_answer_key, "timeout_s": timeout_s}
            if flush_ms:
                run["flush_ms"] = flush_ms
            sent = [cases[i] for i in batch]
            _send(worker, encode_frame({**run, "cases": sent}) if job_cases is None else job_cases.run_frame(run, sent))
            await worker.writer.drain()
            wait_s = hard_timeout(timeout_s, slot.soft_timeouts)
            while done < len(batch):
                index = batch[done]
                reply = await frames.next(wait_s)
                if reply.get("id") != request or reply.get("index") != done:
                    raise Foreign(reply)
                if budget[0] is not None:
                    budget[0] -= frames.last_size
                    if budget[0] < 0:
                        raise ResponseTooLarge(
                            f"the results of this call exceed max_response_bytes (EVALUATOR_HOST_MAX_RESPONSE_BYTES) "
                            f"after {index + 1} of {len(cases)} cases; run them as a job (POST /v1/jobs), whose "
                            "results are stored and read in pages"
                        )
                raw = worker.take_raw_output()
                egress = worker.egress.take() if worker.egress is not None else []
                if reply.get("type") == "results":  # consecutive plain ok replies in one frame
                    first = done
                    done = bulk_outcomes(reply, batch, done, results)
                    head = results[batch[first]]
                    assert head is not None
                    head.stderr, head.egress = raw, egress  # what arrived beside the frame: its first case's
                    slot.uses += done - first
                    continue
                results[index] = RawOutcome(
                    status=reply.get("status", "invalid_result"),
                    value=reply.get("value"),
                    error=reply.get("error"),
                    stdout=reply.get("stdout", ""),
                    stderr=reply.get("stderr", "") + raw,
                    truncated=bool(reply.get("truncated")),
                    duration_ms=float(reply.get("duration_ms", 0.0)),
                    egress=egress,
                )
                slot.uses += 1
                done += 1
                if reply.get("status") == "memory_limit" or reply.get("retire"):
                    # the heap may be fragmented or near its limit, or the harness is leaving
                    # (process.exit): the rest of the batch goes to a fresh worker
                    break
            else:
                # processes the batch started must not outlive it, whatever user code did to the harness;
                # nothing may follow the last reply (a frame written later belongs to no request)
                healthy = not frames.pending() and await worker.reap_strays()
                slot.oom_seen = worker.oom_kills()
                if slot.oom_seen > oom_before:  # cgroup v1 kills one process, maybe not the harness
                    healthy = False
                    message = f"a process of the worker exceeded memory_mb={spec.memory_mb} during this batch"
                    for index in batch:
                        results[index] = failure("memory_limit", "MemoryLimit", message)
        except Foreign:
            await worker.kill()
            results[batch[done]] = failure(
                "error",
                "ProtocolError",
                "the worker sent a reply that belongs to no pending request (it was discarded, and the worker "
                "replaced: code that writes to the harness's channel cannot reach another request)",
            )
            done += 1
        except TimeoutError:
            await worker.kill()
            if flush_ms:
                raise Unanswered(done) from None
            results[batch[done]] = failure(
                "timeout",
                "Timeout",
                f"the evaluation exceeded timeout_s={timeout_s:g}",
                duration_ms=timeout_s * 1000.0,
            )
            done += 1
        except FrameTooLarge:
            await worker.kill()
            results[batch[done]] = failure("output_limit", "OutputLimit", "the worker's reply exceeded the output caps")
            done += 1
        except (asyncio.IncompleteReadError, ConnectionError, BrokenPipeError):
            info = await worker.kill()
            if flush_ms:
                raise Unanswered(done) from None
            if worker.output_overflow.is_set():
                results[batch[done]] = failure(
                    "output_limit",
                    "OutputLimit",
                    f"output written to the raw stdout/stderr exceeded {spec.output_limit} bytes",
                    truncated=True,
                )
            elif info.oom_killed:
                results[batch[done]] = failure(
                    "memory_limit", "MemoryLimit", f"the worker exceeded memory_mb={spec.memory_mb}"
                )
            else:
                results[batch[done]] = failure(
                    "error",
                    "WorkerExited",
                    f"the evaluator's process exited (code {info.returncode}) during the evaluation; "
                    "the next evaluation gets a fresh worker",
                    stderr=info.raw_output[-8192:],
                )
            done += 1
        finally:
            await self._release(slot, healthy)
            if span.is_recording():
                span.set_attributes({"evaluator_host.language": spec.load["language"], "evaluator_host.cases": done})
                tracing.finish(
                    span, [r.status for i in batch[:done] if (r := results[i]) is not None], sys.exc_info()[1]
                )
        return done

    async def close(self) -> None:
        """Kill every worker (spares included), then close the backend."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        await self.coalescer.close()
        spares = await self.spares.close()
        slots = [s for v in self._idle.values() for s in v]
        self._idle.clear()
        for queue in self._waiters.values():  # every waiter looks again, sees the pool closed, and leaves
            for waiter in queue:
                if not waiter.done():
                    waiter.set_result(None)
        await asyncio.gather(*(w.kill() for w in [*spares, *(s.worker for s in slots)]), return_exceptions=True)
        await asyncio.gather(*self._reapers, return_exceptions=True)
        await self.backend.close()
