"""Scoring: claim queued online scores, run each rule's evaluator on its trace, store the results.

Contract (docs/online.md, "How it works"):

* At start the rows a killed predecessor of this service held go back to the queue
  (:meth:`ScoreQueue.release_own`); then, whenever a batch slot is free (looking every ``online_poll_s``, at
  once when woken — the router queued rows, a group ended —; while looks find nothing and no group runs, the
  period doubles up to ``idle_poll_max_s``, never past the time a row this service put back is due again:
  ``shared/idle.py``), up to
  ``online_scoring_batch`` rows are claimed (``claimed_by`` = the service id) and grouped by
  (workspace, evaluator, revision, rule): one group is one call of the stored evaluator on all its cases
  (:func:`~evaluator_host.evaluation.usecases.run_stored`), at most ``online_scoring_concurrency``
  groups at once. A rule whose rows were measured fast has larger claims and calls, up to
  ``online_scoring_batch_max`` rows (:mod:`~evaluator_host.online.scoring.sizing`).
* The case: ``trace`` is the trace dict (:func:`load_many`: what
  :func:`~evaluator_host.online.levels.traces.load_trace` gives, a claimed batch's small traces in two
  queries; at most ``online_max_trace_spans`` spans each); ``inputs``
  and ``outputs`` come from the rule's ``mapping`` paths (over
  :func:`~evaluator_host.online.reading.mapping.path_view`), else
  from the evaluated span, else (evaluated span = root) from the trace's first span that has some.
  A mapping path that finds nothing, an evaluator deleted or a definition that no longer builds are
  *results* (status ``error``), stored like any other; a row whose trace retention deleted meanwhile
  ends ``dropped`` (status ``retention``).
* Each group is charged to its workspace's ``max_evaluations_per_s`` as throughput
  (:meth:`~evaluator_host.tenancy.quotas.QuotaGuard.pace_evaluations`): the rows the bucket holds run
  now, the rest go back to the queue until they would fit (:meth:`ScoreQueue.defer`: no attempt
  counted) — delayed, never failed, and never holding a scoring slot while they wait.
* A rule's budgets (``limits``: :mod:`evaluator_host.online.deciding.budgets`) are applied first: its rows past
  them go back to the queue with the budget's name and their resume time (delayed, never dropped). A
  group holds one rule's rows, so the egress proxy's record of its cases' connections is the rule's:
  the calls each round made are stored (``model_calls_per_minute``: :mod:`evaluator_host.online.deciding.model_calls`).
* A judge's 429 slows its rule down (:class:`budgets.Windows`): the evaluator raised ``RateLimited``, or
  the egress proxy saw a 429 answered during a round; a row whose result is that ``RateLimited``, or an
  error in a round where the proxy saw a 429, goes back to the queue (no result, no attempt).
* Evaluator failures are results (never retried). Infrastructure failures (``SandboxError``:
  the sandbox unavailable, overloaded; ``StorageFull``; anything unexpected) put the rows back with
  back-off ``min(2**attempts, 60)`` s; the attempt that reaches ``online_max_attempts`` stores a
  ``sandbox_error`` result instead, so no row is retried for ever — nor a row whose scoring killed
  its service each time (it is claimed again past its claim, one attempt more each time).
* A backfill's rows are grouped apart and run through the result cache
  (:func:`~evaluator_host.evaluation.caching.cached_calls.evaluate_cached`): a deterministic evaluator's re-run
  costs lookups, not runs. Live traffic is not looked up (its cases are new).
* Results are written ``WHERE claimed_by = me`` (:meth:`ScoreQueue.finish`); then counted in the
  metrics, the router and the sink delivery nudged (``on_stored``: each looks at once if it had backed off —
  the router recounts the backlog ``/healthz`` shows) and, when an exporter is set, sent back over OTLP. Then
  the rows stored whose rule had a ``candidate_revision`` at the claim run it on the same cases, stored apart
  (:mod:`evaluator_host.online.candidates.shadow`: never exported, counted or queued for review).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from evaluator_host.errors import EvaluatorHostError, LimitError, QuotaExceeded, SandboxError, StorageFull
from evaluator_host.evaluation.caching.cache import ResultCache
from evaluator_host.evaluation.models import Case, EvaluationResult
from evaluator_host.evaluation.usecases import Components, run_stored
from evaluator_host.observability.metrics import Metrics
from evaluator_host.online.candidates.shadow import Shadow
from evaluator_host.online.deciding import budgets, model_calls
from evaluator_host.online.levels.cases import Refused, build_case, load_many
from evaluator_host.online.scoring.round_cases import EXPIRED, cases_of, error_result, gave_up, stored_values
from evaluator_host.online.scoring.sizing import RoundSizes, key_of
from evaluator_host.shared.idle import IdleTicker
from evaluator_host.store.db import utcnow
from evaluator_host.store.online.budgets import usage
from evaluator_host.store.online.calls import record
from evaluator_host.store.online.scores import Claimed, ScoreQueue
from evaluator_host.tenancy.quotas import Charged

__all__ = ["Exporter", "Refused", "Scorer", "build_case", "load_many", "stored_values"]

log = logging.getLogger(__name__)


class Exporter(Protocol):
    """Sends a stored score back over OTLP (``online.export.ScoreExporter``); must not block."""

    def export(self, trace_id: str, span_id: str | None, rule: dict[str, Any], result: dict[str, Any]) -> None: ...


class Scorer:
    """The scoring loop of one service; :meth:`wake` when rows were queued."""

    def __init__(
        self,
        components: Components,
        queue: ScoreQueue,
        me: str,
        metrics: Metrics,
        exporter: Exporter | None = None,
        cache: ResultCache | None = None,
    ) -> None:
        self.components = components
        self.cache = cache  # a backfill's rows are looked up in it (evaluation/caching/cached_calls.py)
        self.settings = components.settings
        self.queue = queue
        self.me = me
        self.metrics = metrics
        self.exporter = exporter
        self.shadow = Shadow(components, queue.engine)  # candidate revisions (issue 53)
        self.ticker = IdleTicker(self.settings.online_poll_s, self.settings.idle_poll_max_s)
        # scores were stored: nudge the router (it recounts the backlog) and the sink delivery (components, services)
        self.on_stored: list[Callable[[], None]] = []
        self._slots = asyncio.Semaphore(self.settings.online_scoring_concurrency)
        self._running: set[asyncio.Task[None]] = set()
        self.sizes = RoundSizes(self.settings.online_scoring_batch, self.settings.online_scoring_batch_max)
        # AIMD per rule (429s); no limit until a refusal, then halved from every slot full of batch-sized calls
        self.windows = budgets.Windows(self.settings.online_scoring_batch * self.settings.online_scoring_concurrency)
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        """Look for queued rows now."""
        self.ticker.wake()

    def _later(self, seconds: Iterable[float]) -> None:
        """Rows put back in the queue are due again after ``seconds``: look for them then."""
        for due in sorted(set(seconds)):
            self.ticker.due_in(due)

    async def start(self) -> None:
        """Put back what a killed predecessor held, then start the loop."""
        released = await asyncio.to_thread(self.queue.release_own, self.me)
        if released:
            log.info("put back %d online scores a stopped service of this data dir held", released)
        if self._task is None:
            self._task = asyncio.ensure_future(self._loop())

    async def close(self) -> None:
        """Stop: claimed rows not finished stay held until their claim expires (or the next start)."""
        tasks = [t for t in (self._task, *self._running) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._task = None

    async def _loop(self) -> None:
        while True:
            claimed = 0
            try:
                claimed = await self.score_once()
            except Exception:  # a database hiccup: the next period tries again
                log.exception("claiming online scores failed")
            if claimed < self.sizes.asked or self._slots.locked():
                await self.ticker.wait(bool(claimed or self._running))

    async def score_once(self) -> int:
        """Claim one batch (when a slot is free) and start scoring it; how many rows were claimed."""
        if self._slots.locked():
            return 0
        s = self.settings
        claimed = await asyncio.to_thread(self.queue.claim, self.me, self.sizes.claim_size(), s.online_claim_s)
        gone = [(r.rule_id, r.target_id) for r in claimed if r.rule is None]
        if gone:
            await asyncio.to_thread(self.queue.discard, self.me, gone, "rule_deleted")
        groups: dict[tuple[str, str, int | None, bool, str], list[Claimed]] = {}
        for row in claimed:  # a backfill's rows apart: they are answered from the result cache where they can be
            if row.rule is not None:  # one rule's rows a group: its cases' egress connections are the rule's
                key = (row.workspace_id, row.evaluator_id, row.rule.revision, row.backfill_id is not None, row.rule_id)
                groups.setdefault(key, []).append(row)
        calls, back = self.sizes.split(groups.values())  # fast rules' rows in large calls (online/scoring/sizing.py)
        for rows in calls:
            task = asyncio.ensure_future(self._group(rows))
            self._running.add(task)
            task.add_done_callback(self._running.discard)
        if back:  # started first: a failure here leaves only these rows to wait out their claim
            await asyncio.to_thread(self.queue.give_back, self.me, [(r.rule_id, r.target_id) for r in back])
        return len(claimed)

    async def _group(self, rows: list[Claimed]) -> None:
        async with self._slots:
            try:
                await self._score(rows)
            except Exception:  # never lose the loop; the rows' claims expire and they are tried again
                log.exception("scoring %d online rows failed", len(rows))
            finally:
                self.ticker.wake()  # a slot is free: claim again now

    async def _score(self, rows: list[Claimed]) -> None:
        over = [r for r in rows if r.attempts > self.settings.online_max_attempts]
        results: dict[tuple[str, str], EvaluationResult] = {
            (r.rule_id, r.target_id): gave_up(r, f"gave up after {r.attempts - 1} attempts (the service stopped)")
            for r in over
        }
        rows = await self._within_budgets([r for r in rows if r.attempts <= self.settings.online_max_attempts])
        counted = {rule: sum(1 for r in rows if r.rule_id == rule) for rule in {r.rule_id for r in rows}}
        try:  # started in its rule's window by _within_budgets
            await self._score_cases(rows, over, results, time.monotonic())
        finally:
            for rule, n in counted.items():
                self.windows.ended(rule, n)

    async def _score_cases(
        self, rows: list[Claimed], over: list[Claimed], results: dict[tuple[str, str], EvaluationResult], at: float
    ) -> None:
        cases = await asyncio.to_thread(cases_of, self.queue.engine, rows, self.settings.online_max_trace_spans)
        runnable, expired = [], []
        for row in rows:
            case = cases[(row.rule_id, row.target_id)]
            if isinstance(case, EvaluationResult) and case.error is not None and case.error.type == EXPIRED:
                expired.append((row.rule_id, row.target_id))  # retention deleted its spans: dropped, not failed
            elif isinstance(case, EvaluationResult):
                results[(row.rule_id, row.target_id)] = case
            else:
                runnable.append((row, case))
        if runnable:
            await self._run_paced(runnable, results)
        ran = {k: results[k] for row, _ in runnable if (k := (row.rule_id, row.target_id)) in results}
        if ran:
            self.sizes.measured(key_of(rows[0]), ran.values())
        if any(r.proxy_log for r in ran.values()):  # its cases' calls through the egress proxy (model_calls)
            await asyncio.to_thread(record, self.queue.engine, model_calls.rounds(ran), utcnow())
        await self._rate_limited(rows, results, ran, at)
        stored = await self._store(rows + over, results)
        keys = [((r.rule_id, r.target_id), r, c) for r, c in runnable]
        await self.shadow.score([(r, c, results[k]) for k, r, c in keys if k in stored])
        if expired:
            await asyncio.to_thread(self.queue.discard, self.me, expired, "retention")

    async def _rate_limited(
        self, rows: list[Claimed], results: dict[Any, EvaluationResult], ran: dict[Any, EvaluationResult], at: float
    ) -> None:
        """Rows that ran (``ran``) refused for their judge's rate (:func:`model_calls.rate_refused`) go back to the
        queue (no result, no attempt); a rule with one, or with a 429 the egress proxy saw, has its window halved
        (a round started ``at``); a rule's round without either widens it (:class:`budgets.Windows`)."""
        refusals = model_calls.rate_refused(ran)
        refused = [r for r in rows if (r.rule_id, r.target_id) in refusals]
        limited = {r.rule_id for r in refused} | {rule for (rule, _), x in ran.items() if model_calls.saw_429(x)}
        for row in refused:
            del results[(row.rule_id, row.target_id)]
        for rule in limited:
            self.windows.limited(rule, at)
        for rule in {r.rule_id for r in rows} - limited:
            self.windows.succeeded(rule, sum(1 for r in rows if r.rule_id == rule))
        if refused:
            keys = [(r.rule_id, r.target_id) for r in refused]
            await asyncio.to_thread(self.queue.defer, self.me, keys, [1.0] * len(keys), "rate_limited")
            self._later([1.0])  # after the write: the rows' due times are the database's, taken in it

    async def _run_paced(self, runnable: list[tuple[Claimed, Case]], results: dict[Any, EvaluationResult]) -> None:
        """Run one group's cases, charged to its workspace's rate as throughput: the rows the rate does not
        hold now go back to the queue (:meth:`ScoreQueue.defer`) and get no result here."""
        first = runnable[0][0]
        charged, due = self.components.quotas.pace_evaluations(first.workspace_id, len(runnable))
        held = len(runnable) - len(due)
        await self._defer([r for r, _ in runnable[held:]], due)
        runnable = runnable[:held]
        if not runnable:
            return
        got: list[EvaluationResult] = []
        ran = False
        try:
            got, ran = await self._run(first, [c for _, c in runnable], charged), True
        except (SandboxError, StorageFull) as exc:
            await self._retry([r for r, _ in runnable], exc, results)
            got = []
        except EvaluatorHostError as exc:  # NotFound (deleted), a definition that no longer builds
            got = [error_result(exc.type_name, exc.message, r) for r, _ in runnable]
        except Exception as exc:
            log.exception("online scoring failed")
            await self._retry([r for r, _ in runnable], exc, results)
            got = []
        for (row, _), result in zip(runnable, got, strict=False):
            results[(row.rule_id, row.target_id)] = result
        if ran and len(got) < len(runnable):  # the one-by-one run (``_run``) stopped at the rate
            stopped = [r for r, _ in runnable[len(got) :]]
            await self._defer(stopped, self.components.quotas.pace_evaluations(first.workspace_id, len(stopped))[1])

    async def _within_budgets(self, rows: list[Claimed]) -> list[Claimed]:
        """The rows their rules' budgets let run now, started in their rules' windows (the caller ends them);
        the others go back to the queue (:func:`budgets.plan`)."""
        now, later = utcnow(), dict[str, list[tuple[Claimed, float]]]()
        started: dict[str, int] = {}
        try:
            for rule_id in {r.rule_id for r in rows}:
                mine = [r for r in rows if r.rule_id == rule_id]
                room = self.windows.room(rule_id)  # slowed down after a judge's 429s: the rest wait a moment
                later.setdefault("concurrency", []).extend((r, 0.5) for r in mine[room:])
                mine = mine[:room]
                started[rule_id] = len(mine)  # in the window now, before any await: other rounds see it taken
                self.windows.started(rule_id, len(mine))
                limits = next((r.rule.limits for r in mine if r.rule is not None and r.rule.limits), None)
                if not limits:
                    continue
                hour, calls = "sandbox_seconds_per_hour" in limits, "model_calls_per_minute" in limits
                minute = timedelta(seconds=self.settings.online_budget_minute_s)
                use = await asyncio.to_thread(
                    usage, self.queue.engine, rule_id, now, hour=hour, calls=calls, minute=minute
                )
                n, held = budgets.plan(limits, len(mine), use, now, minute)
                for row, (by, after) in zip(mine[n:], held, strict=True):
                    later.setdefault(by, []).append((row, after))
                self.windows.ended(rule_id, len(held))
                started[rule_id] = n
            for by, items in later.items():
                if items:
                    keys = [(r.rule_id, r.target_id) for r, _ in items]
                    await asyncio.to_thread(self.queue.defer, self.me, keys, [a for _, a in items], by)
                    self._later(a for _, a in items)
        except BaseException:  # nothing runs: out of the windows again
            for rule_id, n in started.items():
                self.windows.ended(rule_id, n)
            raise
        waiting = {(r.rule_id, r.target_id) for items in later.values() for r, _ in items}
        return [r for r in rows if (r.rule_id, r.target_id) not in waiting]

    async def _defer(self, rows: list[Claimed], due: list[float]) -> None:
        """Put ``rows`` back in the queue, each claimable again after its ``due`` seconds (no attempt counted)."""
        if rows:
            await asyncio.to_thread(self.queue.defer, self.me, [(r.rule_id, r.target_id) for r in rows], due)
            self._later(due)

    async def _run(self, first: Claimed, cases: list[Case], charged: Charged) -> list[EvaluationResult]:
        revision = first.rule.revision if first.rule else None
        ws, evaluator = first.workspace_id, first.evaluator_id
        cache = self.cache if first.backfill_id is not None else None
        try:
            return (await run_stored(self.components, ws, evaluator, revision, cases, charged, cache)).results
        except LimitError:
            if len(cases) == 1:
                raise
            self.sizes.too_large(key_of(first))  # its calls from now on: online_scoring_batch rows
            # results too large together: one call per case, each charged again (they run again); the
            # cases the rate does not hold now get no result: their rows go back to the queue
            out: list[EvaluationResult] = []
            for case in cases:
                try:
                    one = self.components.quotas.take_evaluations(ws, 1)
                except QuotaExceeded:
                    break
                out.extend((await run_stored(self.components, ws, evaluator, revision, [case], one, cache)).results)
            return out

    async def _retry(self, rows: list[Claimed], exc: Exception, results: dict[Any, EvaluationResult]) -> None:
        last = [r for r in rows if r.attempts >= self.settings.online_max_attempts]
        for row in last:
            results[(row.rule_id, row.target_id)] = gave_up(row, f"gave up after {row.attempts} attempts: {exc}")
        again = [r for r in rows if r.attempts < self.settings.online_max_attempts]
        if again:
            back_off = min(2.0 ** again[0].attempts, 60.0)
            log.warning("online scoring will retry %d rows in %.0f s: %s", len(again), back_off, exc)
            keys = [(r.rule_id, r.target_id) for r in again]
            await asyncio.to_thread(self.queue.retry, self.me, keys, back_off, f"{type(exc).__name__}: {exc}")
            self._later([back_off])

    async def _store(
        self, rows: Sequence[Claimed], results: dict[tuple[str, str], EvaluationResult]
    ) -> set[tuple[str, str]]:
        """Store the results this claim still holds; the (rule id, target id) of the rows stored."""
        now = utcnow()
        cap = self.settings.max_stored_result_bytes
        todo = []
        for row in rows:
            result = results.get((row.rule_id, row.target_id))
            if result is None:
                continue  # put back for a retry
            todo.append((row, result, stored_values(result, now, cap)))
        keys = [(r.rule_id, r.target_id, v) for r, _, v in todo]
        cached = {(r.rule_id, r.target_id): r.backfill_id for r, res, _ in todo if res.cached and r.backfill_id}
        stored = await asyncio.to_thread(self.queue.finish, self.me, keys, cached)
        kept = [(row, result) for (row, result, _), ok in zip(todo, stored, strict=True) if ok]
        self.stored(kept, now)
        return {(row.rule_id, row.target_id) for row, _ in kept}

    def stored(self, scored: Sequence[tuple[Claimed, EvaluationResult]], now: datetime) -> None:
        """Count stored scores in the metrics and send them over OTLP (when an exporter is set). Rows another
        service took over after our claim expired are not passed: its result stands."""
        if scored:
            for nudge in self.on_stored:
                nudge()
        for row, result in scored:
            lag = (now - row.last_span_at).total_seconds() if row.last_span_at else None
            self.metrics.online_scored(row.rule_id, result.status, result.score, lag)
            if self.exporter is not None and row.rule is not None:
                rule = {"id": row.rule_id, "name": row.rule.name, "evaluator_id": row.evaluator_id}
                try:
                    self.exporter.export(row.trace_id, row.span_id, rule, result.model_dump(mode="json"))
                except Exception:
                    log.exception("exporting an online score failed")
