"""Who holds which warm workers, and the shares that bound what one key or workspace may take.

The tables :class:`~evaluator_host.sandbox.pool.leasing.Leasing` keeps per key — its idle workers, the ones
running a batch, being started, the callers waiting, its workspace and its workers' ``memory_mb`` —
and what follows from them alone: a key's *fair share* (the pool split over the keys in demand), its
*demand share* (the pool split over the keys running, waiting or starting now), a workspace's holdings
against its ``max_warm_workers`` cap, a workspace's *memory share* (the memory budget split over the
workspaces holding or waiting for workers: :meth:`Holdings.memory_share`) and whether a workspace within
it is waiting (:meth:`Holdings.starved`), and which idle worker of another key may be evicted for a key
(:meth:`Holdings.evict_one`, :meth:`Holdings.memory_victims`; the rules are in
:mod:`evaluator_host.sandbox.pool.leasing`'s docstring).
Nothing here starts, kills or waits.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from evaluator_host.sandbox.base import Worker, WorkerSpec

__all__ = ["FAILING_IDLE_S", "SETTLED_S", "Holdings", "Slot"]

# idle this long, a worker of a key nobody waits for may go to a key that has none (a key in steady
# use reuses its workers within milliseconds); a waiter looks again at least this often
SETTLED_S = 0.05
# a failing key takes over only workers idle this long, or of other failing keys
FAILING_IDLE_S = 1.0


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


class Holdings:
    """The workers each key holds (idle, leased, starting), the callers waiting, and the shares."""

    def __init__(self, max_workers: int, failing: Callable[[str], bool]) -> None:
        self.max_workers = max_workers
        self.failing = failing  # whether a key's recent leases mostly discarded their worker
        self.idle: dict[str, list[Slot]] = {}  # key -> its idle workers, least recently used first
        self.leased: dict[str, int] = {}  # key -> its workers running a batch now
        self.waiting: dict[str, int] = {}  # key -> callers waiting for one of its workers
        self.starting: dict[str, int] = {}  # key -> its workers being started now
        self.warming: dict[str, int] = {}  # key -> its pre-warms under way (:meth:`prewarming`)
        self.lease_starts: dict[str, dict[int, float]] = {}  # key -> id(slot) -> when its running lease began
        self.caps: dict[str, int | None] = {}  # workspace -> its max_warm_workers quota
        self.ws_of: dict[str, str] = {}  # key -> its workspace
        self.mb_of: dict[str, int] = {}  # key -> its workers' memory_mb

    def held(self, key: str) -> int:
        """Workers of ``key``: idle, leased, and starting (a burst of calls sees its own starts)."""
        return len(self.idle.get(key, ())) + self.leased.get(key, 0) + self.starting.get(key, 0)

    def running_s(self, key: str) -> float:
        """How long the oldest lease of ``key`` running now has run (0: none runs)."""
        starts = self.lease_starts.get(key)
        return time.monotonic() - min(starts.values()) if starts else 0.0

    def bound_mb(self) -> int:
        """The ``memory_mb`` of every bound worker (idle, leased, starting)."""
        keys = {*self.idle, *self.leased, *self.starting}
        return sum(self.held(k) * self.mb_of.get(k, 0) for k in keys)

    def lease(self, slot: Slot) -> Slot:
        """Count ``slot`` as leased by its key from now (:meth:`running_s` reads when its lease began)."""
        self.leased[slot.spec.key] = self.leased.get(slot.spec.key, 0) + 1
        slot.leased_at, slot.uses_at_lease = time.monotonic(), slot.uses
        self.lease_starts.setdefault(slot.spec.key, {})[id(slot)] = slot.leased_at
        return slot

    def unlease(self, slot: Slot, now: float) -> float:
        """Count the leased ``slot`` as leased no more; the seconds its lease took."""
        key = slot.spec.key
        self.leased[key] -= 1
        starts = self.lease_starts.get(key, {})
        starts.pop(id(slot), None)
        if not starts:
            self.lease_starts.pop(key, None)
        took, slot.leased_at = now - slot.leased_at, 0.0
        return took

    @contextlib.contextmanager
    def prewarming(self, key: str) -> Iterator[None]:
        """Count a pre-warm of ``key`` under way for the block (a start no caller asked for yet)."""
        self.warming[key] = self.warming.get(key, 0) + 1
        try:
            yield
        finally:
            self.warming[key] -= 1
            if not self.warming[key]:
                del self.warming[key]

    def awaits_prewarm(self, key: str) -> bool:
        """Whether a caller of ``key`` finding no idle worker should wait for a pre-warm under way: one is,
        and the callers waiting already do not outnumber the pre-warms (its start is paid already, so
        waiting for it is never slower than starting another)."""
        return self.warming.get(key, 0) > self.waiting.get(key, 0)

    def refuses(self, budget_mb: int | None, spec: WorkerSpec, warm: bool) -> bool:
        """Whether a start of ``spec`` the memory budget did not admit is refused (503 ``Overloaded``): its key holds
        no worker to wait for, its workspace is over its memory share (no memory lent to wait for), and no pre-warm
        of another key is starting (:meth:`prewarm_starting`; a pre-warm's own start never waits for one)."""
        return (
            not self.held(spec.key)
            and not self.within_share(budget_mb, spec.workspace, spec.memory_mb)
            and (warm or not self.prewarm_starting(spec.key))
        )

    def prewarm_starting(self, but: str) -> bool:
        """Whether a pre-warm of a key other than ``but`` is starting its worker now, with no caller of that key
        waiting for it (:meth:`awaits_prewarm`): a worker that goes idle once started, which memory may then evict —
        not one a call will hold."""
        return any(
            self.starting.get(key) and n > self.waiting.get(key, 0) for key, n in self.warming.items() if key != but
        )

    def unused(self, key: str) -> bool:
        """Whether ``key`` has no worker idle or leased and no caller waiting."""
        return not self.idle.get(key) and not self.leased.get(key) and not self.waiting.get(key)

    def forget(self, key: str) -> None:
        """Drop every table's entry of ``key`` (:meth:`unused`)."""
        for table in (self.idle, self.leased, self.waiting, self.ws_of, self.mb_of, self.lease_starts):
            table.pop(key, None)

    def fair_share(self) -> int:
        """Workers one key may hold while other keys want some: the pool split over the keys in demand."""
        active = {k for k, n in self.leased.items() if n} | {k for k, n in self.waiting.items() if n}
        active |= {k for k, slots in self.idle.items() if slots}
        return max(1, self.max_workers // max(1, len(active)))

    def demand_share(self, key: str) -> int:
        """What ``key`` may hold while other keys are running or waiting too: the pool split over the
        keys in demand (a key whose calls take long must not fill the free room the others will need
        as soon as they get busy); the whole pool when ``key`` is alone."""
        demand = {k for table in (self.leased, self.waiting, self.starting) for k, n in table.items() if n}
        demand.add(key)
        return max(1, self.max_workers // len(demand))

    def ws_held(self) -> dict[str, int]:
        """Workers held per workspace (idle, leased, starting), with the workspaces waiting for one."""
        held: dict[str, int] = {}
        for key in {*self.idle, *self.leased, *self.starting}:
            if n := self.held(key):
                ws = self.ws_of.get(key, "")
                held[ws] = held.get(ws, 0) + n
        for key, n in self.waiting.items():
            if n:
                held.setdefault(self.ws_of.get(key, ""), 0)
        return held

    def ws_full(self, key: str) -> bool:
        """Whether ``key``'s workspace holds its ``max_warm_workers`` quota already."""
        cap = self.caps.get(self.ws_of.get(key, ""))
        return cap is not None and self.ws_held().get(self.ws_of.get(key, ""), 0) >= cap

    # -- the memory budget, shared by workspaces (issue 47.7) ------------------------------------------
    def ws_mb(self) -> dict[str, int]:
        """The ``memory_mb`` of the bound workers (idle, leased, starting) per workspace."""
        held: dict[str, int] = {}
        for key in {*self.idle, *self.leased, *self.starting}:
            if n := self.held(key):
                ws = self.ws_of.get(key, "")
                held[ws] = held.get(ws, 0) + n * self.mb_of.get(key, 0)
        return held

    def memory_share(self, budget_mb: int, workspace: str) -> int:
        """``workspace``'s fair share of the memory budget: the budget split over the workspaces holding
        workers or waiting for one, ``workspace`` counted. Work-conserving: a workspace may hold more while
        nobody else wants it (:meth:`starved`), and gives it back when someone does."""
        return budget_mb // len(set(self.ws_held()) | {workspace})

    def over_share(self, budget_mb: int, workspace: str, extra_mb: int = 0) -> bool:
        """Whether ``workspace`` holds (with ``extra_mb`` more) more than its memory share."""
        return self.ws_mb().get(workspace, 0) + extra_mb > self.memory_share(budget_mb, workspace)

    def starved(self, budget_mb: int, but: str, free_mb: int) -> bool:
        """Whether a workspace other than ``but`` has a caller waiting for a worker that does not fit in
        ``free_mb`` (the budget is what holds it back) but that its memory share has room for: memory lent
        to others is then reclaimed (their idle workers evicted, their released workers stopped, their new
        workers refused or queued)."""
        held = self.ws_mb()
        return any(
            n
            and ws != but
            and self.mb_of.get(key, 0) > free_mb
            and held.get(ws, 0) + self.mb_of.get(key, 0) <= self.memory_share(budget_mb, ws)
            for key, n in self.waiting.items()
            for ws in (self.ws_of.get(key, ""),)
        )

    def within_share(self, budget_mb: int | None, workspace: str, need_mb: int) -> bool:
        """Whether a worker of ``need_mb`` fits in ``workspace``'s memory share (False: no budget)."""
        return budget_mb is not None and not self.over_share(budget_mb, workspace, need_mb)

    def lent(self, budget_mb: int | None, workspace: str, need_mb: int, free_mb: int) -> bool:
        """Whether a worker of ``need_mb`` for ``workspace`` would hold memory beyond its share that another
        workspace within its share is waiting for (:meth:`starved`, ``free_mb``: the budget left with that
        worker alive): it must not start, nor stay, now."""
        return (
            budget_mb is not None
            and self.over_share(budget_mb, workspace, need_mb)
            and self.starved(budget_mb, workspace, free_mb)
        )

    def memory_victims(self, budget_mb: int, workspace: str, need_mb: int) -> list[Slot]:
        """The idle workers that may be evicted to start a worker of ``need_mb`` for ``workspace``, in the
        order to evict them: those of workspaces over their memory share first, then least recently used.
        A workspace that would pass its own share takes only its own idle workers or those of workspaces
        over their share — never the warm worker of a workspace within its share."""
        over = {ws for ws in self.ws_mb() if self.over_share(budget_mb, ws)}
        greedy = self.over_share(budget_mb, workspace, need_mb)
        idle = [
            slot
            for slots in self.idle.values()
            for slot in slots
            if not greedy or slot.spec.workspace == workspace or slot.spec.workspace in over
        ]
        return sorted(idle, key=lambda slot: (slot.spec.workspace not in over, slot.last_used))

    def evict_one(self, key: str, *, own_workspace: bool = False) -> Slot | None:
        """An idle worker of another key to make room for ``key``: of the key holding the most workers,
        least recently used first. A key that holds workers already only takes from a key holding at
        least two more, or more than its fair share (so keys never trade workers back and forth); one
        that holds none may also take a worker idle for a while (:data:`SETTLED_S`) of a key nobody
        waits for — never the warm worker of a key in steady use."""
        mine, share = self.held(key), self.fair_share()
        failing = self.failing(key)
        settled = time.monotonic() - (FAILING_IDLE_S if failing else SETTLED_S)
        workspace = self.ws_of.get(key, "")
        ws_held = self.ws_held()
        ws_share = max(1, self.max_workers // max(1, len(ws_held | {workspace: 0})))

        def takeable(slot: Slot) -> bool:
            k = slot.spec.key
            other = slot.spec.workspace
            if other != workspace and (own_workspace or ws_held.get(other, 0) <= ws_share):
                return False  # another workspace's worker, and it holds no more than its share
            held = self.held(k)
            spare_time = mine == 0 and not self.waiting.get(k) and slot.last_used < settled
            if failing and not self.failing(k):
                return spare_time  # a failing key never takes a healthy key's worker in use
            return held >= mine + 2 or held > share or spare_time

        candidates = [s for k, slots in self.idle.items() if k != key for s in slots if takeable(s)]
        if not candidates:
            return None
        victim = min(candidates, key=lambda s: (-self.held(s.spec.key), s.last_used))
        self.idle[victim.spec.key].remove(victim)
        return victim
