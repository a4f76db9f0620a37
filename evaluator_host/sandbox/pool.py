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
* at most ``max_workers`` bound workers exist; when full, an *idle* worker of another key is
  evicted — of the key holding the most workers, least recently used first, so one key's burst
  takes workers from the keys that have many, not the last warm worker of every other key —
  otherwise the caller waits;
* a key whose workers are all busy gets another one only when waiting for one of them would
  take longer than starting one: the pool keeps a running mean of each key's lease time and of
  a worker's start-and-bind time, so a burst of fast calls queues on the warm workers instead of
  starting (and evicting) more;
* a worker is discarded after any timeout, crash, output flood or memory kill, after
  ``max_uses`` evaluations, and after ``idle_ttl_s`` without use;
* the rows of one call are sent in batches (``batch_size`` per message) to one worker;
  if a row ends the worker, only that row carries the failure and the rest of the
  batch goes on in a fresh worker.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from evaluator_host.errors import ResponseTooLarge, SandboxError
from evaluator_host.sandbox.base import RawOutcome, RuntimeKey, SandboxBackend, Worker, WorkerSpec, error_info
from evaluator_host.sandbox.protocol import FrameReader, FrameTooLarge, encode_frame, read_frame
from evaluator_host.settings import Settings

__all__ = ["PoolStats", "WorkerPool", "load_frame"]

_LOAD_TIMEOUT_S = 60.0
# idle this long, a worker of a key nobody waits for may go to a key that has none (a key in steady
# use reuses its workers within milliseconds); a waiter looks again at least this often
_SETTLED_S = 0.05
_FRAME_OVERHEAD = 64 * 1024


@dataclass
class _Slot:
    worker: Worker
    spec: WorkerSpec
    uses: int = 0
    last_used: float = field(default_factory=time.monotonic)
    leased_at: float = 0.0
    uses_at_lease: int = 0
    load_error: dict[str, Any] | None = None


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
        {"op": "load", "output_limit": spec.output_limit, "result_limit": spec.result_limit, **spec.load}
    )


def _chattered(worker: Worker) -> bool:
    """Whether an idle worker wrote something while no request was pending (it is then replaced)."""
    return bool(getattr(worker.reader, "_buffer", b""))  # asyncio.StreamReader has no public peek


class _Foreign(Exception):
    """A frame that is not the reply the pool waits for (another request's id, or another index)."""


def _failure(status: str, type_name: str, message: str, **extra: Any) -> RawOutcome:
    return RawOutcome(status=status, error=error_info(type_name, message), **extra)


class WorkerPool:
    """Leases warm workers per key and runs cases on them."""

    def __init__(self, backend: SandboxBackend, settings: Settings) -> None:
        self.backend = backend
        self.settings = settings
        self._idle: dict[str, list[_Slot]] = {}
        self._count = 0
        self._started = 0
        # callers waiting for a worker of their key, oldest first: a released worker is handed to the
        # first of them directly (no broadcast: with hundreds waiting, waking them all per release
        # would cost more than the evaluations); None wakes one to look again (room was made)
        self._waiters: dict[str, collections.deque[asyncio.Future[_Slot | None]]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._reapers: set[asyncio.Future[Any]] = set()
        self._closed = False
        self._spares: dict[RuntimeKey, list[Worker]] = {}
        self._filling: dict[RuntimeKey, int] = {}
        self._spare_used: dict[RuntimeKey, float] = {}
        self._fills: set[asyncio.Task[None]] = set()
        self._ids = random.Random(os.urandom(16))  # request ids: unpredictable to a sandbox, cheap here
        self._leased: dict[str, int] = {}  # key -> its workers running a batch now
        self._waiting: dict[str, int] = {}  # key -> callers waiting for one of its workers
        self._lease_s: dict[str, float] = {}  # key -> running mean of a lease's duration
        self._start_s: float | None = None  # running mean of starting and binding a worker

    # -- spares --------------------------------------------------------------------------
    def warm(self, runtime: RuntimeKey) -> None:
        """Keep ``spare_workers`` unbound workers of ``runtime`` started (in the background)."""
        if self._closed or self.settings.spare_workers <= 0:
            return
        self._spare_used[runtime] = time.monotonic()
        if self._sweeper is None:
            self._sweeper = asyncio.ensure_future(self._sweep())
        have = len(self._spares.get(runtime, ())) + self._filling.get(runtime, 0)
        for _ in range(self.settings.spare_workers - have):
            if not self._make_room_for_a_spare(runtime):
                break
            self._filling[runtime] = self._filling.get(runtime, 0) + 1
            task = asyncio.ensure_future(self._start_spare(runtime))
            self._fills.add(task)
            task.add_done_callback(self._fills.discard)

    def _make_room_for_a_spare(self, runtime: RuntimeKey) -> bool:
        """Whether one more spare fits under ``max_workers`` (started or starting), once the least
        recently used other runtime's spare is reaped if need be; False when none can be (the
        others are all still starting): a later ``warm`` tries again."""
        total = sum(len(v) for v in self._spares.values()) + sum(self._filling.values())
        if total < self.settings.max_workers:
            return True
        others = [k for k, v in self._spares.items() if v and k != runtime]
        if not others:
            return False
        oldest = min(others, key=lambda k: self._spare_used.get(k, 0.0))
        self._reap(self._spares[oldest].pop())
        return True

    async def _start_spare(self, runtime: RuntimeKey) -> None:
        try:
            worker = await self.backend.start_worker(runtime)
        except Exception:  # noqa: BLE001 - a spare is an optimization; the request path starts its own
            return
        finally:
            self._filling[runtime] -= 1
        if self._closed:
            await worker.kill()
            return
        self._spares.setdefault(runtime, []).append(worker)

    def _take_spare(self, runtime: RuntimeKey) -> Worker | None:
        spares = self._spares.get(runtime)
        while spares:
            worker = spares.pop()
            if not worker.reader.at_eof():
                return worker
            self._reap(worker)  # it died while it waited (killed from outside, engine restarted)
        return None

    def _reap(self, worker: Worker) -> None:
        reaper = asyncio.ensure_future(worker.kill())
        self._reapers.add(reaper)
        reaper.add_done_callback(self._reapers.discard)

    # -- leasing -------------------------------------------------------------------------
    def stats(self) -> PoolStats:
        """Current worker counts."""
        idle = sum(len(v) for v in self._idle.values())
        spares = sum(len(v) for v in self._spares.values())
        return PoolStats(workers=self._count, idle=idle, started=self._started, spares=spares)

    def _held(self, key: str) -> int:
        return len(self._idle.get(key, ())) + self._leased.get(key, 0)

    def _fair_share(self) -> int:
        """Workers one key may hold while other keys want some: the pool split over the keys in demand."""
        active = {k for k, n in self._leased.items() if n} | {k for k, n in self._waiting.items() if n}
        active |= {k for k, slots in self._idle.items() if slots}
        return max(1, self.settings.max_workers // max(1, len(active)))

    def _evict_one(self, key: str) -> _Slot | None:
        """An idle worker of another key to make room for ``key``: of the key holding the most workers,
        least recently used first. A key that holds workers already only takes from a key holding at
        least two more, or more than its fair share (so keys never trade workers back and forth); one
        that holds none may also take a worker idle for a while (:data:`_SETTLED_S`) of a key nobody
        waits for — never the warm worker of a key in steady use."""
        mine, share = self._held(key), self._fair_share()
        settled = time.monotonic() - _SETTLED_S

        def takeable(slot: _Slot) -> bool:
            k = slot.spec.key
            held = self._held(k)
            spare_time = mine == 0 and not self._waiting.get(k) and slot.last_used < settled
            return held >= mine + 2 or held > share or spare_time

        candidates = [s for k, slots in self._idle.items() if k != key for s in slots if takeable(s)]
        if not candidates:
            return None
        victim = min(candidates, key=lambda s: (-self._held(s.spec.key), s.last_used))
        self._idle[victim.spec.key].remove(victim)
        return victim

    def _cheaper_to_wait(self, key: str) -> bool:
        """Whether one of ``key``'s busy workers is likely free sooner than a new one would start."""
        leased, lease_s = self._leased.get(key, 0), self._lease_s.get(key)
        if not leased or lease_s is None or self._start_s is None:
            return False
        expected_wait = lease_s * (self._waiting.get(key, 0) + 1) / leased
        return expected_wait < self._start_s

    def _lease(self, slot: _Slot) -> _Slot:
        self._leased[slot.spec.key] = self._leased.get(slot.spec.key, 0) + 1
        slot.leased_at, slot.uses_at_lease = time.monotonic(), slot.uses
        return slot

    def _take_idle(self, key: str) -> _Slot | None:
        slots = self._idle.get(key)
        while slots:
            slot = slots.pop()
            if not slot.worker.reader.at_eof() and not _chattered(slot.worker):
                return slot
            # it died (killed from outside, engine restarted) or spoke out of turn while idle: replace it
            self._count -= 1
            self._reap(slot.worker)
        return None

    async def _acquire(self, spec: WorkerSpec) -> _Slot:
        if self._sweeper is None:
            self._sweeper = asyncio.ensure_future(self._sweep())
        key = spec.key
        while True:
            if self._closed:
                raise SandboxError("the service is shutting down")
            slot = self._take_idle(key)
            if slot is not None:
                return self._lease(slot)
            crowded = self._held(key) >= self._fair_share() and self._count >= self.settings.max_workers - 1
            if not crowded and not self._cheaper_to_wait(key):
                if self._count < self.settings.max_workers:
                    self._count += 1
                    return await self._start_leased(spec, None)
                victim = self._evict_one(key)
                if victim is not None:
                    return await self._start_leased(spec, victim)
            waiter: asyncio.Future[_Slot | None] = asyncio.get_running_loop().create_future()
            queue = self._waiters.setdefault(key, collections.deque())
            queue.append(waiter)
            self._waiting[key] = self._waiting.get(key, 0) + 1
            try:
                if self._held(key):  # a worker of ours will come back: wait for it, however long
                    handed = await waiter
                else:  # none of ours: an idle worker of another key may settle meanwhile, so look again
                    handed = await asyncio.wait_for(asyncio.shield(waiter), _SETTLED_S)
            except TimeoutError:
                if not waiter.done():
                    waiter.set_result(None)  # nobody handed us anything: leave the queue, look again
                    continue
                handed = waiter.result()
            except BaseException:
                if waiter.done() and not waiter.cancelled() and (given := waiter.result()) is not None:
                    await self._release(given, healthy=True)  # handed over as we were cancelled: pass it on
                raise
            finally:
                self._waiting[key] -= 1  # a cancelled waiter left in the queue is skipped when reached
            if handed is not None:
                return handed

    async def _start_leased(self, spec: WorkerSpec, victim: _Slot | None) -> _Slot:
        """Start a worker for ``spec`` in a place already counted (``victim`` gives its place up)."""
        if victim is not None:
            await victim.worker.kill()
        started = time.monotonic()
        try:
            slot = await self._start(spec)
        except BaseException:
            self._forget()
            raise
        if slot.load_error is None:
            took = time.monotonic() - started
            self._start_s = took if self._start_s is None else 0.8 * self._start_s + 0.2 * took
        return self._lease(slot)

    def _hand_over(self, slot: _Slot) -> bool:
        """Give a released worker to the oldest caller waiting for its key; False when none waits."""
        queue = self._waiters.get(slot.spec.key)
        while queue:
            waiter = queue.popleft()
            if not waiter.done():
                waiter.set_result(self._lease(slot))
                return True
        return False

    def _wake_one_per_key(self) -> None:
        """Room was made (a worker went away, or one went idle that another key may take over):
        the oldest waiter of every key looks again."""
        for queue in self._waiters.values():
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    break

    async def _start(self, spec: WorkerSpec, *, retry: bool = True) -> _Slot:
        """A worker bound to ``spec`` that answered its load: a spare of its runtime, else a new one.

        One that dies before it answers (e.g. a spare container removed from outside) is
        replaced once, transparently.
        """
        worker = self._take_spare(spec.runtime)
        self.warm(spec.runtime)
        self.backend.builder.touch(spec.runtime_id)
        try:
            if worker is None:
                worker = await self.backend.start_worker(spec.runtime)
                self._started += 1
            worker.set_output_limit(spec.output_limit)
            worker.writer.write(load_frame(spec))
            await worker.writer.drain()
        except (SandboxError, ConnectionError, OSError):
            if worker is not None:
                await worker.kill()
            if not retry or self._closed:
                raise
            return await self._start(spec, retry=False)
        try:
            async with asyncio.timeout(_LOAD_TIMEOUT_S):
                ready = await read_frame(worker.reader, spec.output_limit * 2 + _FRAME_OVERHEAD)
        except (TimeoutError, asyncio.IncompleteReadError, FrameTooLarge, ValueError) as exc:
            info = await worker.kill()
            if isinstance(exc, TimeoutError):
                message = f"loading the evaluator took longer than {_LOAD_TIMEOUT_S:.0f} s"
                ready = {"load_error": error_info("Timeout", message)}
            elif retry and isinstance(exc, asyncio.IncompleteReadError):
                return await self._start(spec, retry=False)
            else:
                raise SandboxError(
                    f"the worker failed to start (exit {info.returncode}): {info.raw_output[-2000:]}"
                ) from exc
        except BaseException:  # cancelled while it loads (a job cancelled or stopping): never leak it
            await asyncio.shield(worker.kill())
            raise
        return _Slot(worker, spec, load_error=ready.get("load_error"))

    def _forget(self) -> None:
        self._count -= 1
        self._wake_one_per_key()

    async def _release(self, slot: _Slot, healthy: bool) -> None:
        slot.last_used = now = time.monotonic()
        key = slot.spec.key
        if slot.leased_at:
            self._leased[key] -= 1
            took, slot.leased_at = now - slot.leased_at, 0.0
            if slot.uses > slot.uses_at_lease:  # it ran cases (not a pre-warm): what a wait for it costs
                mean = self._lease_s.get(key)
                self._lease_s[key] = took if mean is None else 0.8 * mean + 0.2 * took
        if healthy and slot.uses < self.settings.max_uses and not self._closed:
            if not self._hand_over(slot):
                self._idle.setdefault(key, []).append(slot)
                self._wake_one_per_key()  # another key may take it over
            return
        await slot.worker.kill()
        self._forget()

    async def _sweep(self) -> None:
        while not self._closed:
            await asyncio.sleep(min(5.0, self.settings.idle_ttl_s / 2))
            await self.sweep()

    async def sweep(self, now: float | None = None) -> None:
        """One pass of the idle sweeper (which runs it every ``min(5, idle_ttl_s / 2)`` s): discard
        idle workers and the spares of runtimes unused for more than ``idle_ttl_s`` as of ``now``
        (default: ``time.monotonic()``), and spares that died while they waited."""
        now = time.monotonic() if now is None else now
        expired: list[_Slot] = []
        for slots in self._idle.values():
            for slot in [s for s in slots if now - s.last_used > self.settings.idle_ttl_s]:
                slots.remove(slot)
                expired.append(slot)
        for runtime, spares in self._spares.items():
            idle = now - self._spare_used.get(runtime, 0.0) > self.settings.idle_ttl_s
            for worker in [w for w in spares if idle or w.reader.at_eof()]:
                spares.remove(worker)
                self._reap(worker)
        for key in [k for k in self._lease_s if not self._idle.get(k) and not self._leased.get(k)]:
            del self._lease_s[key]  # what is known of keys with no worker left is forgotten with them
        for slot in expired:
            await slot.worker.kill()
            self._forget()

    async def prewarm(self, spec: WorkerSpec) -> None:
        """Start a worker for ``spec`` ahead of its first evaluation (best effort)."""
        with contextlib.suppress(SandboxError):
            slot = await self._acquire(spec)
            await self._release(slot, healthy=True)

    # -- running -------------------------------------------------------------------------
    async def run(
        self,
        spec: WorkerSpec,
        cases: Sequence[dict[str, Any]],
        *,
        timeout_s: float,
        correct_answer_key: str,
        max_bytes: int | None = None,
    ) -> list[RawOutcome]:
        """Run ``cases`` on warm workers of ``spec``; one outcome per case, in order.

        With ``max_bytes``, the replies of the whole call may add up to that many bytes: past it
        the call stops (its worker is discarded) with :class:`ResponseTooLarge`, so what one
        call holds in memory stays bounded whatever the evaluator returns or prints.
        """
        results: list[RawOutcome | None] = [None] * len(cases)
        pending = list(range(len(cases)))
        budget = [max_bytes]
        while pending:
            batch, pending = pending[: self.settings.batch_size], pending[self.settings.batch_size :]
            while batch:
                done = await self._run_batch(spec, cases, batch, timeout_s, correct_answer_key, results, budget)
                batch = batch[done:]
        return [r for r in results if r is not None]

    async def _run_batch(
        self,
        spec: WorkerSpec,
        cases: Sequence[dict[str, Any]],
        batch: list[int],
        timeout_s: float,
        correct_answer_key: str,
        results: list[RawOutcome | None],
        budget: list[int | None],
    ) -> int:
        """Run ``batch`` on one worker; return how many of its rows now have an outcome."""
        slot = await self._acquire(spec)
        if slot.load_error is not None:
            status = "timeout" if slot.load_error.get("type") == "Timeout" else "error"
            for index in batch:
                results[index] = RawOutcome(status=status, error=slot.load_error)
            await self._release(slot, healthy=status == "error")
            return len(batch)
        worker = slot.worker
        frames = FrameReader(worker.reader, spec.output_limit * 2 + spec.result_limit + _FRAME_OVERHEAD)
        done = 0
        healthy = False  # only a batch that finished cleanly leaves the worker reusable
        oom_before = worker.oom_kills()
        request = f"{self._ids.getrandbits(64):016x}"  # every reply must carry it, with its index in the batch
        try:
            run = {"op": "run", "id": request, "correct_answer_key": correct_answer_key}
            worker.writer.write(encode_frame({**run, "cases": [cases[i] for i in batch]}))
            await worker.writer.drain()
            while done < len(batch):
                index = batch[done]
                reply = await frames.next(timeout_s)
                if reply.get("id") != request or reply.get("index") != done:
                    raise _Foreign(reply)
                if budget[0] is not None:
                    budget[0] -= frames.last_size
                    if budget[0] < 0:
                        raise ResponseTooLarge(
                            f"the results of this call exceed max_response_bytes (EVALUATOR_HOST_MAX_RESPONSE_BYTES) "
                            f"after {index + 1} of {len(cases)} cases; run them as a job (POST /v1/jobs), whose "
                            "results are stored and read in pages"
                        )
                raw = worker.take_raw_output()
                results[index] = RawOutcome(
                    status=reply.get("status", "invalid_result"),
                    value=reply.get("value"),
                    error=reply.get("error"),
                    stdout=reply.get("stdout", ""),
                    stderr=reply.get("stderr", "") + raw,
                    truncated=bool(reply.get("truncated")),
                    duration_ms=float(reply.get("duration_ms", 0.0)),
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
                if worker.oom_kills() > oom_before:  # cgroup v1 kills one process, maybe not the harness
                    healthy = False
                    message = f"a process of the worker exceeded memory_mb={spec.memory_mb} during this batch"
                    for index in batch:
                        results[index] = _failure("memory_limit", "MemoryLimit", message)
        except _Foreign:
            await worker.kill()
            results[batch[done]] = _failure(
                "error",
                "ProtocolError",
                "the worker sent a reply that belongs to no pending request (it was discarded, and the worker "
                "replaced: code that writes to the harness's channel cannot reach another request)",
            )
            done += 1
        except TimeoutError:
            await worker.kill()
            results[batch[done]] = _failure(
                "timeout",
                "Timeout",
                f"the evaluation exceeded timeout_s={timeout_s:g}",
                duration_ms=timeout_s * 1000.0,
            )
            done += 1
        except FrameTooLarge:
            await worker.kill()
            results[batch[done]] = _failure(
                "output_limit", "OutputLimit", "the worker's reply exceeded the output caps"
            )
            done += 1
        except (asyncio.IncompleteReadError, ConnectionError, BrokenPipeError):
            info = await worker.kill()
            if worker.output_overflow.is_set():
                results[batch[done]] = _failure(
                    "output_limit",
                    "OutputLimit",
                    f"output written to the raw stdout/stderr exceeded {spec.output_limit} bytes",
                    truncated=True,
                )
            elif info.oom_killed:
                results[batch[done]] = _failure(
                    "memory_limit", "MemoryLimit", f"the worker exceeded memory_mb={spec.memory_mb}"
                )
            else:
                results[batch[done]] = _failure(
                    "error",
                    "WorkerExited",
                    f"the evaluator's process exited (code {info.returncode}) during the evaluation; "
                    "the next evaluation gets a fresh worker",
                    stderr=info.raw_output[-8192:],
                )
            done += 1
        finally:
            await self._release(slot, healthy)
        return done

    async def close(self) -> None:
        """Kill every worker (spares included), then close the backend."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        # spare starts may be in an engine thread a cancel would not stop: let them finish
        # (a start that finishes after close kills its own worker)
        await asyncio.gather(*self._fills, return_exceptions=True)
        slots = [s for v in self._idle.values() for s in v]
        self._idle.clear()
        for queue in self._waiters.values():  # every waiter looks again, sees the pool closed, and leaves
            for waiter in queue:
                if not waiter.done():
                    waiter.set_result(None)
        spares = [w for ws in self._spares.values() for w in ws]
        self._spares.clear()
        await asyncio.gather(*(w.kill() for w in [*spares, *(s.worker for s in slots)]), return_exceptions=True)
        await asyncio.gather(*self._reapers, return_exceptions=True)
        await self.backend.close()
