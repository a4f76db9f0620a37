"""The errors of who may call and how much: keys (401, 403), quotas and one evaluator's own queue (429)."""

from __future__ import annotations

from typing import Any

from evaluator_host.errors.base import EvaluatorHostError

__all__ = ["EvaluatorOverloaded", "Forbidden", "QuotaExceeded", "Unauthorized"]


class Unauthorized(EvaluatorHostError):
    """The request needs a valid ``Authorization: Bearer`` key (HTTP 401)."""

    type_name = "Unauthorized"
    status = 401


class Forbidden(EvaluatorHostError):
    """The key is valid but not for this route (HTTP 403): workspace management needs the operator
    key, and the operator key names no workspace."""

    type_name = "Forbidden"
    status = 403


class QuotaExceeded(EvaluatorHostError):
    """A workspace quota is used up (HTTP 429); ``quota`` names it, retry after ``retry_after_s`` (None: the
    same request can never fit, so the answer carries no ``Retry-After``)."""

    type_name = "QuotaExceeded"
    status = 429

    def __init__(self, message: str, *, quota: str, retry_after_s: int | None = 1) -> None:
        super().__init__(message)
        self.quota = quota
        self.retry_after_s = retry_after_s

    def fields(self) -> dict[str, Any]:
        return {"quota": self.quota}


class EvaluatorOverloaded(EvaluatorHostError):
    """One evaluator's interactive calls would wait for its workers longer than a bound derived from its
    timeout (its own queue: :mod:`evaluator_host.sandbox.pool.admission`); answered at once, HTTP 429 with
    Retry-After and the type ``Overloaded``, instead of queueing. Other evaluators are not affected."""

    type_name = "Overloaded"
    status = 429

    def __init__(self, message: str, *, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s: int = retry_after_s
