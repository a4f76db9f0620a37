"""The differential run's comparison: do two revisions give the same answers, row by row?

An answer is normalized to what a caller acts on: ``status``, ``score``, ``passed``,
``outputs`` and the error's ``type``. Numbers agree within 1e-9 (relative or absolute).
Warnings, captured output, timings, ``details``, ``reason``, ``label`` and ``interface`` are not
compared: the legacy interface warns where v2 does not, and the rest is not the answer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from evaluator_host.evaluation.models import EvaluationResult

__all__ = ["FIELDS", "answer_of", "differences"]

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
