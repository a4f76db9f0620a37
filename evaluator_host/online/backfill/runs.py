"""Backfill (``POST /v1/online-rules/{id}/backfill``, issue 50): a rule's stored traces scored on demand.

Contract (docs/online.md, "Backfill"):

* :func:`dry_run` — what a backfill of ``[since, until)`` would do, at once and storing nothing: the
  stored traces in the range (first seen), the rule's targets among them (what routing would queue:
  filter and sampling; spans at span level), those already scored with the revision (skipped), and an
  estimate of the seconds it takes (the targets to score × the rule's recent mean duration / the
  scoring concurrency, or their count / the workspace's ``max_evaluations_per_s``, or their count / the pace
  of the rule's latest backfill (once it scored :data:`PACE_ROWS` targets; to its 90th percentile score),
  whichever is slowest).
  It reads at most ``limit`` targets to score (and the traces up to them).
* :class:`Backfiller` — every ``online_poll_s`` (at once when woken: a backfill was created; while it finds
  none to plan the period doubles up to ``idle_poll_max_s``: ``shared/idle.py``) a service claims one
  backfill still planning and queues
  its pages (:meth:`~evaluator_host.store.online.backfills.BackfillStore.plan_page`: one transaction a
  page, with the cursor), as long as the backlog has room (``online_backlog_max``: a backfill waits, it
  never drops); the scorer then scores its rows like any other (the workspace's evaluation rate paces
  them). At start it lets go of what a killed predecessor held; a claim past ``online_claim_s`` is taken
  over by another service. A backfill whose rule was deleted is cancelled.

* :func:`outcome` — the status a backfill shows: ``running`` while it plans or any of its targets waits,
  ``cancelled`` once cancelled, ``failed`` when it ended and NONE of its targets was scored ``ok`` (an
  evaluator that raises on every trace is no success), with a reason naming the most common error
  (``BackfillStore.failure``); else ``done`` (a few failures among ok scores are counted in ``failed``).

* At a backfill's start, a fast trace-level rule without filter, sampling, budgets, sinks or exporter answers every
  target whose case is known and still in the result cache in ONE statement
  (:func:`~evaluator_host.store.online.case_hashes.resolve_cached`; the evaluator cached, the workspace without
  ``max_evaluations_per_s``): a re-run costs lookups, not runs, and not per target; only the rest is read, built
  and run page by page. ``cached`` on the backfill counts the targets the cache answered, either way.

At session level the targets are the sessions stored in the range (first seen), each at its current generation
(:mod:`evaluator_host.store.online.backfill_sessions`); ``traces`` then counts sessions read.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, select
from sqlalchemy.engine import Engine

from evaluator_host.errors import NotFoundError
from evaluator_host.evaluation.caching.cached_calls import case_scope
from evaluator_host.online.backfill.direct import (
    DIRECT_MAX_MS,
    DIRECT_TRACES,
    Scored,
    probe_page,
    recent_row_ms,
    score_page,
)
from evaluator_host.online.deciding.router import decide, join_sessions, sampled
from evaluator_host.online.scoring.scorer import Scorer
from evaluator_host.settings import Settings
from evaluator_host.shared.idle import IdleTicker
from evaluator_host.shared.tasks import stop
from evaluator_host.store.db import as_utc, utcnow
from evaluator_host.store.online import backfills as online_backfills
from evaluator_host.store.online.backfill_pages import Page, commit_page, read_page
from evaluator_host.store.online.backfills import Backfill, BackfillStore
from evaluator_host.store.online.case_hashes import eligible, resolve_cached
from evaluator_host.store.online.dry_counts import counted, fresh_count
from evaluator_host.store.online.routing import spans_of
from evaluator_host.store.online.rows import OnlineBackfillRow, OnlineScoreRow
from evaluator_host.store.online.rules import RuleRecord, RuleStore
from evaluator_host.store.online.scores import ScoreQueue

__all__ = ["DRY_RUN_PAGE", "PAGE_TRACES", "Backfiller", "dry_run", "estimate_s", "outcome"]

log = logging.getLogger(__name__)

PAGE_TRACES = 500  # traces planned in one transaction
SESSION_PAGE = 100  # sessions planned in one transaction (each read with its traces)
PIPELINE = 2  # a fast rule's pages read and scored at once (stored in order)
DIRECT_PAGES = 20  # pages scored by the planner before it looks at the backlog again
DRY_RUN_PAGE = 2000
PACE_ROWS = 100  # targets a backfill scored before its pace estimates the next one's


def _spans_of(queue: ScoreQueue, rule: RuleRecord) -> Any:
    bodies = bool(rule.filter) or rule.level == "session"  # a session's id is in its spans' attributes
    return lambda conn, page: spans_of(conn, page, bodies=bodies)


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
        pace = _last_pace(conn, rule.id)
    per = (float(mean) if mean is not None else 10.0) / 1000.0
    seconds = to_score * per / max(concurrency, 1)
    for limit in (rate, pace):
        if limit:
            seconds = max(seconds, to_score / limit)
    return round(seconds, 3)


def _last_pace(conn: Connection, rule_id: str) -> float | None:
    """Targets a second the rule's latest backfill scored, once it scored :data:`PACE_ROWS`; else None. Measured to
    its 90th percentile score (that many targets over the time from its creation to that score): a stalled tail — a
    few rows retried after an error, or waiting for a rate limit — does not make the pace. The evaluator's own
    duration leaves out what the service does around each target (a session's dict, the rows): for a fast
    evaluator that was the whole of it (5,000 sessions estimated 0.014 s, scored in 14 s)."""
    latest = select(OnlineBackfillRow.id, OnlineBackfillRow.created_at).where(OnlineBackfillRow.rule_id == rule_id)
    last = conn.execute(latest.order_by(OnlineBackfillRow.created_at.desc()).limit(1)).first()
    if last is None:
        return None
    of = (OnlineScoreRow.backfill_id == last.id, OnlineScoreRow.state == "done")
    done = int(conn.scalar(select(func.count()).select_from(OnlineScoreRow).where(*of)) or 0)
    if done < PACE_ROWS:
        return None
    k = -(-done * 9 // 10)  # the 90th percentile score, counted from the first
    nth = select(OnlineScoreRow.scored_at).where(*of, OnlineScoreRow.scored_at.is_not(None))
    end = conn.scalar(nth.order_by(OnlineScoreRow.scored_at).offset(k - 1).limit(1))
    if end is None:
        return None
    seconds = (as_utc(end) - as_utc(last.created_at)).total_seconds()
    return k / seconds if seconds > 0 else None


def dry_run(
    queue: ScoreQueue,
    rule: RuleRecord,
    revision: int | None,
    window: tuple[datetime | None, datetime | None],
    limit: int,
) -> tuple[int, int, int]:
    """(traces, targets, already scored) of a backfill of ``window`` (see the module docstring)."""
    traces = targets = scored = 0
    after, rate = None, rule.sampling_rate
    page = SESSION_PAGE if rule.level == "session" else DRY_RUN_PAGE
    with queue.engine.connect() as conn:
        fresh = fresh_count(conn, rule, window, limit)  # a rule with nothing to skip: counted by the database
        if fresh is not None:
            return fresh[0], fresh[1], 0
        # a trace-level rule without filter: its routed traces' ids and whether its rows score them read in one
        # statement, each sampled as routing does (store/online/dry_counts.py); any other: its pages, spans read
        known = counted(conn, rule, revision, window, limit, lambda trace_id: sampled(rule.id, trace_id, rate))
        if known is not None:
            return known
        while True:
            room = max(limit - (targets - scored), 0)
            got = online_backfills.count(
                conn, rule, revision, window, after, page, room, decide, _spans_of(queue, rule), joins=join_sessions
            )
            traces, targets, scored = traces + got.traces, targets + got.targets, scored + got.already_scored
            if got.last is None or got.cut or got.traces < page or targets - scored >= limit:
                return traces, targets, scored
            after = got.last


def outcome(record_status: str, states: dict[str, int], failure: str | None) -> tuple[str, str | None]:
    """(status, reason) a backfill shows, from its row's status, its rows per state and, once it ended, why
    none of its targets was scored ok (``BackfillStore.failure``; None: one was, see the module docstring)."""
    if record_status == "cancelled":
        return "cancelled", None
    if record_status == "planning" or states.get("queued", 0) + states.get("running", 0):
        return "running", None
    return ("failed", failure) if failure is not None else ("done", None)


class Backfiller:
    """The backfill planning loop of one service (start with :meth:`start`, stop with :meth:`close`)."""

    def __init__(
        self,
        settings: Settings,
        queue: ScoreQueue,
        rules: RuleStore,
        me: str,
        wake: Callable[[], None],
        scorer: Scorer | None = None,
    ) -> None:
        self.settings = settings
        self.queue = queue
        self.rules = rules
        self.store = BackfillStore(queue.engine)
        self.me = me
        self.wake_scorer = wake
        self.scorer = scorer  # a fast rule's pages are scored here (online/backfill/direct.py); None: all queued
        self.row_ms: dict[str, float] = {}  # a rule's rows' mean duration_ms, as its last direct page ran
        self._task: asyncio.Task[None] | None = None
        self.ticker = IdleTicker(settings.online_poll_s, settings.idle_poll_max_s)
        self.planning = False  # whether the last pass claimed a backfill still planning

    def wake(self) -> None:
        """Plan now (a backfill was created)."""
        self.ticker.wake()

    async def start(self) -> None:
        """Let go of what a killed predecessor held, then start the loop."""
        await asyncio.to_thread(self.store.release_own, self.me)
        if self._task is None:
            self._task = asyncio.ensure_future(self._loop())

    async def close(self) -> None:
        """Stop the loop (a page in its transaction finishes or rolls back whole)."""
        task, self._task = self._task, None
        await stop(task)

    async def plan_once(self) -> int:
        """Claim one backfill still planning and queue (or score: :meth:`direct`) its pages while the backlog
        has room; pages planned."""
        s = self.settings
        backfill = await asyncio.to_thread(self.store.claim, self.me, s.online_claim_s)
        self.planning = backfill is not None
        if backfill is None:
            return 0
        try:
            rule = await asyncio.to_thread(self.rules.get, backfill.workspace_id, backfill.rule_id)
        except NotFoundError:
            await asyncio.to_thread(self.store.cancel, backfill.workspace_id, backfill.rule_id, backfill.id)
            return 0
        pages = 0
        spans_of = _spans_of(self.queue, rule)
        if backfill.queued == 0 and await self.resolvable(backfill, rule):
            await self._resolve(backfill, rule)
        while True:
            counts = await asyncio.to_thread(self.queue.counts)
            room = s.online_backlog_max - counts["queued"] - counts["running"]
            if room <= 0:
                break
            fast = await self.direct(rule)
            if fast is None:
                page = SESSION_PAGE if rule.level == "session" else PAGE_TRACES
                more = await asyncio.to_thread(
                    self.store.plan_page, self.me, backfill, rule, page, decide, spans_of, room, s.online_claim_s,
                    join_sessions,
                )  # fmt: skip
            else:
                more = await self._direct_page(backfill, rule, room, probe=fast == "probe")
            pages += 1
            self.wake_scorer()
            if not more:
                break
        return pages

    async def direct(self, rule: RuleRecord) -> str | None:
        """``"page"`` when the rule's backfill is scored here (online/backfill/direct.py), ``"probe"`` when its
        rows are measured first (the page's first target scored here, the others too when it was fast, else
        queued: :func:`~evaluator_host.online.backfill.direct.probe_page`), None when its pages are queued for
        the scorer."""
        if self.scorer is None or not self.settings.online_backfill_direct or rule.limits or rule.level == "session":
            return None
        ms = self.row_ms.get(rule.id)
        if ms is None:
            ms = await asyncio.to_thread(recent_row_ms, self.scorer, rule.id)
        if ms is None:
            return "probe"
        self.row_ms[rule.id] = ms  # not read again for each page
        return "page" if ms < DIRECT_MAX_MS else None

    async def resolvable(self, backfill: Backfill, rule: RuleRecord) -> bool:
        """Whether the backfill's cached targets are answered in one statement (see the module docstring)."""
        if self.scorer is None or not self.settings.online_backfill_direct or self.scorer.exporter is not None:
            return False
        if not eligible(rule) or rule.sinks or self.settings.result_cache_max_bytes <= 0:
            return False
        quotas = self.scorer.components.workspaces.get(rule.workspace_id).quotas  # as the API reads them
        return quotas.get("max_evaluations_per_s") is None

    async def _resolve(self, backfill: Backfill, rule: RuleRecord) -> int | None:
        """Answer the backfill's cached targets (:func:`resolve_cached`); how many (None: nothing done)."""
        assert self.scorer is not None
        scorer = self.scorer
        if scorer.cache is None:
            return None
        try:
            of = scorer.components.evaluators.cache_prefix
            prefix = await of(rule.workspace_id, rule.evaluator_id, backfill.revision, scorer.cache)
        except Exception:  # the evaluator deleted, no longer builds: the pages say so, target by target
            log.exception("a backfill's cache prefix could not be had: its pages run it")
            return None
        if prefix is None:  # not cached (settings.cache false, or not deterministic): every target runs
            return None
        max_spans = self.settings.online_max_trace_spans
        scope = case_scope(prefix, rule.mapping, max_spans, rule.evaluator_id, backfill.revision)
        cap = self.settings.max_stored_result_bytes
        args = (self.queue.engine, self.me, backfill, rule, scope, cap, time.time())
        return await asyncio.to_thread(resolve_cached, *args)

    async def _direct_page(self, backfill: Backfill, rule: RuleRecord, room: int, *, probe: bool = False) -> bool:
        """Read, score and store pages (each stored in one transaction: store/online/backfill_pages.py), up to
        :data:`PIPELINE` at once: the next page is read and scored while the one before it runs or is stored,
        and stored after it (a probe: one page). Whether more is to plan (False too when a page was not stored:
        a claim lost, a cancel — the pages read ahead are dropped unstored, and the next period looks again)."""
        assert self.scorer is not None
        scorer, engine = self.scorer, self.queue.engine
        spans_of = _spans_of(self.queue, rule)
        ahead: collections.deque[tuple[Page, asyncio.Task[Scored]]] = collections.deque()
        pending, reading, pages = 0, True, 0
        try:
            while True:
                while reading and len(ahead) < (1 if probe else PIPELINE) and pages < DIRECT_PAGES:
                    behind = ahead[-1][0] if ahead else None
                    page = await asyncio.to_thread(
                        read_page, engine, self.me, backfill, rule, DIRECT_TRACES, decide, spans_of, room, behind,
                        pending,
                    )  # fmt: skip
                    if page is None:
                        return False
                    score = probe_page if probe else score_page  # a probe: the rest only once the first is fast
                    scoring = score(scorer, rule, page.got.rows, page.got.span_counts, page.got.first_seen)
                    ahead.append((page, asyncio.ensure_future(scoring)))
                    pending += page.got.queued
                    pages += 1
                    reading = page.got.cut or page.got.traces >= DIRECT_TRACES
                if not ahead:
                    return reading
                page, task = ahead.popleft()
                done = await task
                if done.row_ms is not None:
                    self.row_ms[rule.id] = done.row_ms
                elif rule.id not in self.row_ms and done.scored:
                    self.row_ms[rule.id] = 0.0  # answered without a run (errors): as fast as it gets
                args = (engine, self.me, backfill, rule, page, done.scored, done.waiting, self.settings.online_claim_s)
                stored = await asyncio.to_thread(commit_page, *args, done.hashes, done.cached, done.remember)
                if stored is None:
                    return False
                pending -= page.got.queued
                added, ended = stored
                scorer.stored([(row, result) for row, result in done.results if row.target_id in added], utcnow())
                self.wake_scorer()
                if ended:
                    return False
                if not ahead and (probe or pages >= DIRECT_PAGES):
                    return True
        finally:
            for _, left in ahead:
                left.cancel()

    async def _loop(self) -> None:
        while True:
            self.planning = False
            try:
                await self.plan_once()
            except Exception:  # a database hiccup: the next period tries again
                log.exception("planning a backfill failed")
            await self.ticker.wait(self.planning)
