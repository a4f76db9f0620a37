"""The errors of a resource's state: conflicts (409), what does not exist (404), malformed requests (400),
a package set that would not install (422) and a migration whose rows differ (409)."""

from __future__ import annotations

from typing import Any

from evaluator_host.errors.base import EvaluatorHostError

__all__ = [
    "BadRequest",
    "BuildError",
    "ConflictError",
    "DuplicateNameError",
    "FixturesFailed",
    "MigrationMismatch",
    "NotFoundError",
]


class ConflictError(EvaluatorHostError):
    """The request conflicts with the resource's state (HTTP 409), e.g. deleting a dataset jobs use."""

    type_name = "Conflict"
    status = 409


class DuplicateNameError(ConflictError):
    """A workspace name another workspace already has (HTTP 409 + ``existing_id``): names pick a
    workspace in the operator's commands (``workspaces adopt-default --into NAME``)."""

    def __init__(self, message: str, *, existing_id: str) -> None:
        super().__init__(message)
        self.existing_id = existing_id

    def fields(self) -> dict[str, Any]:
        return {"existing_id": self.existing_id}


class FixturesFailed(ConflictError):
    """A saved revision's fixtures failed (HTTP 409): the revision IS stored, as a draft that is never the
    evaluator's latest (``evaluator``: the draft, with its ``fixture_report``; save with ``force: true`` to
    make it the latest anyway)."""

    type_name = "FixturesFailed"
    effect_stored = True  # the draft is stored: a retry with the same Idempotency-Key gets this answer again

    def __init__(self, message: str, *, evaluator: dict[str, Any]) -> None:
        super().__init__(message)
        self.evaluator = evaluator

    def fields(self) -> dict[str, Any]:
        return {"evaluator": self.evaluator}


class NotFoundError(EvaluatorHostError):
    """A resource does not exist."""

    type_name = "NotFound"
    status = 404


class BadRequest(EvaluatorHostError):
    """A malformed request a 422 does not describe (HTTP 400), e.g. a trace id that is not hex."""

    type_name = "BadRequest"
    status = 400


class BuildError(EvaluatorHostError):
    """Installing a package set failed; ``output`` is the installer's trimmed message."""

    type_name = "BuildError"
    status = 422

    def __init__(self, message: str, *, runtime_id: str, output: str, suggestions: list[str] | None = None) -> None:
        super().__init__(message)
        self.runtime_id = runtime_id
        self.output = output
        self.suggestions = suggestions or []  # "did you mean" lines, from what the installer reported

    def fields(self) -> dict[str, Any]:
        return {"runtime_id": self.runtime_id, "output": self.output, "suggestions": self.suggestions}


class MigrationMismatch(EvaluatorHostError):
    """The migrated code answered differently from the stored revision on some rows (nothing saved).

    ``rows`` are the differing rows: ``{index, fields, before, after}`` with the normalized answers.
    """

    type_name = "MigrationMismatch"
    status = 409

    def __init__(self, message: str, *, rows: list[dict[str, Any]], code: str, compared: int) -> None:
        super().__init__(message)
        self.rows = rows
        self.code = code
        self.compared = compared

    def fields(self) -> dict[str, Any]:
        return {"rows": self.rows, "compared": self.compared, "code": self.code}
