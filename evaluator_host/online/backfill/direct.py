"""A backfill's page scored by its planner, not through the queue (issue 50: a backfill at thousands of targets/s).

Contract (docs/online.md, "Backfill"):

* A rule's backfill is scored *directly* when its rows are fast (:func:`direct`): no budgets (``limits``), not
  session level, and its evaluator's recent rows took less than :data:`DIRECT_MAX_MS` each as the harness
  measured them (the planner's last pages, else the rule's stored scores; none yet: a probe — the first page's
  first target is scored here (:func:`probe_page`), and the page's others too when it took less than
  :data:`DIRECT_MAX_MS`, else they are queued). Otherwise its pages are queued for the scorer as before.
* :func:`score_page` scores one page read by :func:`~evaluator_host.store.online.backfill_pages.read_page`
  in bulk: the page's traces in two queries and its cases built as the scorer builds them; the workspace's
  ``max_evaluations_per_s`` charged as throughput; one call of the stored evaluator through the result cache
  (:func:`~evaluator_host.evaluation.caching.cached_calls.evaluate_cached`: the hits in one lookup per 500 keys, the
  misses in one batch on a warm worker, as a job's chunk runs). What it does not score now is *waiting*: the
  rows the rate does not hold (due when it would: ``delayed_by`` ``max_evaluations_per_s``), rows whose judge
  refused them for its rate (a second: ``rate_limited``), and every row of a run the sandbox failed, of results
  too large together, or of a trace retention deleted — those are queued as the queue path would, and the scorer
  scores (or retries, or drops) them with all its rules. Evaluator failures are results, as in the scorer.
* With its scores it stores each target's case key (trace level without filter, the call cached, the status
  cacheable: ``store/online/case_hashes.py``) with its trace's span count and generation as the page read them, so
  that a later backfill with the same evaluator and mapping answers it in one statement; the targets the cache
  answered are counted (``Scored.cached``).
* The page is then stored in one transaction (:func:`~evaluator_host.store.online.backfill_pages.commit_page`),
  the misses' result-cache entries with it (``Scored.remember``: in a savepoint, a failure of the cache's write
  logged and only its part rolled back; a page not stored stores no entry either: it runs again).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from evaluator_host.errors import EvaluatorHostError, LimitError, SandboxError, StorageFull
from evaluator_host.evaluation.caching.cache import CACHEABLE
from evaluator_host.evaluation.caching.cached_calls import CacheKeys, case_scope
from evaluator_host.evaluation.models import Case, ErrorInfo, EvaluationResult
from evaluator_host.evaluation.usecases import run_stored
from evaluator_host.online.deciding import model_calls
from evaluator_host.online.scoring.round_cases import EXPIRED, cases_of
from evaluator_host.online.scoring.scorer import Scorer, stored_values
from evaluator_host.store.db import utcnow
from evaluator_host.store.online.case_hashes import hashable
from evaluator_host.store.online.rows import OnlineScoreRow
from evaluator_host.store.online.rules import RuleRecord
from evaluator_host.store.online.scores import Claimed

__all__ = ["DIRECT_MAX_MS", "DIRECT_TRACES", "Scored", "probe_page", "recent_row_ms", "score_page"]

log = logging.getLogger(__name__)

DIRECT_MAX_MS = 5.0  # a rule whose rows take longer goes through the queue (its runs dominate anyway)
DIRECT_TRACES = 1000  # traces a page scored directly


@dataclass
class Scored:
    """A page's outcome: target id → stored columns (``scored``) or queue columns (``waiting``), the rows and
    results to count once stored, and the mean ``duration_ms`` of the results (None: no run, no hit)."""

    scored: dict[str, dict[str, Any]] = field(default_factory=dict)
    waiting: dict[str, dict[str, Any]] = field(default_factory=dict)
    results: list[tuple[Claimed, EvaluationResult]] = field(default_factory=list)
    row_ms: float | None = None
    hashes: list[dict[str, Any]] = field(default_factory=list)  # case-hash rows (store/online/case_hashes.py)
    cached: set[str] = field(default_factory=set)  # target ids answered from the result cache
    remember: Callable[[Connection], None] | None = None  # the misses' cache entries, written with the page

    def add(self, more: Scored) -> None:
        """Add ``more``, the outcome of other rows of the same page (its ``row_ms`` wins when it has one)."""
        self.scored.update(more.scored)
        self.waiting.update(more.waiting)
        self.results += more.results
        self.hashes += more.hashes
        self.cached |= more.cached
        self.row_ms = more.row_ms if more.row_ms is not None else self.row_ms
        first, then = self.remember, more.remember
        if first is not None and then is not None:
            self.remember = lambda conn: (first(conn), then(conn))[-1]
        else:
            self.remember = first or then


def recent_row_ms(scorer: Scorer, rule_id: str) -> float | None:
    """The mean ``duration_ms`` of the rule's last 100 stored scores (None: none). Blocking."""
    s = OnlineScoreRow
    recent = (
        select(s.duration_ms)
        .where(s.rule_id == rule_id, s.state == "done", s.duration_ms.is_not(None))
        .order_by(s.scored_at.desc())
        .limit(100)
        .subquery()
    )
    with scorer.queue.engine.connect() as conn:
        mean = conn.scalar(select(func.avg(recent.c.duration_ms)))
    return None if mean is None else float(mean)


def _claimed(rule: RuleRecord, row: dict[str, Any]) -> Claimed:
    return Claimed(
        rule_id=rule.id,
        trace_id=row["trace_id"],
        workspace_id=row["workspace_id"],
        span_id=row["span_id"],
        evaluator_id=row["evaluator_id"],
        target_id=row["target_id"],
        attempts=1,
        enqueued_at=row["enqueued_at"],
        last_span_at=None,  # a backfill's score is no measure of the scoring lag
        rule=rule,
        backfill_id=row["backfill_id"],
    )


async def score_page(
    scorer: Scorer, rule: RuleRecord, rows: list[dict[str, Any]], span_counts: dict[str, int] | None = None,
    first_seen: dict[str, datetime] | None = None,
) -> Scored:  # fmt: skip
    """Score a page's new rows (``span_counts``, ``first_seen``: their traces', as the page read them — a case key
    is stored only with both; see the module docstring)."""
    out = Scored()
    if not rows:
        return out
    claimed = [_claimed(rule, r) for r in rows]
    cases = await asyncio.to_thread(cases_of, scorer.queue.engine, claimed, scorer.settings.online_max_trace_spans)
    now = utcnow()
    cap = scorer.settings.max_stored_result_bytes
    runnable: list[tuple[Claimed, Case]] = []
    for row in claimed:
        case = cases[(row.rule_id, row.target_id)]
        if isinstance(case, EvaluationResult):
            if case.error is None or case.error.type != EXPIRED:  # a trace retention deleted: the scorer drops it
                out.scored[row.target_id] = stored_values(case, now, cap)
                out.results.append((row, case))
        else:
            runnable.append((row, case))
    if runnable:
        read = {t: (n, first_seen[t]) for t, n in (span_counts or {}).items() if first_seen and t in first_seen}
        await _run(scorer, rule, runnable, out, read)
    return out


async def probe_page(
    scorer: Scorer, rule: RuleRecord, rows: list[dict[str, Any]], span_counts: dict[str, int] | None = None,
    first_seen: dict[str, datetime] | None = None,
) -> Scored:  # fmt: skip
    """A page of a rule whose rows were never measured: its first row scored (:func:`score_page`), then — when
    that row's run took less than :data:`DIRECT_MAX_MS` — the others as well; else they are left out (the page
    queues them for the scorer, as a slow rule's)."""
    out = await score_page(scorer, rule, rows[:1], span_counts, first_seen)
    if len(rows) > 1 and out.row_ms is not None and out.row_ms < DIRECT_MAX_MS:
        out.add(await score_page(scorer, rule, rows[1:], span_counts, first_seen))
    return out


async def _run(
    scorer: Scorer, rule: RuleRecord, runnable: list[tuple[Claimed, Case]], out: Scored,
    read: dict[str, tuple[int, datetime]],
) -> None:  # fmt: skip
    ws = rule.workspace_id
    charged, due = scorer.components.quotas.pace_evaluations(ws, len(runnable))
    held = len(runnable) - len(due)
    now = utcnow()
    for (row, _), after in zip(runnable[held:], due, strict=True):
        out.waiting[row.target_id] = {
            "claimed_until": now + timedelta(seconds=after), "delayed_by": "max_evaluations_per_s"
        }  # fmt: skip
    runnable = runnable[:held]
    if not runnable:
        return
    cases = [c for _, c in runnable]
    # a case here is a stored trace's JSON (build_case): its dump is its fields; the misses' cache entries are
    # written with the page (commit_page: one transaction, not a second writer beside it)
    keys = CacheKeys(native=True, defer=True)
    try:
        got = await run_stored(
            scorer.components, ws, rule.evaluator_id, rule.revision, cases, charged, scorer.cache, keys
        )
        results, revision = got.results, got.record.revision if got.record is not None else rule.revision
    except LimitError:  # results too large together: the scorer runs them one by one
        return
    except (SandboxError, StorageFull) as exc:  # infrastructure: queued, retried with the scorer's back-off
        log.warning("a backfill page's run failed (%s): its rows go to the scorer", exc)
        return
    except EvaluatorHostError as exc:  # deleted, no longer builds: results, as the scorer stores them
        results = [_error(exc.type_name, exc.message, rule) for _ in runnable]
        keys, revision = CacheKeys(), rule.revision  # nothing ran: no case key to store
    except Exception:
        log.exception("a backfill page's run failed: its rows go to the scorer")
        return
    out.remember = keys.pending
    now = utcnow()
    cap = scorer.settings.max_stored_result_bytes
    ran = [r.duration_ms for r in results if r.duration_ms is not None]  # a cache hit's: what a miss would cost
    out.row_ms = sum(ran) / len(ran) if ran else None
    # refused for its judge's rate: RateLimited, or an error in a page whose judge answered 429 (as the scorer)
    paired = list(zip(runnable, results, strict=True))
    refused = model_calls.rate_refused({(row.rule_id, row.target_id): result for (row, _), result in paired})
    hashed = keys.prefix is not None and hashable(rule) and len(keys.keys) == len(paired)
    max_spans = scorer.settings.online_max_trace_spans
    scope = case_scope(keys.prefix, rule.mapping, max_spans, rule.evaluator_id, revision) if keys.prefix else b""
    for pos, ((row, _), result) in enumerate(paired):
        if (row.rule_id, row.target_id) in refused:
            out.waiting[row.target_id] = {"claimed_until": now + timedelta(seconds=1.0), "delayed_by": "rate_limited"}
            continue
        values = out.scored[row.target_id] = stored_values(result, now, cap)
        out.results.append((row, result))
        if result.cached:
            out.cached.add(row.target_id)
        if hashed and result.status in CACHEABLE and row.trace_id in read:
            span_count, first_seen_at = read[row.trace_id]
            out.hashes.append(
                {
                    "workspace_id": ws, "scope": scope, "target_id": row.trace_id, "span_id": row.span_id,
                    "span_count": span_count, "first_seen_at": first_seen_at, "case_key": keys.keys[pos],
                    "status": result.status, "score": values["score"], "passed": values["passed"],
                    "label": values["label"], "runtime_id": values["runtime_id"], "duration_ms": values["duration_ms"],
                }
            )  # fmt: skip


def _error(kind: str, message: str, rule: RuleRecord) -> EvaluationResult:
    return EvaluationResult(
        status="error",
        error=ErrorInfo(type=kind, message=message),
        interface="evaluate",
        runtime={},
        evaluator_id=rule.evaluator_id,
        revision=rule.revision,
    )
