"""The errors of a definition or request the service cannot accept (HTTP 422, a model target's 400): the
user's code, pins, limits, datasets and mappings, secrets, egress, targets, idempotency keys."""

from __future__ import annotations

from typing import Any

from evaluator_host.errors.base import EvaluatorHostError

__all__ = [
    "CodeSyntaxError",
    "DatasetError",
    "DefinitionError",
    "EgressError",
    "FieldMappingError",
    "IdempotencyKeyError",
    "InterfaceError",
    "LimitError",
    "MappingPathError",
    "MigrationRefused",
    "NothingCompared",
    "PackageSpecError",
    "PolicyError",
    "ResponseTooLarge",
    "SecretError",
    "TargetError",
]


class DefinitionError(EvaluatorHostError):
    """The evaluator definition is invalid; answered with HTTP 422."""

    type_name = "DefinitionError"
    status = 422

    def __init__(self, message: str, *, line: int | None = None, column: int | None = None) -> None:
        super().__init__(message)
        self.line = line
        self.column = column

    def fields(self) -> dict[str, Any]:
        return {"line": self.line, "column": self.column}


class CodeSyntaxError(DefinitionError):
    """The code does not parse; ``line``/``column`` are 1-based in the user's code."""

    type_name = "SyntaxError"


class InterfaceError(DefinitionError):
    """No entrypoint, both entrypoints, or a wrong arity."""

    type_name = "InterfaceError"


class PolicyError(DefinitionError):
    """The code uses a construct its execution policy (``settings.policy``) refuses, or the policy
    is not offered for its language; ``line``/``column`` are 1-based in the user's code."""

    type_name = "PolicyError"


class PackageSpecError(DefinitionError):
    """A package pin is not an exact, valid pin; ``package`` names the entry."""

    type_name = "PackageSpecError"

    def __init__(self, message: str, *, package: str) -> None:
        super().__init__(message)
        self.package = package

    def fields(self) -> dict[str, Any]:
        return {**super().fields(), "package": self.package}


class LimitError(DefinitionError):
    """A size or settings bound was exceeded at definition time."""

    type_name = "LimitError"


class ResponseTooLarge(LimitError):
    """The results of one call would exceed ``max_response_bytes`` (the call was stopped there)."""

    type_name = "ResponseTooLarge"


class MigrationRefused(DefinitionError):
    """The codemod will not rewrite this code safely; the message says why and what to do."""

    type_name = "MigrationRefused"


class NothingCompared(DefinitionError):
    """A comparison (a migration's differential run, a revision comparison) whose rows prove nothing: a
    field the code reads is null or missing on every row, or every row is an error on both sides. Nothing
    is saved. ``field`` names what is missing (``outputs``, ``inputs['correct_answer']``,
    ``app_params['k']``; ``errors``: every row errored), ``columns`` the dataset's (or the cases'
    inputs') columns, ``did_you_mean`` the columns that look meant, ``rows`` how many were compared."""

    type_name = "NothingCompared"

    def __init__(
        self,
        message: str,
        *,
        field: str,
        rows: int,
        columns: list[str] | None = None,
        did_you_mean: list[str] | None = None,
    ) -> None:
        super().__init__(message)
        self.field = field
        self.rows = rows
        self.columns = columns or []
        self.did_you_mean = did_you_mean or []

    def fields(self) -> dict[str, Any]:
        return {
            **super().fields(),
            "field": self.field,
            "rows": self.rows,
            "columns": self.columns,
            "did_you_mean": self.did_you_mean,
        }


class DatasetError(DefinitionError):
    """A dataset cannot be read; ``line`` is the 1-based line (JSONL, CSV) or row (JSON array)."""

    type_name = "DatasetError"


class FieldMappingError(DefinitionError):
    """A ``field_mapping`` entry names a column the dataset does not have."""

    type_name = "FieldMappingError"


class MappingPathError(DefinitionError):
    """An online rule's mapping path does not parse (``trace``/``span``/``root`` then ``.key``,
    ``[0]`` or ``[field=value]`` steps; docs/online.md, "Mapping")."""

    type_name = "MappingPathError"


class SecretError(DefinitionError):
    """An evaluator lists a secret its workspace does not have, or a secret's name or value is refused."""

    type_name = "SecretError"


class EgressError(DefinitionError):
    """An evaluator declares a network destination its workspace's ``network_allow`` does not hold,
    or the sandbox in use cannot give workers network at all."""

    type_name = "EgressError"


class TargetError(DefinitionError):
    """A job's model target is refused: its endpoint is not allowed (egress), its prompt template is not
    valid Jinja2, or it cannot run here; answered with HTTP 400."""

    type_name = "TargetError"
    status = 400


class IdempotencyKeyError(DefinitionError):
    """An ``Idempotency-Key`` that is malformed, or reused for another request (HTTP 422)."""

    type_name = "IdempotencyKeyError"
