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
    # the body validated these fields already, with Case's own types (Any): built as validated, not validated again
    one = Case.model_construct(inputs=body.inputs, outputs=body.outputs, trace=body.trace, app_params=body.app_params)
    return [one], False


def answer(evaluated: Evaluated, batch: bool, backend: str | None = None) -> EvaluationResult | BatchResponse:
    """The answer of an evaluate call: the one result, or every result with their aggregate (with the
    definition's capability report, when the use case gives one, once per answer; with the stored
    revision that ran, when one did); each result's ``runtime`` names the interpreter ``backend`` ran
    it with (:mod:`evaluator_host.api.interpreters`)."""
    results, capabilities, record = evaluated.results, evaluated.capabilities, evaluated.record
    versions = interpreters.known(backend) if backend is not None else None
    if versions is not None:  # a result's runtime dict may be shared: each gets a new one (the results are the
        for r in results:  # use case's own, made for this call: set in place, not copied — a copy per result)
            r.runtime = interpreters.with_interpreter(r.runtime, versions)
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
