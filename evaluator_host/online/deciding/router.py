"""Routing: which rules score a ready trace, on which span — and the loop that routes ready traces.

Contract:

* :func:`matches` — a rule's filter holds of a span when every condition it gives does: the span's
  resource ``service.name``, its name, each attribute (``equals``: the same JSON value, a bool never
  equal to a number; ``exists``: present or absent).
* :func:`sampled` — deterministic: the first 8 bytes of SHA-256 of ``rule id:trace id`` as a fraction
  of 2**64, below the rate. A restart, or another service, decides the same for the same pair.
* :func:`decide` — for each rule (enabled, not deleted: the store reads only those) the evaluated
  span(s). A trace-level rule (the default): with no filter the root (the trace row's root span),
  else the first matching span in start order. A span-level rule (``target.level = "span"``): every
  span that matches its filter (no filter: every span), in start order — one row, so one score, each.
  A trace no span of which matches, or that sampling leaves out (sampling is per trace at both
  levels), gets no row. Evaluation traffic never evaluates itself: a span carrying
  ``evaluator_host.evaluation=true`` (on itself or its resource: the service's own score exports and
  tracing, its judges' OpenTelemetry) is never matched nor evaluated, at either level — with no filter,
  a trace-level rule's marked root gives way to the first unmarked span; a trace of marked spans only
  gets no row.
* :func:`join_sessions` — the sessions a routed trace joins, and the session-level rules it matched for
  each (sampling per (rule, session id)); :func:`decide` leaves session-level rules out (a session is
  scored once quiet: :func:`~evaluator_host.store.online.sessions.queue_ready`, each routing pass).
* :class:`Router` — every ``online_poll_s`` (while passes find nothing the period doubles up to
  ``idle_poll_max_s``, but never past the time the next session goes quiet: ``shared/idle.py``), at once when
  :meth:`Router.wake` is called (assembly made traces ready) and at once again while batches come back
  full, routes a batch of ready traces through :meth:`ScoreQueue.route` in a thread (one transaction per
  batch; each rule that scores nothing of a trace gets its decision and reason from
  :func:`~evaluator_host.online.deciding.explain.why_not`), counts drops, keeps the backlog figure for
  ``/healthz`` and the backlog gauge, and wakes the scorer.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from evaluator_host.observability.metrics import Metrics
from evaluator_host.online.deciding.explain import same, sample_point, why_not
from evaluator_host.online.levels.sessions import session_of
from evaluator_host.settings import Settings
from evaluator_host.shared.idle import IdleTicker
from evaluator_host.shared.tasks import stop
from evaluator_host.store.db import utcnow
from evaluator_host.store.online import sessions as online_sessions
from evaluator_host.store.online.rules import RuleRecord
from evaluator_host.store.online.scores import Routed, ScoreQueue, SpanRef, TraceRef

__all__ = ["ROUTE_BATCH", "Router", "decide", "join_sessions", "matches", "sampled"]

log = logging.getLogger(__name__)

ROUTE_BATCH = 500  # ready traces routed in one transaction


def matches(flt: dict[str, Any], span: SpanRef) -> bool:
    """Whether ``flt`` (a rule's stored filter) holds of ``span``."""
    if (name := flt.get("service_name")) is not None and span.service_name != name:
        return False
    if (name := flt.get("span_name")) is not None and span.name != name:
        return False
    for cond in flt.get("attributes") or ():
        attrs = span.attributes
        if cond.get("exists") is not None:
            if (cond["key"] in attrs) != bool(cond["exists"]):
                return False
        elif cond["key"] not in attrs or not same(attrs[cond["key"]], cond.get("equals")):
            return False
    return True


def sampled(rule_id: str, trace_id: str, rate: float) -> bool:
    """Whether the pair is in the rule's sample (deterministic; see the module docstring)."""
    if rate >= 1.0:
        return True
    if rate <= 0.0:
        return False
    return sample_point(rule_id, trace_id) < rate


def decide(trace: TraceRef, rules: Sequence[RuleRecord]) -> list[tuple[RuleRecord, str | None]]:
    """The (rule, evaluated span id) pairs of ``trace``: see the module docstring."""
    out: list[tuple[RuleRecord, str | None]] = []
    spans = [s for s in trace.spans if not s.evaluation]
    if not spans and trace.spans:  # evaluation traffic only
        return out
    marked = len(spans) < len(trace.spans)
    for rule in rules:
        if rule.level == "session":  # scored per session, once quiet (join_sessions, online_sessions)
            continue
        if not sampled(rule.id, trace.trace_id, rule.sampling_rate):
            continue
        if rule.level == "span":
            out.extend((rule, s.span_id) for s in spans if matches(rule.filter, s))
            continue
        if not rule.filter:
            root = trace.root_span_id or (spans[0].span_id if spans else None)
            if marked and root not in {s.span_id for s in spans}:
                root = spans[0].span_id  # the root is evaluation traffic (or never arrived)
            out.append((rule, root))
            continue
        span = next((s for s in spans if matches(rule.filter, s)), None)
        if span is not None:
            out.append((rule, span.span_id))
    return out


def join_sessions(trace: TraceRef, rules: Sequence[RuleRecord]) -> list[tuple[str, tuple[str, ...]]]:
    """The sessions ``trace`` joins: its session under the default keys (whether or not a rule wants it:
    ``GET /v1/sessions`` lists it), and under each session-level rule's ``session_key``; with each, the
    session-level rules that target it through this trace — the rule's filter matches one of its spans
    (none: any trace) and the session is in the rule's sample (decided per (rule, session id))."""
    spans = [s for s in trace.spans if not s.evaluation]
    out: dict[str, list[str]] = {}
    default = session_of(spans, None)
    if default is not None:
        out[default] = []
    for rule in rules:
        if rule.level != "session":
            continue
        sid = session_of(spans, (rule.target or {}).get("session_key"))
        if sid is None or not sampled(rule.id, sid, rule.sampling_rate):
            continue
        if rule.filter and not any(matches(rule.filter, s) for s in spans):
            continue
        out.setdefault(sid, []).append(rule.id)
    return [(sid, tuple(ids)) for sid, ids in out.items()]


class Router:
    """The routing loop of one service (start with :meth:`start`, stop with :meth:`close`)."""

    def __init__(self, settings: Settings, queue: ScoreQueue, metrics: Metrics, wake: Callable[[], None]) -> None:
        self.settings = settings
        self.queue = queue
        self.metrics = metrics
        self.wake_scorer = wake
        self.backlog = 0  # rows queued or running at the last batch (every service's)
        self.dropped = 0  # rows this process stored dropped
        self._task: asyncio.Task[None] | None = None
        self.ticker = IdleTicker(settings.online_poll_s, settings.idle_poll_max_s)
        self.found = False  # whether the last pass routed, queued or dropped anything
        metrics.watch_online(lambda: self.backlog)

    def wake(self) -> None:
        """Route now (assembly made traces ready), not at the end of the poll period."""
        self.ticker.wake()

    def start(self) -> None:
        """Start the loop (idempotent)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._loop())

    async def close(self) -> None:
        """Stop the loop (a batch in its transaction finishes or rolls back whole)."""
        task, self._task = self._task, None
        await stop(task)

    async def route_once(self) -> Routed:
        """Route one batch now (tests and the loop)."""
        backlog_max = self.settings.online_backlog_max
        route = functools.partial(self.queue.route, explain=why_not, sessions=join_sessions)
        routed = await asyncio.to_thread(route, ROUTE_BATCH, backlog_max, decide)
        now, upcoming = utcnow(), list[datetime]()
        ready, dropped = await asyncio.to_thread(
            online_sessions.queue_ready, self.queue.engine, now, routed.backlog, backlog_max, upcoming
        )
        if upcoming:  # a session goes quiet then: the idle back-off waits no longer
            self.ticker.due_in((upcoming[0] - now).total_seconds())
        self.found = bool(routed.traces or ready or dropped)
        self.backlog = routed.backlog + ready
        for rule_id, n in [*routed.dropped.items(), *dropped.items()]:
            self.dropped += n
            self.metrics.online_dropped(rule_id, n)
        if routed.queued or ready:
            self.wake_scorer()
        return routed

    async def _loop(self) -> None:
        while True:
            self.found = False
            try:
                routed = await self.route_once()
                if routed.traces >= ROUTE_BATCH:
                    continue
            except Exception:  # a database hiccup: the next period tries again
                log.exception("routing ready traces failed")
            await self.ticker.wait(self.found)
