"""The differential run: do two versions of an evaluator give the same answers, row by row?

:func:`differential` is the run itself, written once for the stored-evaluator migration
(``migration/service.py``: a stored revision against its migrated code) and the command line's
``migrate --check-with`` (a file's code against its migration): each row runs on both versions
through the evaluation use cases (:func:`~evaluator_host.evaluation.usecases.run_definition`,
:func:`~evaluator_host.evaluation.usecases.run_stored`), charged to the workspace as two
evaluations a row before anything runs, and :func:`differences` compares the answers.

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

from evaluator_host.evaluation.models import Case, EvaluationResult
from evaluator_host.evaluation.usecases import Components, Definition, run_definition, run_stored

__all__ = ["FIELDS", "StoredRevision", "answer_of", "differences", "differential"]

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
class StoredRevision:
    """A stored evaluator's revision, as one side of a differential run."""

    evaluator_id: str
    revision: int


async def _answers(
    components: Components, workspace: str, version: Definition | StoredRevision, cases: Sequence[Case]
) -> list[EvaluationResult]:
    if isinstance(version, StoredRevision):
        return (await run_stored(components, workspace, version.evaluator_id, version.revision, cases)).results
    return (await run_definition(components, workspace, version, cases)).results


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
    components.quotas.take_evaluations(workspace, 2 * len(cases))  # each row runs on both versions
    old = await _answers(components, workspace, before, cases)
    new = await _answers(components, workspace, after, cases)
    return differences(old, new)
