"""Assembly and raw-span retention: the periodic task that turns quiet traces ``ready`` and forgets old spans.

Every ``online_assembly_s`` (a tenth of a second) while any trace is open, and at once when :meth:`Assembly.wake`
is called (the receiver stored spans), one pass (:meth:`Assembly.tick`); with no trace open the period doubles
up to ``idle_poll_max_s`` (``shared/idle.py``: a trace opened by another service sharing the database is
seen within that):

* marks ``ready`` every ``open`` trace whose root span has ended (``root_ended_at`` set) and that got
  no span for ``online_quiet_period_s`` — or only for ``online_settle_s`` when the trace is complete
  (every span's parent is one of its spans: no orphan, so nothing known is missing); and — the
  fallback for a root that never arrives ended (a crashed app, a lost export) — every ``open`` trace
  whose last span is older than ``online_trace_timeout_s``, root or not (it is scored with the spans
  it has);
* reads the number of open traces (the ``evaluator_host_online_open_traces`` gauge) — with none open at the
  last pass, first: none open now, and that read is the whole pass (nothing to mark, no write);
* when it made traces ready, calls ``on_ready`` (the router's wake-up: routing starts at once
  instead of at the end of the router's poll period).

At the first pass and then every ``_SWEEP_S`` (10 s of the clock; at once if it went back) a pass
also deletes the spans received over ``online_span_retention_s`` ago and the traces whose last span
is that old (whatever their state: past retention nothing can score them again), then recounts the
stored spans (the receiver's 503 bound). Passes are idempotent conditional statements, so several
services sharing one database may all run them. A failed pass
is logged and the next one tries again; the service goes on. The clock is injected (``clock``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from evaluator_host.observability.metrics import Metrics
from evaluator_host.online.receive.ingest import Ingest
from evaluator_host.settings import Settings
from evaluator_host.shared.idle import IdleTicker
from evaluator_host.shared.tasks import stop
from evaluator_host.store.db import utcnow
from evaluator_host.store.online.spans import OnlineSpanStore

__all__ = ["Assembly"]

log = logging.getLogger(__name__)

_SWEEP_S = 10.0  # seconds between retention sweeps (a sweep recounts every stored span: not every pass)


class Assembly:
    """The periodic pass of one service (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        store: OnlineSpanStore,
        ingest: Ingest,
        metrics: Metrics,
        clock: Callable[[], datetime] = utcnow,
        on_ready: Callable[[], None] | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.ingest = ingest
        self.metrics = metrics
        self.clock = clock
        self.on_ready = on_ready
        self._swept: datetime | None = None
        self._task: asyncio.Task[None] | None = None
        self.open = 0  # open traces at the last pass (every service's)
        self.ticker = IdleTicker(settings.online_assembly_s, settings.idle_poll_max_s)

    def wake(self) -> None:
        """Run a pass now (spans were stored; any thread)."""
        self.ticker.wake()

    def tick(self) -> int:
        """One pass (blocking: run it on a thread); the traces it made ready."""
        now = self.clock()
        s = self.settings
        made = 0
        opened = self.open or self.store.count_open()  # none open at the last count nor now: only that read
        if opened:
            made = self.store.mark_ready(now, s.online_quiet_period_s, s.online_trace_timeout_s, s.online_settle_s)
        if made:
            self.metrics.online_ready.inc(made)
        if self._swept is None or not 0 <= (now - self._swept).total_seconds() < _SWEEP_S:
            self.sweep(now)
            self._swept = now
        self.open = self.store.count_open() if opened else 0
        self.metrics.online_open.set(self.open)
        return made

    def sweep(self, now: datetime) -> tuple[int, int]:
        """Retention: delete spans and traces older than ``online_span_retention_s``; (spans, traces)."""
        spans, traces = self.store.sweep(now - timedelta(seconds=self.settings.online_span_retention_s))
        if spans:
            self.metrics.online_expired.inc(spans)
            log.info("online retention: deleted %d spans and %d traces", spans, traces)
        self.ingest.recount()
        return spans, traces

    def start(self) -> None:
        """Run a pass now and then in the background (see the module docstring)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._loop())

    async def _loop(self) -> None:
        while True:
            made = 0
            try:
                made = await asyncio.to_thread(self.tick)
                if made and self.on_ready is not None:
                    self.on_ready()
            except Exception:  # a database hiccup: the next pass tries again
                log.exception("online assembly pass failed")
            await self.ticker.wait(bool(made or self.open))

    async def close(self) -> None:
        """Stop the periodic pass."""
        task, self._task = self._task, None
        await stop(task)
