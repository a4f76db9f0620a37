"""The evaluate routes' two ends (and the fast path's): a request's cases, and the answer made of their results.

Between them is one use case of :mod:`evaluator_host.evaluation.usecases`; nothing here checks a limit.
"""

from __future__ import annotations

from evaluator_host.api import interpreters
from evaluator_host.evaluation.models import (
    BatchResponse,
    Case,
    EvaluateRequest,
    EvaluationResult,
    EvaluatorEvaluateRequest,
)
from evaluator_host.evaluation.outcomes.aggregate import aggregate
from evaluator_host.evaluation.usecases import Evaluated

__all__ = ["answer", "cases_of"]


def cases_of(body: EvaluateRequest | EvaluatorEvaluateRequest) -> tuple[list[Case], bool]:
    """A request's cases, and whether it was a batch (``cases``) rather than one inline case (their
    number is the use case's to limit: :func:`~evaluator_host.evaluation.limits.check_case_count`)."""
    if body.cases is not None:
        return list(body.cases), True
    return [Case(inputs=body.inputs, outputs=body.outputs, trace=body.trace, app_params=body.app_params)], False


def answer(evaluated: Evaluated, batch: bool, backend: str | None = None) -> EvaluationResult | BatchResponse:
    """The answer of an evaluate call: the one result, or every result with their aggregate (with the
    definition's capability report, when the use case gives one, once per answer; with the stored
    revision that ran, when one did); each result's ``runtime`` names the interpreter ``backend`` ran
    it with (:mod:`evaluator_host.api.interpreters`)."""
    results, capabilities, record = evaluated.results, evaluated.capabilities, evaluated.record
    versions = interpreters.known(backend) if backend is not None else None
    if versions is not None:  # a result's runtime dict may be shared: each gets its own copy
        results = [
            r.model_copy(update={"runtime": interpreters.with_interpreter(r.runtime, versions)}) for r in results
        ]
    if not batch:
        if capabilities is None:
            return results[0]
        return results[0].model_copy(update={"capabilities": capabilities})
    return BatchResponse(
        results=results,
        aggregate=aggregate(results),
        evaluator_id=record.id if record is not None else None,
        revision=record.revision if record is not None else None,
        capabilities=capabilities,
    )
