"""Spares: unbound workers kept started per runtime, so binding a never-seen revision costs a
``load`` frame, not a process or container start (the pool's, for every backend).

``spare_workers`` are kept per runtime key in recent use (the pool warms the bare runtimes at
start), plus one for each spare taken in the last :data:`_BURST_S` seconds but the first, up to
:data:`_BURST_EXTRA` more: a burst of never-seen revisions finds the next spare already
starting (several start at once) instead of each waiting for its own start. At most
``max_workers`` spares exist in all — the least recently used runtime's go first — and a
runtime's spares go after ``idle_ttl_s`` without use.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable

from evaluator_host.sandbox.base import RuntimeKey, SandboxBackend, Worker
from evaluator_host.settings import Settings

__all__ = ["Spares"]

_BURST_S = 2.0  # takes this recent count as demand
_BURST_EXTRA = 4  # at most this many spares above ``spare_workers`` while the demand lasts


class Spares:
    """The unbound workers of each runtime key, started in the background."""

    def __init__(
        self,
        backend: SandboxBackend,
        settings: Settings,
        reap: Callable[[Worker], None],
        started: Callable[[], None] = lambda: None,
    ) -> None:
        self._backend = backend
        self._started = started  # called once per worker started (the pool counts cold starts)
        self._settings = settings
        self._reap = reap  # kills a worker in the background
        self._spares: dict[RuntimeKey, list[Worker]] = {}
        self._filling: dict[RuntimeKey, int] = {}
        self._used: dict[RuntimeKey, float] = {}
        self._taken: dict[RuntimeKey, collections.deque[float]] = {}  # recent takes, for the burst target
        self._fills: set[asyncio.Task[None]] = set()
        self._closed = False

    def of(self, runtime: RuntimeKey) -> list[Worker]:
        """The started spares of ``runtime`` (a copy)."""
        return list(self._spares.get(runtime, ()))

    def count(self) -> int:
        """Started spares, every runtime."""
        return sum(len(v) for v in self._spares.values())

    def warm(self, runtime: RuntimeKey) -> None:
        """Keep ``spare_workers`` unbound workers of ``runtime`` started (in the background)."""
        if self._closed or self._settings.spare_workers <= 0:
            return
        now = self._used[runtime] = time.monotonic()
        have = len(self._spares.get(runtime, ())) + self._filling.get(runtime, 0)
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
        others are all still starting): a later ``warm`` tries again."""
        total = self.count() + sum(self._filling.values())
        if total < self._settings.max_workers:
            return True
        others = [k for k, v in self._spares.items() if v and k != runtime]
        if not others:
            return False
        oldest = min(others, key=lambda k: self._used.get(k, 0.0))
        self._reap(self._spares[oldest].pop())
        return True

    async def _start(self, runtime: RuntimeKey) -> None:
        try:
            worker = await self._backend.start_worker(runtime)
            self._started()
        except Exception:  # noqa: BLE001 - a spare is an optimization; the request path starts its own
            return
        finally:
            self._filling[runtime] -= 1
        if self._closed:
            await worker.kill()
            return
        self._spares.setdefault(runtime, []).append(worker)

    def _target(self, runtime: RuntimeKey, now: float) -> int:
        """How many spares of ``runtime`` to keep now: the setting, plus the recent demand."""
        taken = self._taken.get(runtime)
        while taken and now - taken[0] > _BURST_S:
            taken.popleft()
        extra = min(max(0, len(taken or ()) - 1), _BURST_EXTRA, max(0, self._settings.max_workers // 2))
        return self._settings.spare_workers + extra

    def take(self, runtime: RuntimeKey) -> Worker | None:
        """A live spare of ``runtime``, or None (one that died while it waited is reaped); either way
        the call counts as demand for spares of ``runtime``."""
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
        for runtime in [r for r, taken in self._taken.items() if not taken or now - taken[-1] > _BURST_S]:
            del self._taken[runtime]

    async def close(self) -> list[Worker]:
        """Start no more; let starts under way finish (one in an engine thread cannot be cancelled, and
        a start that finishes after close kills its own worker); give back every spare to kill."""
        self._closed = True
        await asyncio.gather(*self._fills, return_exceptions=True)
        spares = [w for ws in self._spares.values() for w in ws]
        self._spares.clear()
        return spares
