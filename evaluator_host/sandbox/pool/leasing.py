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
  it has settled (:data:`SETTLED_S`), never the warm worker of a key in steady use;
* a call of a key finding no idle worker waits for a pre-warm under way (:meth:`WorkerPool.prewarm`, a saved
  revision's first worker) rather than start another, one caller per pre-warm (:meth:`Holdings.awaits_prewarm`);
* single-case calls of a key may share a batch only up to as many rows as run in a worker's
  start time (:meth:`Leasing.coalesce_limit`): slow rows keep getting workers of their own;
  the timings and failure rates these rules read are measured by :mod:`evaluator_host.sandbox.pool.key_stats`;
* memory: the workers alive at once (bound, starting, spare) hold at most the memory budget (``max_worker_memory_mb``,
  by default 75% of the machine's memory: :func:`evaluator_host.sandbox.pool.memory.budget_mb`) in ``memory_mb``; a
  start taking a spare (started, or starting for no other bind) needs none more. One that would pass it first evicts
  idle workers, least recently used first, and spares; if that is not enough, a key with workers of its own waits for
  one, and a key with none is answered :class:`~evaluator_host.errors.Overloaded` (503, Retry-After) — unless its
  workspace is within its memory share (below): it waits for the memory lent to others; or another key's pre-warm is
  starting: it waits to evict that worker once idle; a ``memory_mb`` over the whole budget is a ``LimitError`` (422);
* memory shares (issue 47.7): each workspace's fair share of the budget is the budget split over the
  workspaces holding or waiting for workers (:meth:`Holdings.memory_share`). Work-conserving: a workspace
  alone may use the whole budget; once another workspace within its share waits
  (:meth:`Holdings.starved`), the memory lent is reclaimed from the workspaces over their share: their
  idle workers are evicted first (:meth:`Holdings.memory_victims`), a worker of theirs released is
  stopped instead of kept or handed to their next call, and their new workers wait (or, for a key with
  none, are refused) first. A workspace over its share never evicts the warm worker of one within it.
  So a tenant's own limits stop it before another tenant's call is refused;
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
from collections.abc import Awaitable, Callable
from typing import Any

from evaluator_host.errors import LimitError, Overloaded, SandboxError
from evaluator_host.observability import tracing
from evaluator_host.observability.metrics import Metrics
from evaluator_host.sandbox.base import RuntimeKey, Worker, WorkerSpec
from evaluator_host.sandbox.pool.admission import WAIT_DEADLINE, waited_too_long
from evaluator_host.sandbox.pool.holdings import SETTLED_S, Holdings, Slot
from evaluator_host.sandbox.pool.key_stats import KeyStats
from evaluator_host.sandbox.pool.memory import budget_mb
from evaluator_host.settings import Settings

__all__ = ["Leasing", "Slot"]

# a *failing* key (most of its recent leases ended with the worker discarded: timeouts, crashes,
# memory kills, floods; :meth:`KeyStats.failing`) holds at most this many workers, takes over only
# workers idle a while (:data:`FAILING_IDLE_S`) or of other failing keys, and starts at most this many
# workers at once over all failing keys: a neighbour whose every call costs a container start cannot
# take the machine or the pool
_FAILING_HOLD = 2
_FAILING_STARTS = 1


def _chattered(worker: Worker) -> bool:
    """Whether an idle worker wrote something while no request was pending (it is then replaced)."""
    return bool(getattr(worker.reader, "_buffer", b""))  # asyncio.StreamReader has no public peek


class Leasing:
    """The leasing state and rules of one pool, which says how to start a worker bound to a spec
    (``start``), and what its spares hold and how to reap one for memory (``spare_mb``, ``drop_spare``)."""

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        *,
        start: Callable[[WorkerSpec], Awaitable[Slot]],
        backend_name: str = "unknown",
        spare_mb: Callable[[], int] = lambda: 0,
        drop_spare: Callable[[], bool] = lambda: False,
        spare_for: Callable[[RuntimeKey], bool] = lambda runtime: False,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self._start = start
        self._spare_mb = spare_mb  # ``memory_mb`` held by spares (started or starting)
        self._drop_spare = drop_spare  # reap one spare to free memory; False when there is none
        self._spare_for = spare_for  # whether a start of this runtime would take a spare (started or starting)
        self._backend_name = backend_name  # the label of this pool's counts
        self.stats = KeyStats()  # what leases and starts took, how often a key's leases failed
        self.holdings = Holdings(settings.max_workers, self.stats.failing)
        self.workspace_caps = self.holdings.caps  # workspace -> its max_warm_workers quota (the service's)
        self._count = 0
        # callers waiting for a worker of their key, oldest first: a released worker is handed to the
        # first of them directly (no broadcast: with hundreds waiting, waking them all per release
        # would cost more than the evaluations); None wakes one to look again (room was made)
        self._waiters: dict[str, collections.deque[asyncio.Future[Slot | None]]] = {}
        self._reapers: set[asyncio.Future[Any]] = set()
        self._closed = False
        self._failing_starts = asyncio.Semaphore(_FAILING_STARTS)
        self.memory_budget_mb = budget_mb(settings)  # None: unknown, no bound

    @property
    def closed(self) -> bool:
        """Whether the pool is shutting down (:meth:`stop`): no caller gets a worker any more."""
        return self._closed

    def counts(self) -> tuple[int, int]:
        """The bound workers (idle, leased and starting), and how many of them are idle."""
        return self._count, sum(len(slots) for slots in self.holdings.idle.values())

    def idle_now(self, key: str) -> bool:
        """Whether a worker of ``key`` is idle and no caller waits for one: :meth:`acquire` would lease it
        at once (unless it died meanwhile; then it starts or waits by the rules above)."""
        return bool(self.holdings.idle.get(key)) and not self.holdings.waiting.get(key) and not self._closed

    def failing(self, key: str) -> bool:
        """Whether most of ``key``'s recent leases ended with its worker discarded."""
        return self.stats.failing(key)

    # -- memory admission ------------------------------------------------------------------
    def live_mb(self) -> int:
        """The ``memory_mb`` of every worker alive or starting: bound (idle, leased, starting) and spare."""
        return self.holdings.bound_mb() + self._spare_mb()

    def fits(self, need_mb: int) -> bool:
        """Whether ``need_mb`` more stays within the memory budget as things are."""
        return self.memory_budget_mb is None or self.live_mb() + need_mb <= self.memory_budget_mb

    def _admit(self, need_mb: int, workspace: str) -> bool:
        """Make room for ``need_mb`` of ``workspace`` under the memory budget: spares go first, then idle
        workers (:meth:`Holdings.memory_victims`: of workspaces over their share first, then least recently
        used; they are started again when needed); False when the rest is in use or not to be taken."""
        while not self.fits(need_mb):
            if self._drop_spare():
                continue
            assert self.memory_budget_mb is not None  # fits() is always True without a budget
            idle = self.holdings.memory_victims(self.memory_budget_mb, workspace, need_mb)
            if not idle:
                return False
            victim = idle[0]
            self.holdings.idle[victim.spec.key].remove(victim)
            self.metrics.evictions.labels(self._backend_name).inc()
            self.reap(victim.worker)
            self._count -= 1  # no wake-up: the room is this caller's
        return True

    async def _start_admitted(self, spec: WorkerSpec, victim: Slot | None) -> Slot | None:
        """Start a worker for ``spec`` (in ``victim``'s place, or a new one) if the memory budget admits
        it; None, with ``victim`` back among the idle, when it does not (one taking a spare needs no more)."""
        if not self._admit(0 if self._spare_for(spec.runtime) else spec.memory_mb, spec.workspace):
            if victim is not None:
                self.holdings.idle.setdefault(victim.spec.key, []).append(victim)
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

    def _lent(self, spec: WorkerSpec) -> bool:
        """Whether a worker of ``spec`` (to start, or released) keeps memory lent from a workspace waiting for it."""
        if (budget := self.memory_budget_mb) is None or not any(self.holdings.waiting.values()):
            return False  # none is lent (Holdings.lent): every release of a pool keeping up, no sum of memory alive
        return self.holdings.lent(budget, spec.workspace, spec.memory_mb, budget - self.live_mb() - spec.memory_mb)

    def coalesce_limit(self, key: str) -> int:
        """How many single-case calls of ``key`` may share one batch (:meth:`KeyStats.coalesce_limit`)."""
        return self.stats.coalesce_limit(key, self.settings.batch_size)

    def _take_idle(self, key: str) -> Slot | None:
        slots = self.holdings.idle.get(key)
        while slots:
            slot = slots.pop()
            if not slot.worker.reader.at_eof() and not _chattered(slot.worker):
                return slot
            # it died (killed from outside, engine restarted) or spoke out of turn while idle: replace it
            self._count -= 1
            self.reap(slot.worker)
        return None

    async def acquire(self, spec: WorkerSpec, *, warm: bool = False) -> Slot:
        """A worker bound to ``spec``, leased: an idle one of its key, one handed over by a release,
        or a new one (started, or taking an evicted worker's place), by the rules above (``warm``: a
        pre-warm's, which never waits for itself)."""
        key, h = spec.key, self.holdings
        h.ws_of[key] = spec.workspace
        h.mb_of[key] = spec.memory_mb
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
                return self.holdings.lease(slot)
            if h.ws_full(key):  # at its workspace's quota: an idle worker of the workspace's, or wait
                victim = None if h.held(key) else h.evict_one(key, own_workspace=True)
                if victim is not None:
                    if (started := await self._start_admitted(spec, victim)) is not None:
                        return started
                    raise self._overloaded(spec)  # it holds none (else no victim was sought)
            prewarm = not warm and h.awaits_prewarm(key)  # its start is paid: waiting for it is no queue
            crowded = prewarm or h.ws_full(key)
            crowded = crowded or h.held(key) >= h.fair_share() and self._count >= self.settings.max_workers - 1
            crowded = crowded or h.held(key) >= h.demand_share(key)
            crowded = crowded or (self.failing(key) and h.held(key) >= _FAILING_HOLD)
            crowded = crowded or self._lent(spec)  # memory another workspace within its share waits for
            if not crowded and not self.stats.cheaper_to_wait(key, h.leased.get(key, 0), h.waiting.get(key, 0)):
                if self._count < self.settings.max_workers:
                    if (started := await self._start_admitted(spec, None)) is not None:
                        return started
                    if h.refuses(self.memory_budget_mb, spec, warm):  # no memory, nothing to wait for
                        raise self._overloaded(spec)
                else:
                    victim = h.evict_one(key)
                    if victim is not None and (started := await self._start_admitted(spec, victim)) is not None:
                        return started
                    if victim is not None and h.refuses(self.memory_budget_mb, spec, warm):
                        raise self._overloaded(spec)
            elif self._lent(spec) and not h.held(key):  # over its share while another waits: refused first
                raise self._overloaded(spec)
            waiter: asyncio.Future[Slot | None] = asyncio.get_running_loop().create_future()
            queue = self._waiters.setdefault(key, collections.deque())
            queue.append(waiter)
            h.waiting[key] = h.waiting.get(key, 0) + 1
            waited_from = time.monotonic()
            # a worker of ours will come back: wait for it, however long (an interactive call: until its
            # admission deadline); none of ours: an idle worker of another key may settle meanwhile, so look again
            deadline = None if prewarm else WAIT_DEADLINE.get()  # (what a start of its own would take)
            limit = None if h.held(key) else SETTLED_S
            if deadline is not None:
                left = max(0.0, deadline[0] - waited_from)
                limit = left if limit is None else min(limit, left)
            try:
                handed = await (waiter if limit is None else asyncio.wait_for(asyncio.shield(waiter), limit))
            except TimeoutError:
                if not waiter.done():
                    waiter.set_result(None)  # nobody handed us anything: leave the queue, look again
                    if deadline is not None and time.monotonic() >= deadline[0]:
                        raise waited_too_long(deadline[1]) from None
                    continue
                handed = waiter.result()
            except BaseException:
                if waiter.done() and not waiter.cancelled() and (given := waiter.result()) is not None:
                    await self.release(given, healthy=True)  # handed over as we were cancelled: pass it on
                raise
            finally:
                h.waiting[key] -= 1  # a cancelled waiter left in the queue is skipped when reached
            if handed is not None:
                self.metrics.pool_wait.observe(time.monotonic() - waited_from)
                return handed

    async def _start_leased(self, spec: WorkerSpec, victim: Slot | None) -> Slot:
        """Start a worker for ``spec`` in a place already counted (``victim`` gives its place up: it is
        killed in the background, so the call does not wait for a container's removal)."""
        # counted as starting before the victim goes: a caller looking meanwhile sees the place taken
        self.holdings.starting[spec.key] = self.holdings.starting.get(spec.key, 0) + 1
        if victim is not None:
            self.reap(victim.worker)
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
            self.holdings.starting[spec.key] -= 1
            if not self.holdings.starting[spec.key]:
                del self.holdings.starting[spec.key]
        if slot.load_error is None:
            self.stats.started(time.monotonic() - started)
        return self.holdings.lease(slot)

    def _hand_over(self, slot: Slot) -> bool:
        """Give a released worker to the oldest caller waiting for its key; False when none waits."""
        queue = self._waiters.get(slot.spec.key)
        while queue:
            waiter = queue.popleft()
            if not waiter.done():
                waiter.set_result(self.holdings.lease(slot))
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

    async def release(self, slot: Slot, healthy: bool) -> None:
        """Give a leased worker back: to the oldest caller waiting for its key, or idle; killed when not
        ``healthy`` (its batch did not finish cleanly), past ``max_uses``, the pool is closed, or its memory
        is lent beyond its workspace's share and another workspace within its share waits for it."""
        slot.last_used = now = time.monotonic()
        key = slot.spec.key
        rows = slot.uses - slot.uses_at_lease
        if slot.leased_at:
            took = self.holdings.unlease(slot, now)
            if rows:  # it ran cases (not a pre-warm): what a wait for it costs
                self.stats.leased(key, took, rows)
        self.stats.ended(key, healthy=healthy, ran=rows > 0, now=now)
        if healthy and slot.uses < self.settings.max_uses and not self._closed and not self._lent(slot.spec):
            if not self._hand_over(slot):
                self.holdings.idle.setdefault(key, []).append(slot)
                self._wake_one_per_key()  # another key may take it over
            return
        await slot.worker.kill()
        self._forget()

    def reap(self, worker: Worker) -> None:
        """Kill ``worker`` in the background (:meth:`close` waits for it)."""
        reaper = asyncio.ensure_future(worker.kill())
        self._reapers.add(reaper)
        reaper.add_done_callback(self._reapers.discard)

    async def sweep_idle(self, now: float) -> None:
        """Discard idle workers unused for more than ``idle_ttl_s`` as of ``now``."""
        expired: list[Slot] = []
        for slots in self.holdings.idle.values():
            for slot in [s for s in slots if now - s.last_used > self.settings.idle_ttl_s]:
                slots.remove(slot)
                expired.append(slot)
        # keys with no worker and no waiter left are forgotten, so the per-release work (a look at
        # every key's waiters, the fair share) stays proportional to the keys in use, not to every
        # key the service has seen
        h = self.holdings
        for key in {*h.idle, *h.leased, *h.waiting, *self._waiters, *self.stats.lease_s}:
            if h.unused(key):
                h.forget(key)
                self._waiters.pop(key, None)
                self.stats.forget(key)
        self.stats.expire(now, self.settings.idle_ttl_s)
        for slot in expired:
            await slot.worker.kill()
            self._forget()

    def stop(self) -> None:
        """No caller gets a worker any more; a worker released from now on is killed."""
        self._closed = True

    def close(self) -> list[Slot]:
        """Stop (:meth:`stop`), wake every waiter (it looks again, sees the pool closed, and leaves) and
        answer the idle workers, which the caller kills."""
        self._closed = True
        slots = [slot for slots in self.holdings.idle.values() for slot in slots]
        self.holdings.idle.clear()
        for queue in self._waiters.values():
            for waiter in queue:
                if not waiter.done():
                    waiter.set_result(None)
        return slots

    async def reaped(self) -> None:
        """Wait until every worker killed in the background (:meth:`reap`) is gone."""
        await asyncio.gather(*self._reapers, return_exceptions=True)
