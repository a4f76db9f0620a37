"""Leasing: which caller gets which warm worker, and when — the pool's policy, for every backend.

Rules:

* at most ``max_workers`` bound workers exist; a key (one revision on one runtime with its
  limits) gets an idle worker of its own first;
* a key whose workers are all busy gets another one only when waiting for one of them would
  take longer than starting one (running means of each key's lease time and of a worker's
  start-and-bind time), so a burst of fast calls queues on the warm workers instead of starting
  and evicting more; a released worker is handed straight to the key's oldest waiter;
* no key grows past its fair share (the pool split over the keys in demand) while the pool is
  full, nor past the pool split over the keys running or waiting now while others are, so a key
  whose calls hang, crash or just take long cannot take the workers of the others;
* when full, an idle worker of another key is evicted — of the key holding the most workers,
  least recently used first; a key that holds workers takes only from one holding two more or
  more than its share, and a key with none takes an idle worker of a key nobody waits for once
  it has settled (:data:`_SETTLED_S`), never the warm worker of a key in steady use;
* single-case calls of a key may share a batch only up to as many rows as run in a worker's
  start time (:meth:`Leasing.coalesce_limit`): slow rows keep getting workers of their own;
* memory: the workers alive at once (bound, starting, spare) hold at most the memory budget
  (:func:`evaluator_host.sandbox.memory.budget_mb`: ``max_worker_memory_mb``, by default 75% of the
  machine's memory) in ``memory_mb``. A start that would pass it first evicts idle workers, least
  recently used first, and spares; when that is not enough, a key with workers of its own waits for
  one, and a key with none is answered :class:`~evaluator_host.errors.Overloaded` (503, Retry-After);
  a ``memory_mb`` larger than the whole budget is a ``LimitError`` (422);
* workspaces: every key belongs to one (``WorkerSpec.workspace``; keys never span two, so no
  worker is ever shared across workspaces). A workspace's keys hold at most its
  ``max_warm_workers`` quota (:attr:`Leasing.workspace_caps`): a key of a workspace at its cap
  takes an idle worker of its own workspace or waits. And a workspace's idle workers are evicted
  for another workspace's key only while it holds more than its share — the pool split over the
  workspaces holding or wanting workers — so one workspace's burst never takes another's warm
  workers below that share.
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass, field
from typing import Any

from evaluator_host.errors import LimitError, Overloaded, SandboxError
from evaluator_host.observability import tracing
from evaluator_host.observability.metrics import Metrics
from evaluator_host.sandbox.base import Worker, WorkerSpec
from evaluator_host.sandbox.memory import budget_mb
from evaluator_host.settings import Settings

__all__ = ["Leasing", "Slot"]

# idle this long, a worker of a key nobody waits for may go to a key that has none (a key in steady
# use reuses its workers within milliseconds); a waiter looks again at least this often
_SETTLED_S = 0.05
# a *failing* key (most of its recent leases ended with the worker discarded: timeouts, crashes,
# memory kills, floods) holds at most this many workers, takes over only workers idle this long
# or of other failing keys, and starts at most this many workers at once over all failing keys:
# a neighbour whose every call costs a container start cannot take the machine or the pool
_FAILING_RATE = 0.5
_FAILING_HOLD = 2
_FAILING_IDLE_S = 1.0
_FAILING_STARTS = 1


@dataclass
class Slot:
    """A bound worker and what the pool knows of it."""

    worker: Worker
    spec: WorkerSpec
    uses: int = 0
    last_used: float = field(default_factory=time.monotonic)
    leased_at: float = 0.0
    uses_at_lease: int = 0
    oom_seen: int = 0  # the worker's OOM-kill count after its last clean batch
    load_error: dict[str, Any] | None = None
    soft_timeouts: bool = False  # its harness interrupts a case at its timeout and stays warm


def _chattered(worker: Worker) -> bool:
    """Whether an idle worker wrote something while no request was pending (it is then replaced)."""
    return bool(getattr(worker.reader, "_buffer", b""))  # asyncio.StreamReader has no public peek


class Leasing:
    """The leasing state and rules; a subclass says how to start a worker bound to a spec (``_start``)."""

    def __init__(self, settings: Settings, metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.metrics = metrics or Metrics()
        self._backend_name = "unknown"  # the label of this pool's counts (set by the pool)
        self._idle: dict[str, list[Slot]] = {}
        self._count = 0
        # callers waiting for a worker of their key, oldest first: a released worker is handed to the
        # first of them directly (no broadcast: with hundreds waiting, waking them all per release
        # would cost more than the evaluations); None wakes one to look again (room was made)
        self._waiters: dict[str, collections.deque[asyncio.Future[Slot | None]]] = {}
        self._reapers: set[asyncio.Future[Any]] = set()
        self._closed = False
        self._leased: dict[str, int] = {}  # key -> its workers running a batch now
        self._waiting: dict[str, int] = {}  # key -> callers waiting for one of its workers
        self._starting: dict[str, int] = {}  # key -> its workers being started now
        self._lease_s: dict[str, float] = {}  # key -> running mean of a lease's duration
        self._row_s: dict[str, float] = {}  # key -> running mean of one row's share of a lease
        self._start_s: float | None = None  # running mean of starting and binding a worker
        self._fail_rate: dict[str, float] = {}  # key -> running mean of "the lease discarded its worker"
        self._failed_at: dict[str, float] = {}  # key -> when a lease of it last discarded its worker
        self._failing_starts = asyncio.Semaphore(_FAILING_STARTS)
        self.workspace_caps: dict[str, int | None] = {}  # workspace -> its max_warm_workers quota
        self._ws_of: dict[str, str] = {}  # key -> its workspace
        self._mb_of: dict[str, int] = {}  # key -> its workers' memory_mb
        self.memory_budget_mb = budget_mb(settings)  # None: unknown, no bound

    async def _start(self, spec: WorkerSpec) -> Slot:
        raise NotImplementedError

    def _held(self, key: str) -> int:
        """Workers of ``key``: idle, leased, and starting (a burst of calls sees its own starts)."""
        return len(self._idle.get(key, ())) + self._leased.get(key, 0) + self._starting.get(key, 0)

    def failing(self, key: str) -> bool:
        """Whether most of ``key``'s recent leases ended with its worker discarded."""
        return self._fail_rate.get(key, 0.0) > _FAILING_RATE

    def _fair_share(self) -> int:
        """Workers one key may hold while other keys want some: the pool split over the keys in demand."""
        active = {k for k, n in self._leased.items() if n} | {k for k, n in self._waiting.items() if n}
        active |= {k for k, slots in self._idle.items() if slots}
        return max(1, self.settings.max_workers // max(1, len(active)))

    def _demand_share(self, key: str) -> int:
        """What ``key`` may hold while other keys are running or waiting too: the pool split over the
        keys in demand (a key whose calls take long must not fill the free room the others will need
        as soon as they get busy); the whole pool when ``key`` is alone."""
        demand = {k for table in (self._leased, self._waiting, self._starting) for k, n in table.items() if n}
        demand.add(key)
        return max(1, self.settings.max_workers // len(demand))

    def _ws_held(self) -> dict[str, int]:
        """Workers held per workspace (idle, leased, starting), with the workspaces waiting for one."""
        held: dict[str, int] = {}
        for key in {*self._idle, *self._leased, *self._starting}:
            if n := self._held(key):
                ws = self._ws_of.get(key, "")
                held[ws] = held.get(ws, 0) + n
        for key, n in self._waiting.items():
            if n:
                held.setdefault(self._ws_of.get(key, ""), 0)
        return held

    def _ws_full(self, key: str) -> bool:
        """Whether ``key``'s workspace holds its ``max_warm_workers`` quota already."""
        cap = self.workspace_caps.get(self._ws_of.get(key, ""))
        return cap is not None and self._ws_held().get(self._ws_of.get(key, ""), 0) >= cap

    def _evict_one(self, key: str, *, own_workspace: bool = False) -> Slot | None:
        """An idle worker of another key to make room for ``key``: of the key holding the most workers,
        least recently used first. A key that holds workers already only takes from a key holding at
        least two more, or more than its fair share (so keys never trade workers back and forth); one
        that holds none may also take a worker idle for a while (:data:`_SETTLED_S`) of a key nobody
        waits for — never the warm worker of a key in steady use."""
        mine, share = self._held(key), self._fair_share()
        failing = self.failing(key)
        settled = time.monotonic() - (_FAILING_IDLE_S if failing else _SETTLED_S)
        workspace = self._ws_of.get(key, "")
        ws_held = self._ws_held()
        ws_share = max(1, self.settings.max_workers // max(1, len(ws_held | {workspace: 0})))

        def takeable(slot: Slot) -> bool:
            k = slot.spec.key
            other = slot.spec.workspace
            if other != workspace and (own_workspace or ws_held.get(other, 0) <= ws_share):
                return False  # another workspace's worker, and it holds no more than its share
            held = self._held(k)
            spare_time = mine == 0 and not self._waiting.get(k) and slot.last_used < settled
            if failing and not self.failing(k):
                return spare_time  # a failing key never takes a healthy key's worker in use
            return held >= mine + 2 or held > share or spare_time

        candidates = [s for k, slots in self._idle.items() if k != key for s in slots if takeable(s)]
        if not candidates:
            return None
        victim = min(candidates, key=lambda s: (-self._held(s.spec.key), s.last_used))
        self._idle[victim.spec.key].remove(victim)
        return victim

    # -- memory admission ------------------------------------------------------------------
    def _spare_mb(self) -> int:
        """``memory_mb`` held by spares (started or starting); the pool's spares say."""
        return 0

    def _drop_spare(self) -> bool:
        """Reap one spare to free memory; False when there is none (the pool's spares say)."""
        return False

    def live_mb(self) -> int:
        """The ``memory_mb`` of every worker alive or starting: bound (idle, leased, starting) and spare."""
        keys = {*self._idle, *self._leased, *self._starting}
        return sum(self._held(k) * self._mb_of.get(k, 0) for k in keys) + self._spare_mb()

    def fits(self, need_mb: int) -> bool:
        """Whether ``need_mb`` more stays within the memory budget as things are."""
        return self.memory_budget_mb is None or self.live_mb() + need_mb <= self.memory_budget_mb

    def _admit(self, need_mb: int) -> bool:
        """Make room for ``need_mb`` under the memory budget: spares go first, then idle workers, least
        recently used first (they are started again when needed); False when the rest is in use."""
        while not self.fits(need_mb):
            if self._drop_spare():
                continue
            idle = [slot for slots in self._idle.values() for slot in slots]
            if not idle:
                return False
            victim = min(idle, key=lambda slot: slot.last_used)
            self._idle[victim.spec.key].remove(victim)
            self.metrics.evictions.labels(self._backend_name).inc()
            self._reap(victim.worker)
            self._count -= 1  # no wake-up: the room is this caller's
        return True

    async def _start_admitted(self, spec: WorkerSpec, victim: Slot | None) -> Slot | None:
        """Start a worker for ``spec`` (in ``victim``'s place, or a new one) if the memory budget admits
        it; None, with ``victim`` back among the idle, when it does not."""
        if not self._admit(spec.memory_mb):
            if victim is not None:
                self._idle.setdefault(victim.spec.key, []).append(victim)
            return None
        if victim is not None:
            self.metrics.evictions.labels(self._backend_name).inc()
        else:
            self._count += 1
        return await self._start_leased(spec, victim)

    def _overloaded(self, spec: WorkerSpec) -> Overloaded:
        return Overloaded(
            f"the workers alive hold {self.live_mb()} MiB of the {self.memory_budget_mb} MiB this machine admits "
            f"for workers (max_worker_memory_mb) and none is idle: a worker of memory_mb={spec.memory_mb} does "
            "not fit now; retry shortly"
        )

    def _cheaper_to_wait(self, key: str) -> bool:
        """Whether one of ``key``'s busy workers is likely free sooner than a new one would start."""
        leased, lease_s = self._leased.get(key, 0), self._lease_s.get(key)
        if not leased or lease_s is None or self._start_s is None:
            return False
        expected_wait = lease_s * (self._waiting.get(key, 0) + 1) / leased
        return expected_wait < self._start_s

    def coalesce_limit(self, key: str) -> int:
        """How many single-case calls of ``key`` may share one batch: as many rows as run in the time a
        worker takes to start (queueing behind them costs less than the start that would otherwise be
        worth it), at most ``batch_size``; 1 (no sharing) until both times are known."""
        row_s = self._row_s.get(key)
        if row_s is None or self._start_s is None:
            return 1
        return max(1, min(self.settings.batch_size, int(self._start_s / max(row_s, 1e-6))))

    def _lease(self, slot: Slot) -> Slot:
        self._leased[slot.spec.key] = self._leased.get(slot.spec.key, 0) + 1
        slot.leased_at, slot.uses_at_lease = time.monotonic(), slot.uses
        return slot

    def _take_idle(self, key: str) -> Slot | None:
        slots = self._idle.get(key)
        while slots:
            slot = slots.pop()
            if not slot.worker.reader.at_eof() and not _chattered(slot.worker):
                return slot
            # it died (killed from outside, engine restarted) or spoke out of turn while idle: replace it
            self._count -= 1
            self._reap(slot.worker)
        return None

    async def _acquire(self, spec: WorkerSpec) -> Slot:
        """A worker bound to ``spec``, leased: an idle one of its key, one handed over by a release,
        or a new one (started, or taking an evicted worker's place), by the rules above."""
        key = spec.key
        self._ws_of[key] = spec.workspace
        self._mb_of[key] = spec.memory_mb
        if self.memory_budget_mb is not None and spec.memory_mb > self.memory_budget_mb:
            raise LimitError(
                f"memory_mb={spec.memory_mb} exceeds the {self.memory_budget_mb} MiB this machine admits for all "
                "its workers together (max_worker_memory_mb)"
            )
        while True:
            if self._closed:
                raise SandboxError("the service is shutting down")
            slot = self._take_idle(key)
            if slot is not None:
                return self._lease(slot)
            if self._ws_full(key):  # at its workspace's quota: an idle worker of the workspace's, or wait
                victim = None if self._held(key) else self._evict_one(key, own_workspace=True)
                if victim is not None:
                    if (started := await self._start_admitted(spec, victim)) is not None:
                        return started
                    raise self._overloaded(spec)  # it holds none (else no victim was sought)
            crowded = self._ws_full(key)
            crowded = crowded or self._held(key) >= self._fair_share() and self._count >= self.settings.max_workers - 1
            crowded = crowded or self._held(key) >= self._demand_share(key)
            crowded = crowded or (self.failing(key) and self._held(key) >= _FAILING_HOLD)
            if not crowded and not self._cheaper_to_wait(key):
                if self._count < self.settings.max_workers:
                    if (started := await self._start_admitted(spec, None)) is not None:
                        return started
                    if not self._held(key):  # no memory for it, and no worker of its own to wait for
                        raise self._overloaded(spec)
                else:
                    victim = self._evict_one(key)
                    if victim is not None and (started := await self._start_admitted(spec, victim)) is not None:
                        return started
                    if victim is not None and not self._held(key):
                        raise self._overloaded(spec)
            waiter: asyncio.Future[Slot | None] = asyncio.get_running_loop().create_future()
            queue = self._waiters.setdefault(key, collections.deque())
            queue.append(waiter)
            self._waiting[key] = self._waiting.get(key, 0) + 1
            waited_from = time.monotonic()
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
                self.metrics.pool_wait.observe(time.monotonic() - waited_from)
                return handed

    async def _start_leased(self, spec: WorkerSpec, victim: Slot | None) -> Slot:
        """Start a worker for ``spec`` in a place already counted (``victim`` gives its place up: it is
        killed in the background, so the call does not wait for a container's removal)."""
        # counted as starting before the victim goes: a caller looking meanwhile sees the place taken
        self._starting[spec.key] = self._starting.get(spec.key, 0) + 1
        if victim is not None:
            self._reap(victim.worker)
        started = time.monotonic()
        try:
            traced: tracing.Attributes = {
                "evaluator_host.backend": self._backend_name,
                "evaluator_host.eviction": victim is not None,
            }
            with tracing.span("worker.start", traced):  # (a spare bound, or a worker started)
                if self.failing(spec.key):
                    async with self._failing_starts:
                        slot = await self._start(spec)
                else:
                    slot = await self._start(spec)
        except BaseException:
            self._forget()
            raise
        finally:
            self._starting[spec.key] -= 1
            if not self._starting[spec.key]:
                del self._starting[spec.key]
        if slot.load_error is None:
            took = time.monotonic() - started
            self._start_s = took if self._start_s is None else 0.8 * self._start_s + 0.2 * took
        return self._lease(slot)

    def _hand_over(self, slot: Slot) -> bool:
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

    def _forget(self) -> None:
        self._count -= 1
        self._wake_one_per_key()

    async def _release(self, slot: Slot, healthy: bool) -> None:
        slot.last_used = now = time.monotonic()
        key = slot.spec.key
        if slot.leased_at:
            self._leased[key] -= 1
            took, slot.leased_at = now - slot.leased_at, 0.0
            if slot.uses > slot.uses_at_lease:  # it ran cases (not a pre-warm): what a wait for it costs
                mean = self._lease_s.get(key)
                self._lease_s[key] = took if mean is None else 0.8 * mean + 0.2 * took
                row = took / (slot.uses - slot.uses_at_lease)
                mean = self._row_s.get(key)
                self._row_s[key] = row if mean is None else 0.8 * mean + 0.2 * row
        if not healthy:
            self._fail_rate[key] = 0.7 * self._fail_rate.get(key, 0.0) + 0.3
            self._failed_at[key] = now
        elif key in self._fail_rate and slot.uses > slot.uses_at_lease:  # a clean batch: the rate decays
            self._fail_rate[key] *= 0.7
        if healthy and slot.uses < self.settings.max_uses and not self._closed:
            if not self._hand_over(slot):
                self._idle.setdefault(key, []).append(slot)
                self._wake_one_per_key()  # another key may take it over
            return
        await slot.worker.kill()
        self._forget()

    def _reap(self, worker: Worker) -> None:
        reaper = asyncio.ensure_future(worker.kill())
        self._reapers.add(reaper)
        reaper.add_done_callback(self._reapers.discard)

    async def sweep_idle(self, now: float) -> None:
        """Discard idle workers unused for more than ``idle_ttl_s`` as of ``now``."""
        expired: list[Slot] = []
        for slots in self._idle.values():
            for slot in [s for s in slots if now - s.last_used > self.settings.idle_ttl_s]:
                slots.remove(slot)
                expired.append(slot)
        # keys with no worker and no waiter left are forgotten, so the per-release work (a look at
        # every key's waiters, the fair share) stays proportional to the keys in use, not to every
        # key the service has seen
        seen = {*self._idle, *self._leased, *self._waiting, *self._waiters, *self._lease_s}
        for key in seen:
            if not self._idle.get(key) and not self._leased.get(key) and not self._waiting.get(key):
                for table in (self._idle, self._leased, self._waiting, self._waiters, self._lease_s, self._row_s):
                    table.pop(key, None)
                self._ws_of.pop(key, None)
                self._mb_of.pop(key, None)
        for key in [k for k, t in self._failed_at.items() if now - t > self.settings.idle_ttl_s]:
            self._failed_at.pop(key)  # a key that failed long ago and was not used since starts afresh
            self._fail_rate.pop(key, None)
        for slot in expired:
            await slot.worker.kill()
            self._forget()
