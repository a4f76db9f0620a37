"""Shadow revisions (issue 53): a rule's candidate revision scores the same cases as its live one, stored apart.

Contract (docs/online.md, "Try a new revision on live traffic"):

* The scorer calls :meth:`Shadow.score` with the rows whose live result it has just stored, each with the
  case the live revision ran on. Each row whose rule had a ``candidate_revision`` *when the row was claimed*
  (the claim reads the rule in the same statement, so a promotion is seen whole or not at all) and that no
  backfill queued is run on that revision — the same case object, so the candidate's case is the live one's —
  one call per (workspace, evaluator, candidate revision) and ``online_scoring_batch`` rows (a candidate's pace is
  never measured: a fast live rule's large round does not make the candidate's calls large), and each result is
  stored in
  ``online_shadow_scores`` with the live answer beside it (:func:`~evaluator_host.store.online.shadow.record`,
  once per (rule, target, candidate revision)).
* The candidate's results never reach ``online_scores``, the metrics of scores, the OTLP exporter, the sinks
  or the review queues: this module is the only writer of the shadow table, and writes nothing else.
* The candidate's runs are charged to the workspace's ``max_evaluations_per_s`` like a call
  (:meth:`~evaluator_host.tenancy.quotas.QuotaGuard.take_evaluations`); when the rate has no room for them
  then, they are not run (the comparison counts the pairs it has; the live scores are never delayed for it).
* An evaluator error of the candidate (a definition that no longer builds, the evaluator deleted) is its
  result, stored like any; an infrastructure failure (sandbox unavailable, storage full) stores nothing for
  those rows — the live scores stand, the candidate is never retried.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Engine

from evaluator_host.errors import EvaluatorHostError, LimitError, QuotaExceeded, SandboxError, StorageFull
from evaluator_host.evaluation.models import Case, ErrorInfo, EvaluationResult
from evaluator_host.evaluation.usecases import Components, run_stored
from evaluator_host.store.db import utcnow
from evaluator_host.store.online import shadow as online_shadow
from evaluator_host.store.online.rows import LABEL_CHARS
from evaluator_host.store.online.scores import Claimed

__all__ = ["Shadow", "Stored"]

log = logging.getLogger(__name__)

Stored = tuple[Claimed, Case, EvaluationResult]  # a row, its case, and the live result stored for it


class Shadow:
    """Runs and stores the candidate revisions of one service's scorer."""

    def __init__(self, components: Components, engine: Engine) -> None:
        self.components = components
        self.engine = engine

    async def score(self, stored: Sequence[Stored]) -> int:
        """Score ``stored``'s rows on their rules' candidates (see the module docstring); how many were stored."""
        groups: dict[tuple[str, str, int], list[Stored]] = {}
        for row, case, live in stored:
            rule = row.rule
            if rule is None or rule.candidate_revision is None or row.backfill_id is not None:
                continue
            groups.setdefault((row.workspace_id, row.evaluator_id, rule.candidate_revision), []).append(
                (row, case, live)
            )
        done = 0
        batch = self.components.settings.online_scoring_batch  # a candidate is never measured: batch-sized calls
        calls = [(key, items[at : at + batch]) for key, items in groups.items() for at in range(0, len(items), batch)]
        for (ws, evaluator, revision), items in calls:
            try:
                results = await self._run(ws, evaluator, revision, [c for _, c, _ in items])
            except (SandboxError, StorageFull, QuotaExceeded) as exc:
                log.info("candidate revision %s of %s not run on %d targets: %s", revision, evaluator, len(items), exc)
                continue
            except EvaluatorHostError as exc:  # NotFound (deleted), a definition that no longer builds
                results = [_error(exc, evaluator, revision)] * len(items)
            except Exception:
                log.exception("running candidate revision %s of %s failed", revision, evaluator)
                continue
            paired = zip(items, results, strict=False)
            rows = [_row(r, revision, live, result, self._cap) for (r, _, live), result in paired]
            done += await asyncio.to_thread(online_shadow.record, self.engine, rows)
        return done

    @property
    def _cap(self) -> int:
        return int(self.components.settings.max_stored_result_bytes)

    async def _run(self, ws: str, evaluator: str, revision: int, cases: list[Case]) -> list[EvaluationResult]:
        quotas = self.components.quotas
        charged = quotas.take_evaluations(ws, len(cases))
        try:
            return (await run_stored(self.components, ws, evaluator, revision, cases, charged)).results
        except LimitError:
            if len(cases) == 1:
                raise
            out: list[EvaluationResult] = []  # results too large together: one call per case, each charged
            for case in cases:
                one = quotas.take_evaluations(ws, 1)
                out.extend((await run_stored(self.components, ws, evaluator, revision, [case], one)).results)
            return out


def _error(exc: EvaluatorHostError, evaluator: str, revision: int) -> EvaluationResult:
    return EvaluationResult(
        status="error",
        error=ErrorInfo(type=exc.type_name, message=exc.message),
        interface="evaluate",
        runtime={},
        evaluator_id=evaluator,
        revision=revision,
    )


def _row(row: Claimed, revision: int, live: EvaluationResult, result: EvaluationResult, cap: int) -> dict[str, Any]:
    return {
        "rule_id": row.rule_id,
        "target_id": row.target_id,
        "revision": revision,
        "workspace_id": row.workspace_id,
        "trace_id": row.trace_id,
        "span_id": row.span_id,
        "session_id": row.session_id,
        "evaluator_id": row.evaluator_id,
        "status": result.status,
        "score": result.score,
        "passed": result.passed,
        "label": None if result.label is None else result.label[:LABEL_CHARS],
        "duration_ms": result.duration_ms,
        "result": result.stored_json(cap),
        "live_revision": live.revision,
        "live_status": live.status,
        "live_score": live.score,
        "live_passed": live.passed,
        "live_label": None if live.label is None else live.label[:LABEL_CHARS],
        "scored_at": utcnow(),
    }
