"""One error tree for evaluator-host.

::

    class                          HTTP  when
    EvaluatorHostError             500   base of the tree; unexpected when it reaches an answer
    ├── DefinitionError            422   the user's evaluator cannot be accepted (line, column)
    │   ├── CodeSyntaxError        422   the code does not parse (line, column)
    │   ├── InterfaceError         422   no / both / wrong-arity entrypoints
    │   ├── PolicyError            422   the code uses what its execution policy refuses (line, column)
    │   ├── PackageSpecError       422   a pin is not an exact, valid pin (names the entry)
    │   ├── LimitError             422   code too large, settings out of bounds
    │   │   └── ResponseTooLarge   422   one call's results past max_response_bytes (use a job)
    │   ├── MigrationRefused       422   the migration tool will not rewrite this code (says why, line)
    │   ├── NothingCompared        422   a comparison's rows exercise nothing (a read field null on every
    │   │                                row, or every row an error on both sides): names the field, columns
    │   ├── DatasetError           422   an uploaded dataset does not parse (names the row / line)
    │   ├── FieldMappingError      422   a job's field_mapping names a column the dataset lacks
    │   ├── MappingPathError       422   an online rule's mapping path is malformed (docs/online.md, Mapping)
    │   ├── SecretError            422   a secret the workspace does not have, or a name or value refused
    │   ├── EgressError            422   a network destination the workspace's allowlist (or the sandbox) refuses
    │   ├── TargetError            400   a job's model target: endpoint not allowed, prompt not valid Jinja2
    │   └── IdempotencyKeyError    422   an Idempotency-Key malformed, or reused for another request
    ├── Unauthorized               401   no valid key where one is needed (WWW-Authenticate: Bearer)
    ├── Forbidden                  403   a valid key on a route it may not use (operator routes)
    ├── QuotaExceeded              429   a workspace quota is used up (Retry-After, unless waiting never helps)
    ├── EvaluatorOverloaded        429   one evaluator's calls would wait past its bound (type Overloaded, Retry-After)
    ├── BuildError                 422   a package set could not be installed (installer output, "did you mean")
    ├── MigrationMismatch          409   migrated code answered differently on some rows (the rows)
    ├── ConflictError              409   the request conflicts with the resource's state (a dataset jobs use)
    │   ├── DuplicateNameError     409   a workspace name another workspace has (+ existing_id)
    │   └── FixturesFailed         409   a saved revision's fixtures failed: stored as a draft, not the latest
    ├── NotFoundError              404   an evaluator / revision / runtime does not exist, or belongs
    │                                    to another workspace (the same answer: never a hint)
    ├── BadRequest                 400   a request malformed where 422 does not fit (a non-hex trace id)
    ├── DataDirInUse               500   another live service holds the data dir (refused at start-up)
    ├── DatabaseSchemaError        500   the database's schema is newer than this code (refused at start-up)
    ├── JobNotHeld                 500   a job's rows may no longer be committed here (cancelled, deleted,
    │                                    or another service's): its runner stops, nothing is stored
    ├── StorageFull                507   the data disk is full (Retry-After; nothing half-written is kept)
    └── SandboxError               503   the infrastructure failed, not the user (Retry-After, retryable)
        ├── BackendUnavailable     503   no sandbox backend can run this language right now
        └── Overloaded             503   the workers' memory budget is in use (the machine's memory)

``status`` is each class's HTTP status (the column above; a test keeps the drawing equal to the classes):
the API's handler answers ``status`` with the envelope of :meth:`EvaluatorHostError.fields` and, when
``retry_after_s`` is set, a ``Retry-After`` header. The classes that never reach an answer (start-up
refusals, :class:`JobNotHeld`) keep the base's 500: reaching one is a defect.

User failures (exceptions, timeouts, memory and output limits) are *outcomes*
(``EvaluationResult.status``), never exceptions of this tree.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "BackendUnavailable",
    "BadRequest",
    "BuildError",
    "CodeSyntaxError",
    "ConflictError",
    "DataDirInUse",
    "DuplicateNameError",
    "DatabaseSchemaError",
    "DatasetError",
    "DefinitionError",
    "EgressError",
    "EvaluatorHostError",
    "FieldMappingError",
    "Forbidden",
    "FixturesFailed",
    "IdempotencyKeyError",
    "InterfaceError",
    "JobNotHeld",
    "LimitError",
    "MappingPathError",
    "MigrationMismatch",
    "MigrationRefused",
    "NotFoundError",
    "NothingCompared",
    "Overloaded",
    "EvaluatorOverloaded",
    "PackageSpecError",
    "PolicyError",
    "QuotaExceeded",
    "ResponseTooLarge",
    "SandboxError",
    "SecretError",
    "StorageFull",
    "TargetError",
    "Unauthorized",
]


class EvaluatorHostError(Exception):
    """Base of every error raised by evaluator-host."""

    type_name: str = "EvaluatorHostError"
    status: int = 500  # the HTTP status of its answer (the table above)
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


class IdempotencyKeyError(DefinitionError):
    """An ``Idempotency-Key`` that is malformed, or reused for another request (HTTP 422)."""

    type_name = "IdempotencyKeyError"


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


class DataDirInUse(EvaluatorHostError):
    """Another live service process holds the data dir (one service per data dir)."""

    type_name = "DataDirInUse"


class DatabaseSchemaError(EvaluatorHostError):
    """The database's schema is at a revision this code does not know (a newer release migrated it)."""

    type_name = "DatabaseSchemaError"


class JobNotHeld(EvaluatorHostError):
    """A job is no longer this runner's to commit: cancelled, deleted, or run by another service.

    Raised by ``JobStore.commit_rows`` after rolling the chunk back; the runner stops the job
    quietly (never an API answer).
    """

    type_name = "JobNotHeld"


class StorageFull(EvaluatorHostError):
    """The data disk (database, datasets, runtimes) has no room left (ENOSPC); retryable once space returns.

    Whatever was being written is dropped whole (a dataset, a runtime, a chunk's results), so
    nothing half-written is ever served; jobs wait for space instead of failing.
    """

    type_name = "StorageFull"
    status = 507

    def __init__(self, message: str, *, retry_after_s: int = 30) -> None:
        super().__init__(message)
        self.retry_after_s: int = retry_after_s


class SandboxError(EvaluatorHostError):
    """The sandbox infrastructure failed; retryable (HTTP 503 with Retry-After)."""

    type_name = "SandboxError"
    status = 503

    def __init__(self, message: str, *, retry_after_s: int = 5) -> None:
        super().__init__(message)
        self.retry_after_s: int = retry_after_s


class BackendUnavailable(SandboxError):
    """No backend can run this request right now."""

    type_name = "BackendUnavailable"


class EvaluatorOverloaded(EvaluatorHostError):
    """One evaluator's interactive calls would wait for its workers longer than a bound derived from its
    timeout (its own queue: :mod:`evaluator_host.sandbox.pool.admission`); answered at once, HTTP 429 with
    Retry-After and the type ``Overloaded``, instead of queueing. Other evaluators are not affected."""

    type_name = "Overloaded"
    status = 429

    def __init__(self, message: str, *, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s: int = retry_after_s


class Overloaded(SandboxError):
    """A new worker would take the live workers' memory past the machine's budget, and no idle worker
    is left to evict (HTTP 503 with Retry-After)."""

    type_name = "Overloaded"

    def __init__(self, message: str, *, retry_after_s: int = 2) -> None:
        super().__init__(message, retry_after_s=retry_after_s)


# The wire shape of every error answer (docs/api.md): ``{"error": {type, message, line, column, ...}}``.


class ErrorDetail(BaseModel):
    """What every error answer carries; some types add fields (``package``, ``runtime_id``, ``details``, …)."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="NotFound, ValidationError, SyntaxError, BuildError, SandboxError, …")
    message: str
    line: int | None = None
    column: int | None = None


class ErrorBody(BaseModel):
    """Every error answer: ``{"error": {...}}``."""

    error: ErrorDetail
