"""The errors of the service itself: start-up refusals, a job no longer this runner's, a full disk (507) and
the sandbox's infrastructure (503, retryable)."""

from __future__ import annotations

from evaluator_host.errors.base import EvaluatorHostError

__all__ = [
    "BackendUnavailable",
    "BucketInUse",
    "DataDirInUse",
    "DatabaseSchemaError",
    "JobNotHeld",
    "Overloaded",
    "SandboxError",
    "StorageFull",
    "StorageUnavailable",
]


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


class StorageUnavailable(EvaluatorHostError):
    """The shared storage of datasets' rows (an S3-compatible bucket, ``EVALUATOR_HOST_BLOB_URL``) cannot be
    reached, or refused the service's credentials; retryable (HTTP 503 with Retry-After). The message names the
    bucket and what it answered, never a credential; nothing half-written is kept."""

    type_name = "StorageUnavailable"
    status = 503

    def __init__(self, message: str, *, retry_after_s: int = 10) -> None:
        super().__init__(message)
        self.retry_after_s: int = retry_after_s


class BucketInUse(StorageUnavailable):
    """The datasets' bucket prefix holds another database's mark (``owner.json``): another deployment's rows are
    there. The service refuses to start on it (nothing is written or swept), and an upload that meets it answers
    503 like a bucket away; give this deployment a prefix of its own."""

    type_name = "BucketInUse"


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


class Overloaded(SandboxError):
    """A new worker would take the live workers' memory past the machine's budget, and no idle worker
    is left to evict (HTTP 503 with Retry-After)."""

    type_name = "Overloaded"

    def __init__(self, message: str, *, retry_after_s: int = 2) -> None:
        super().__init__(message, retry_after_s=retry_after_s)
