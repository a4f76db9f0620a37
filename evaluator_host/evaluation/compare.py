"""Two versions of an evaluator on the same rows: the shared comparison core.

:func:`run_both` runs the same cases on two versions — a stored revision (:class:`StoredRevision`) or a
definition (:class:`~evaluator_host.evaluation.usecases.Definition`) — through the evaluation use cases,
charged to the workspace as two evaluations a row before anything runs (``QuotaExceeded``, 429). It is
the one run behind both of its uses:

* ``POST /v1/evaluators/{id}/compare`` (:func:`compare_revisions`): two stored revisions, and
  :func:`flips` reports each row whose outcome flipped — ``status``, ``passed``, ``label``, or
  ``|Δscore| > tolerance`` (a score that appears or disappears flips too) — with the aggregate deltas
  (pass rate, mean score, error count) and a per-row table;
* migration's equivalence run (``migration/compare.py differential``): a stored revision against its
  migrated code, with migration's stricter notion of "the same answer".

Definition problems of either version raise; user failures are results (and may flip a row).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evaluator_host.errors import NothingCompared
from evaluator_host.evaluation.models import Case, EvaluationResult
from evaluator_host.evaluation.outcomes.aggregate import aggregate
from evaluator_host.evaluation.outcomes.aggregate_models import Aggregate
from evaluator_host.evaluation.outcomes.error_summary import errors_on_both
from evaluator_host.evaluation.usecases import Components, Definition, run_definition, run_stored
from evaluator_host.tenancy.quotas import Charged

__all__ = ["Compared", "StoredRevision", "compare_revisions", "flips", "run_both"]

FLIP_FIELDS = ("status", "passed", "label", "score")


@dataclass(frozen=True)
class StoredRevision:
    """A stored evaluator's revision, as one side of a comparison."""

    evaluator_id: str
    revision: int


async def _answers(
    components: Components,
    workspace: str,
    version: Definition | StoredRevision,
    cases: Sequence[Case],
    charged: Charged,
) -> list[EvaluationResult]:
    if isinstance(version, StoredRevision):
        return (await run_stored(components, workspace, version.evaluator_id, version.revision, cases, charged)).results
    return (await run_definition(components, workspace, version, cases, charged)).results


async def run_both(
    components: Components,
    workspace: str,
    base: Definition | StoredRevision,
    head: Definition | StoredRevision,
    cases: Sequence[Case],
) -> tuple[list[EvaluationResult], list[EvaluationResult]]:
    """``cases`` run on ``base``, then on ``head``, in ``workspace`` (charged ``2 × len(cases)``
    evaluations first): both result lists, in case order."""
    charged = components.quotas.take_evaluations(workspace, 2 * len(cases))  # each row runs on both versions
    old = await _answers(components, workspace, base, cases, charged)
    new = await _answers(components, workspace, head, cases, charged)
    return old, new


def _side(result: EvaluationResult) -> dict[str, Any]:
    return {
        "status": result.status,
        "score": result.score,
        "passed": result.passed,
        "label": result.label,
        "error": f"{result.error.type}: {result.error.message}" if result.error is not None else None,
    }


def _score_flipped(a: float | None, b: float | None, tolerance: float) -> bool:
    if a is None or b is None:
        return a is not b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) != math.isnan(b)
    return abs(b - a) > tolerance


def flips(base: Sequence[EvaluationResult], head: Sequence[EvaluationResult], tolerance: float) -> list[dict[str, Any]]:
    """One row a case: ``{index, flipped, fields, base, head, delta}`` — ``fields`` names what flipped
    (``status``, ``passed``, ``label``, ``score`` when ``|Δscore| > tolerance``), ``delta`` is head's
    score minus base's (null unless both have one)."""
    rows = []
    for index, (old, new) in enumerate(zip(base, head, strict=True)):
        fields = [f for f in ("status", "passed", "label") if getattr(old, f) != getattr(new, f)]
        if _score_flipped(old.score, new.score, tolerance):
            fields.append("score")
        delta = new.score - old.score if old.score is not None and new.score is not None else None
        rows.append(
            {"index": index, "flipped": bool(fields), "fields": fields, "base": _side(old), "head": _side(new)}
            | {"delta": delta}
        )
    return rows


def _change(a: float | None, b: float | None) -> float | None:
    return b - a if a is not None and b is not None else None


@dataclass(frozen=True)
class Compared:
    """A comparison: every row (:func:`flips`), both aggregates and their deltas."""

    rows: list[dict[str, Any]]
    base: Aggregate
    head: Aggregate

    @property
    def flipped(self) -> list[int]:
        """The indices of the rows that flipped."""
        return [r["index"] for r in self.rows if r["flipped"]]

    def deltas(self) -> dict[str, Any]:
        """head − base: pass rate, mean score, errors; and how many rows flipped each field."""
        base_mean = self.base.score.mean if self.base.score else None
        head_mean = self.head.score.mean if self.head.score else None
        return {
            "pass_rate": _change(self.base.pass_rate, self.head.pass_rate),
            "mean_score": _change(base_mean, head_mean),
            "errors": self.head.errors - self.base.errors,
            "flipped": {f: sum(f in r["fields"] for r in self.rows) for f in FLIP_FIELDS},
        }


async def compare_revisions(
    components: Components,
    workspace: str,
    evaluator_id: str,
    base_revision: int,
    head_revision: int,
    cases: Sequence[Case],
    tolerance: float,
) -> Compared:
    """Two stored revisions of ``evaluator_id`` on ``cases`` (:func:`run_both`, then :func:`flips`). Rows
    that are an error on both revisions compare nothing: when every row is, 422 ``NothingCompared`` (field
    ``errors``), never "0 rows flipped"."""
    base, head = await run_both(
        components,
        workspace,
        StoredRevision(evaluator_id, base_revision),
        StoredRevision(evaluator_id, head_revision),
        cases,
    )
    _, summary = errors_on_both(base, head)
    if summary is not None:
        raise NothingCompared(
            f"the comparison compared nothing: every one of the {len(base)} rows is an error on both revisions "
            f"(revision {base_revision}: {summary.sentence()}). Fix the rows or the code so they run.",
            field="errors",
            rows=len(base),
        )
    return Compared(rows=flips(base, head, tolerance), base=aggregate(base), head=aggregate(head))
