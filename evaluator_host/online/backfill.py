"""Backfill (``POST /v1/online-rules/{id}/backfill``, issue 50): a rule's stored traces scored on demand.

Contract (docs/online.md, "Backfill"):

* :func:`dry_run` — what a backfill of ``[since, until)`` would do, at once and storing nothing: the
  stored traces in the range (first seen), the rule's targets among them (what routing would queue:
  filter and sampling; spans at span level), those already scored with the revision (skipped), and an
  estimate of the seconds it takes (the targets to score × the rule's recent mean duration / the
  scoring concurrency, or their count / the workspace's ``max_evaluations_per_s`` when that is slower).
  It reads at most ``limit`` targets to score (and the traces up to them).
* :class:`Backfiller` — every ``online_poll_s`` a service claims one backfill still planning and queues
  its pages (:meth:`~evaluator_host.store.online_backfills.BackfillStore.plan_page`: one transaction a
  page, with the cursor), as long as the backlog has room (``online_backlog_max``: a backfill waits, it
  never drops); the scorer then scores its rows like any other (the workspace's evaluation rate paces
  them). At start it lets go of what a killed predecessor held; a claim past ``online_claim_s`` is taken
  over by another service. A backfill whose rule was deleted is cancelled.

* :func:`outcome` — the status a backfill shows: ``running`` while it plans or any of its targets waits,
  ``cancelled`` once cancelled, ``failed`` when it ended and EVERY target it scored failed (status other
  than ``ok``: an evaluator that raises on every trace is no success), with a reason naming the first
  error; else ``done`` (a few failures among ok scores are counted in ``failed``, not fatal).

Session-level rules are not backfilled (their sessions are scored as they go quiet): 422.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from evaluator_host.errors import NotFoundError
from evaluator_host.online.router import decide
from evaluator_host.settings import Settings
from evaluator_host.shared.tasks import stop
from evaluator_host.store import online_backfills
from evaluator_host.store.online_backfills import BackfillStore
from evaluator_host.store.online_routing import spans_of
from evaluator_host.store.online_rows import OnlineScoreRow
from evaluator_host.store.online_rules import RuleRecord, RuleStore
from evaluator_host.store.online_scores import ScoreQueue

__all__ = ["DRY_RUN_PAGE", "PAGE_TRACES", "Backfiller", "dry_run", "estimate_s", "outcome"]

log = logging.getLogger(__name__)

PAGE_TRACES = 500  # traces planned in one transaction
DRY_RUN_PAGE = 2000


def _spans_of(queue: ScoreQueue, rule: RuleRecord) -> Any:
    return lambda conn, page: spans_of(conn, page, bodies=bool(rule.filter))


def estimate_s(engine: Engine, rule: RuleRecord, to_score: int, concurrency: int, rate: float | None) -> float:
    """Seconds to score ``to_score`` targets of ``rule`` (see the module docstring)."""
    query = (
        select(OnlineScoreRow.duration_ms)
        .where(OnlineScoreRow.rule_id == rule.id, OnlineScoreRow.state == "done")
        .order_by(OnlineScoreRow.scored_at.desc())
        .limit(100)
        .subquery()
    )
    with engine.connect() as conn:
        mean = conn.scalar(select(func.avg(query.c.duration_ms)))
    per = (float(mean) if mean is not None else 10.0) / 1000.0
    seconds = to_score * per / max(concurrency, 1)
    if rate:
        seconds = max(seconds, to_score / rate)
    return round(seconds, 3)


def dry_run(
    queue: ScoreQueue,
    rule: RuleRecord,
    revision: int | None,
    window: tuple[datetime | None, datetime | None],
    limit: int,
) -> tuple[int, int, int]:
    """(traces, targets, already scored) of a backfill of ``window`` (see the module docstring)."""
    traces = targets = scored = 0
    after = None
    with queue.engine.connect() as conn:
        while True:
            room = max(limit - (targets - scored), 0)
            got = online_backfills.count(
                conn, rule, revision, window, after, DRY_RUN_PAGE, room, decide, _spans_of(queue, rule)
            )
            traces, targets, scored = traces + got.traces, targets + got.targets, scored + got.already_scored
            if got.last is None or got.cut or got.traces < DRY_RUN_PAGE or targets - scored >= limit:
                return traces, targets, scored
            after = got.last


def _first_error(result: str | None) -> str:
    """``Type: message`` of a stored result JSON (its status when it names no error)."""
    try:
        parsed = json.loads(result) if result else {}
    except ValueError:
        parsed = {}
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return f"{error.get('type', 'Error')}: {str(error['message'])[:300]}"
    status = parsed.get("status") if isinstance(parsed, dict) else None
    return f"status {status}" if status else "no result stored"


def outcome(
    record_status: str, states: dict[str, int], failed: int, first_failure: str | None
) -> tuple[str, str | None]:
    """(status, reason) a backfill shows, from its row's status, its rows per state and how many of its
    done rows failed (see the module docstring)."""
    if record_status == "cancelled":
        return "cancelled", None
    if record_status == "planning" or states.get("queued", 0) + states.get("running", 0):
        return "running", None
    done = states.get("done", 0)
    if done and failed >= done:
        return "failed", f"every one of its {done} target(s) failed; the first: {_first_error(first_failure)}"
    return "done", None


class Backfiller:
    """The backfill planning loop of one service (start with :meth:`start`, stop with :meth:`close`)."""

    def __init__(
        self, settings: Settings, queue: ScoreQueue, rules: RuleStore, me: str, wake: Callable[[], None]
    ) -> None:
        self.settings = settings
        self.queue = queue
        self.rules = rules
        self.store = BackfillStore(queue.engine)
        self.me = me
        self.wake_scorer = wake
        self._task: asyncio.Task[None] | None = None
        self._event = asyncio.Event()

    def wake(self) -> None:
        """Plan now (a backfill was created)."""
        self._event.set()

    async def start(self) -> None:
        """Let go of what a killed predecessor held, then start the loop."""
        await asyncio.to_thread(self.store.release_own, self.me)
        if self._task is None:
            self._task = asyncio.ensure_future(self._loop())

    async def close(self) -> None:
        """Stop the loop (a page in its transaction finishes or rolls back whole)."""
        task, self._task = self._task, None
        await stop(task)

    def plan_once(self) -> int:
        """Claim one backfill still planning and queue its pages while the backlog has room; pages planned."""
        s = self.settings
        backfill = self.store.claim(self.me, s.online_claim_s)
        if backfill is None:
            return 0
        try:
            rule = self.rules.get(backfill.workspace_id, backfill.rule_id)
        except NotFoundError:
            self.store.cancel(backfill.workspace_id, backfill.rule_id, backfill.id)
            return 0
        pages = 0
        spans_of = _spans_of(self.queue, rule)
        while True:
            counts = self.queue.counts()
            room = s.online_backlog_max - counts["queued"] - counts["running"]
            if room <= 0:
                break
            more = self.store.plan_page(self.me, backfill, rule, PAGE_TRACES, decide, spans_of, room, s.online_claim_s)
            pages += 1
            self.wake_scorer()
            if not more:
                break
        return pages

    async def _loop(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.plan_once)
            except Exception:  # a database hiccup: the next period tries again
                log.exception("planning a backfill failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event.wait(), self.settings.online_poll_s)
            self._event.clear()
