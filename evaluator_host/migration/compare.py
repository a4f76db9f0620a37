"""The differential run: do two versions of an evaluator give the same answers, row by row?

:func:`differential` is the run, for the stored-evaluator migration (``migration/service.py``: a
stored revision against its migrated code) and the command line's ``migrate --check-with`` (a file's
code against its migration). It is one use of the shared comparison core,
:func:`evaluator_host.evaluation.compare.run_both` (each row on both versions through the evaluation
use cases, charged to the workspace as two evaluations a row before anything runs — the run behind
``POST /v1/evaluators/{id}/compare`` too), and :func:`differences` compares the answers with
migration's stricter notion of "the same".

An answer is normalized to what a caller acts on: ``status``, ``score``, ``passed``,
``outputs`` and the error's ``type``. Numbers agree within 1e-9 (relative or absolute).
Warnings, captured output, timings, ``details``, ``reason``, ``label`` and ``interface`` are not
compared: the legacy interface warns where v2 does not, and the rest is not the answer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evaluator_host.evaluation.compare import StoredRevision, run_both
from evaluator_host.evaluation.models import Case, EvaluationResult
from evaluator_host.evaluation.usecases import Components, Definition

__all__ = ["FIELDS", "Differential", "StoredRevision", "answer_of", "differences", "differential", "differential_run"]

FIELDS = ("status", "score", "passed", "outputs", "error_type")


def answer_of(result: EvaluationResult) -> dict[str, Any]:
    """The compared part of a result."""
    return {
        "status": result.status,
        "score": result.score,
        "passed": result.passed,
        "outputs": dict(result.outputs),
        "error_type": result.error.type if result.error is not None else None,
    }


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


def differences(before: Sequence[EvaluationResult], after: Sequence[EvaluationResult]) -> list[dict[str, Any]]:
    """The rows whose answers differ: ``{index, fields, before, after}`` (``fields``: those that differ)."""
    rows = []
    for index, (old, new) in enumerate(zip(before, after, strict=True)):
        a, b = answer_of(old), answer_of(new)
        fields = [f for f in FIELDS if not _same(a[f], b[f])]
        if fields:
            error = old.error or new.error
            message = error.message if error is not None else None
            rows.append({"index": index, "fields": fields, "before": a, "after": b, "error_message": message})
    return rows


@dataclass(frozen=True)
class Differential:
    """A differential run: what each version answered, row by row, and the rows that differ."""

    before: list[EvaluationResult]
    after: list[EvaluationResult]
    rows: list[dict[str, Any]]


async def differential_run(
    components: Components,
    workspace: str,
    before: Definition | StoredRevision,
    after: Definition,
    cases: Sequence[Case],
) -> Differential:
    """:func:`differential`, with both versions' answers (to tell a run that compared nothing)."""
    old, new = await run_both(components, workspace, before, after, cases)
    return Differential(list(old), list(new), differences(old, new))


async def differential(
    components: Components,
    workspace: str,
    before: Definition | StoredRevision,
    after: Definition,
    cases: Sequence[Case],
) -> list[dict[str, Any]]:
    """Run ``cases`` on ``before``, then on ``after``, in ``workspace`` (charged ``2 × len(cases)``
    evaluations first: ``QuotaExceeded``, 429, before anything runs); the rows that differ
    (:func:`differences`). Definition problems of either version raise; user failures are answers."""
    old, new = await run_both(components, workspace, before, after, cases)
    return differences(old, new)
