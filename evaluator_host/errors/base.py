"""The root of the one error tree (:mod:`evaluator_host.errors` draws the whole tree): its HTTP status, its
answer's extra fields, and whether the request changed something before it was raised."""

from __future__ import annotations

from typing import Any

__all__ = ["EvaluatorHostError"]


class EvaluatorHostError(Exception):
    """Base of every error raised by evaluator-host."""

    type_name: str = "EvaluatorHostError"
    status: int = 500  # the HTTP status of its answer (the table drawn in the package docstring)
    retry_after_s: int | None = None  # when set, the answer's Retry-After (seconds)
    # True when the request DID change something before this error (the answer describes what was stored):
    # an ``Idempotency-Key`` retry then gets this answer again instead of making the change a second time.
    effect_stored: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def fields(self) -> dict[str, Any]:
        """What the error answer carries besides ``type`` and ``message`` (``line``, ``column``, ...)."""
        return {}
