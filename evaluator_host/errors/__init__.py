"""One error tree for evaluator-host, imported from here (``from evaluator_host.errors import X``).

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
    ├── StorageUnavailable         503   the datasets' bucket is unreachable or denies access (Retry-After)
    │   └── BucketInUse            503   the bucket's prefix holds another database's rows (refused at start-up)
    └── SandboxError               503   the infrastructure failed, not the user (Retry-After, retryable)
        ├── BackendUnavailable     503   no sandbox backend can run this language right now
        └── Overloaded             503   the workers' memory budget is in use (the machine's memory)

``status`` is each class's HTTP status (the column above; a test keeps the drawing equal to the classes):
the API's handler answers ``status`` with the envelope of :meth:`EvaluatorHostError.fields` and, when
``retry_after_s`` is set, a ``Retry-After`` header. The classes that never reach an answer (start-up
refusals, :class:`JobNotHeld`) keep the base's 500: reaching one is a defect.

User failures (exceptions, timeouts, memory and output limits) are *outcomes*
(``EvaluationResult.status``), never exceptions of this tree.

The classes live in one module per domain, the tree drawn above being the one place that shows them together:
``base`` the root, ``definition`` what cannot be accepted (422), ``access`` keys and quotas, ``resources`` a
resource's state, ``service`` the service's own failures; ``wire`` the answer's shape (``ErrorDetail``,
``ErrorBody``). Importers use this package, never a module of it; the modules import only each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from evaluator_host.errors.access import EvaluatorOverloaded, Forbidden, QuotaExceeded, Unauthorized
from evaluator_host.errors.base import EvaluatorHostError
from evaluator_host.errors.definition import (
    CodeSyntaxError,
    DatasetError,
    DefinitionError,
    EgressError,
    FieldMappingError,
    IdempotencyKeyError,
    InterfaceError,
    LimitError,
    MappingPathError,
    MigrationRefused,
    NothingCompared,
    PackageSpecError,
    PolicyError,
    ResponseTooLarge,
    SecretError,
    TargetError,
)
from evaluator_host.errors.resources import (
    BadRequest,
    BuildError,
    ConflictError,
    DuplicateNameError,
    FixturesFailed,
    MigrationMismatch,
    NotFoundError,
)
from evaluator_host.errors.service import (
    BackendUnavailable,
    BucketInUse,
    DatabaseSchemaError,
    DataDirInUse,
    JobNotHeld,
    Overloaded,
    SandboxError,
    StorageFull,
    StorageUnavailable,
)

if TYPE_CHECKING:  # the wire shape (pydantic models): imported from here too, on first use (``__getattr__``)
    from evaluator_host.errors.wire import ErrorBody as ErrorBody
    from evaluator_host.errors.wire import ErrorDetail as ErrorDetail

__all__ = [
    "BackendUnavailable",
    "BucketInUse",
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
    "NothingCompared",
    "NotFoundError",
    "Overloaded",
    "EvaluatorOverloaded",
    "PackageSpecError",
    "PolicyError",
    "QuotaExceeded",
    "ResponseTooLarge",
    "SandboxError",
    "SecretError",
    "StorageFull",
    "StorageUnavailable",
    "TargetError",
    "Unauthorized",
]


def __getattr__(name: str) -> Any:
    """``ErrorBody`` and ``ErrorDetail`` (``wire``), imported when first asked for: raising and catching this
    tree needs no pydantic, so the command line's parser (``evaluator-host --help``) loads none."""
    if name in ("ErrorBody", "ErrorDetail"):
        from evaluator_host.errors import wire

        return getattr(wire, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
