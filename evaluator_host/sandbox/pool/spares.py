"""Spares: unbound workers kept started per runtime, so binding a never-seen revision costs a
``load`` frame, not a process or container start (the pool's, for every backend).

``spare_workers`` are kept per runtime key in recent use (the pool warms the bare runtimes at
start), plus one for each spare taken in the last :data:`_DEMAND_S` seconds but the first, up to
``max_workers // 2`` more: revisions that keep arriving find stock already started, and a burst
of never-seen revisions finds several spares started at once instead of each waiting for its own
start. A bind that finds no started spare while some are starting takes the first one to finish
(:meth:`Spares.take_or_wait`) instead of starting yet another (which would only slow the others
down on a busy machine). At most ``max_workers`` spares exist in all — the least recently used
runtime's go first — and a runtime's spares go after ``idle_ttl_s`` without use; those a burst
added go once its takes are :data:`_DEMAND_S` seconds old.
The takes of a key whose workers keep being discarded (``Leasing.failing``: a crash loop, a
hostile evaluator) are no demand: its replacements take spares but add none, so a noisy
neighbour keeps at most the setting's spares starting, not a burst's worth.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable

from evaluator_host.sandbox.base import RuntimeKey, SandboxBackend, Worker
from evaluator_host.settings import Settings

__all__ = ["Spares"]

_DEMAND_S = 10.0  # takes this recent count as demand


class Spares:
    """The unbound workers of each runtime key, started in the background."""

    def __init__(
        self,
        backend: SandboxBackend,
        settings: Settings,
        reap: Callable[[Worker], None],
        started: Callable[[], None] = lambda: None,
        room: Callable[[int], bool] = lambda mb: True,
    ) -> None:
        self._backend = backend
        self._started = started  # called once per worker started (the pool counts cold starts)
        self._room = room  # whether the memory budget admits one more worker of so many MiB
        self._settings = settings
        self._reap = reap  # kills a worker in the background
        self._spares: dict[RuntimeKey, list[Worker]] = {}
        self._filling: dict[RuntimeKey, int] = {}
        self._used: dict[RuntimeKey, float] = {}
        self._taken: dict[RuntimeKey, collections.deque[float]] = {}  # recent takes, for the burst target
        self._fills: set[asyncio.Task[None]] = set()
        self._waiting: dict[RuntimeKey, collections.deque[asyncio.Future[Worker | None]]] = {}
        self._closed = False

    def of(self, runtime: RuntimeKey) -> list[Worker]:
        """The started spares of ``runtime`` (a copy)."""
        return list(self._spares.get(runtime, ()))

    def count(self) -> int:
        """Started spares, every runtime."""
        return sum(len(v) for v in self._spares.values())

    def memory_mb(self) -> int:
        """The ``memory_mb`` of every spare, started or starting."""
        started = sum(k.memory_mb * len(v) for k, v in self._spares.items())
        return started + sum(k.memory_mb * n for k, n in self._filling.items())

    def claimable(self, runtime: RuntimeKey) -> bool:
        """Whether :meth:`take_or_wait` would give a bind of ``runtime`` a spare: one is started, or more are
        starting than binds already wait for."""
        return bool(self._spares.get(runtime)) or self._filling.get(runtime, 0) > self._waiters(runtime)

    def drop_one(self) -> bool:
        """Reap a spare of the least recently used runtime (memory is needed); False when none is started."""
        held = [k for k, v in self._spares.items() if v]
        if not held:
            return False
        self._reap(self._spares[min(held, key=lambda k: self._used.get(k, 0.0))].pop())
        return True

    def warm(self, runtime: RuntimeKey) -> None:
        """Keep ``spare_workers`` unbound workers of ``runtime`` started (in the background)."""
        if self._closed or self._settings.spare_workers <= 0:
            return
        now = self._used[runtime] = time.monotonic()
        have = len(self._spares.get(runtime, ())) + self._filling.get(runtime, 0) - self._waiters(runtime)
        for _ in range(self._target(runtime, now) - have):
            if not self._make_room(runtime):
                break
            self._filling[runtime] = self._filling.get(runtime, 0) + 1
            task = asyncio.ensure_future(self._start(runtime))
            self._fills.add(task)
            task.add_done_callback(self._fills.discard)

    def _make_room(self, runtime: RuntimeKey) -> bool:
        """Whether one more spare fits under ``max_workers`` (started or starting), once the least
        recently used other runtime's spare is reaped if need be; False when none can be (the
        others are all still starting), or when the memory budget has no room for it (a spare never
        evicts anything for memory): a later ``warm`` tries again."""
        if not self._room(runtime.memory_mb):
            return False
        total = self.count() + sum(self._filling.values())
        if total < self._settings.max_workers:
            return True
        others = [k for k, v in self._spares.items() if v and k != runtime]
        if not others:
            return False
        oldest = min(others, key=lambda k: self._used.get(k, 0.0))
        self._reap(self._spares[oldest].pop())
        return True

    def _waiters(self, runtime: RuntimeKey) -> int:
        return sum(1 for f in self._waiting.get(runtime, ()) if not f.done())

    def _hand_over(self, runtime: RuntimeKey, worker: Worker | None) -> bool:
        """Give ``worker`` (None: a start failed) to the oldest bind still waiting; False when none is."""
        queue = self._waiting.get(runtime)
        while queue:
            waiter = queue.popleft()
            if not waiter.done():
                waiter.set_result(worker)
                return True
        return False

    async def _start(self, runtime: RuntimeKey) -> None:
        try:
            worker = await self._backend.start_worker(runtime)
            self._started()
        except BaseException as exc:  # a spare is an optimization; the request path starts its own
            self._filling[runtime] -= 1
            self._hand_over(runtime, None)  # its waiter starts a worker of its own
            if not isinstance(exc, Exception):
                raise  # cancelled: the count and the waiter are settled first
            return
        self._filling[runtime] -= 1
        if self._closed:
            await worker.kill()
            return
        if not self._hand_over(runtime, worker):
            self._spares.setdefault(runtime, []).append(worker)

    def _target(self, runtime: RuntimeKey, now: float) -> int:
        """How many spares of ``runtime`` to keep now: the setting, plus the recent demand."""
        taken = self._taken.get(runtime)
        while taken and now - taken[0] > _DEMAND_S:
            taken.popleft()
        extra = min(max(0, len(taken or ()) - 1), max(0, self._settings.max_workers // 2))
        return self._settings.spare_workers + extra

    async def take_or_wait(self, runtime: RuntimeKey, *, demand: bool = True) -> Worker | None:
        """A live spare of ``runtime``; else, while spares of it are starting, the first one to finish
        (None if that start fails); else None. Either way the call counts as demand, unless
        ``demand`` is False (see :meth:`take`)."""
        worker = self.take(runtime, demand=demand)
        if worker is not None or self._filling.get(runtime, 0) <= self._waiters(runtime):
            return worker
        waiter: asyncio.Future[Worker | None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(runtime, collections.deque()).append(waiter)
        self.warm(runtime)  # the demand this take adds starts more behind it
        try:
            worker = await waiter
        except BaseException:  # cancelled: a worker handed over meanwhile goes back to the spares
            if waiter.done() and not waiter.cancelled() and (given := waiter.result()) is not None:
                self._spares.setdefault(runtime, []).append(given)
            raise
        if worker is not None and worker.reader.at_eof():
            self._reap(worker)
            return None
        return worker

    def take(self, runtime: RuntimeKey, *, demand: bool = True) -> Worker | None:
        """A live spare of ``runtime``, or None (one that died while it waited is reaped); either way
        the call counts as demand for spares of ``runtime`` — unless ``demand`` is False: the pool
        passes False for a key whose workers keep being discarded (a crash loop), whose replacements
        must not grow the burst stock (each burst spare is a start, and a failing key would keep
        several starting at once, taking the CPU its neighbours need)."""
        if demand:
            self._taken.setdefault(runtime, collections.deque()).append(time.monotonic())
        spares = self._spares.get(runtime)
        while spares:
            worker = spares.pop(0)  # the oldest first: it has waited longest
            if not worker.reader.at_eof():
                return worker
            self._reap(worker)  # killed from outside, engine restarted
        return None

    def sweep(self, now: float) -> None:
        """Reap the spares of runtimes unused for ``idle_ttl_s`` as of ``now``, dead ones, and those a
        burst added once it is over."""
        for runtime, spares in self._spares.items():
            idle = now - self._used.get(runtime, 0.0) > self._settings.idle_ttl_s
            for worker in [w for w in spares if idle or w.reader.at_eof()]:
                spares.remove(worker)
                self._reap(worker)
            while len(spares) > self._target(runtime, now):  # a burst's extra spares, once it is over
                self._reap(spares.pop())  # the newest go first
        for runtime in [r for r, taken in self._taken.items() if not taken or now - taken[-1] > _DEMAND_S]:
            del self._taken[runtime]

    async def close(self) -> list[Worker]:
        """Start no more; let starts under way finish (one in an engine thread cannot be cancelled, and
        a start that finishes after close kills its own worker); give back every spare to kill."""
        self._closed = True
        for queue in self._waiting.values():
            for waiter in queue:
                if not waiter.done():
                    waiter.set_result(None)
        self._waiting.clear()
        await asyncio.gather(*self._fills, return_exceptions=True)
        spares = [w for ws in self._spares.values() for w in ws]
        self._spares.clear()
        return spares
