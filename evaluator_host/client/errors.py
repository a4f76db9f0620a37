"""The client's exceptions: one tree, the service's error answers mapped onto it.

::

    class                       when
    ClientError                 base of every failure the client raises
    ├── ServiceUnreachable      no answer at all: refused, DNS, no answer within timeout_s (names the URL)
    ├── JobWaitTimeout          ``wait_job`` gave up before the job finished (the job goes on)
    └── ApiError                the service answered an error (status, type, message, line, column, detail)
        ├── BadRequestError     400  a request malformed (TargetError, BadRequest, a non-hex trace id)
        ├── AuthenticationError 401  no valid key where one is needed (Unauthorized)
        ├── PermissionDenied    403  a valid key on a route it may not use (Forbidden; operator routes)
        ├── NotFoundError       404  no such resource in this workspace (NotFound)
        ├── ConflictError       409  the resource's state refuses it (Conflict, an Idempotency-Key in use)
        │   └── MigrationMismatchError  409  migrated code answered differently (``detail`` has the rows)
        ├── PayloadTooLarge     413  the request body is past the service's limit
        ├── UnprocessableError  422  the definition or body cannot be accepted (SyntaxError, ValidationError,
        │   │                        PackageSpecError, DatasetError, …: ``type`` names which; ``line``, ``column``)
        │   └── BuildFailedError     422  the package set could not be installed (BuildError)
        ├── RateLimitError      429  a workspace quota is used up (QuotaExceeded; ``retry_after_s``)
        └── ServerError         5xx  the service failed, not the request
            ├── ServiceUnavailable   503  the sandbox backend is down or overloaded (``retry_after_s``)
            └── StorageFullError     507  the service's data disk is full

The service's body is ``{"error": {"type", "message", "line", "column", ...}}`` (docs/api.md,
``evaluator_host/errors.py``); :func:`error_for` picks the class from the status, then from the
``type`` for the two kinds that have their own class, and keeps the whole body as ``detail``
(an :class:`~evaluator_host.errors.ErrorDetail`). An answer that is not that envelope (a proxy's
HTML page) still maps by status, with the text cut to 500 characters as the message.
"""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import ValidationError

from evaluator_host.errors import ErrorDetail
from evaluator_host.evaluation.models import Evaluator

__all__ = [
    "ApiError",
    "AuthenticationError",
    "BadRequestError",
    "BuildFailedError",
    "ClientError",
    "ConflictError",
    "FixturesFailedError",
    "JobWaitTimeout",
    "MigrationMismatchError",
    "NotFoundError",
    "PayloadTooLarge",
    "PermissionDenied",
    "RateLimitError",
    "ServerError",
    "ServiceUnavailable",
    "ServiceUnreachable",
    "StorageFullError",
    "UnprocessableError",
    "error_for",
]


class ClientError(Exception):
    """Base of every failure the client raises."""


class ServiceUnreachable(ClientError):
    """The service did not answer at ``url`` (refused, unresolvable, timed out)."""

    def __init__(self, url: str, cause: Exception) -> None:
        reason = str(cause) or type(cause).__name__
        if isinstance(cause, httpx.TimeoutException) and not isinstance(cause, httpx.ConnectTimeout):
            super().__init__(f"the service at {url} did not answer in time (timeout_s): {reason}")
        else:
            super().__init__(f"cannot reach the service at {url}: {reason}")
        self.url = url


class JobWaitTimeout(ClientError):
    """``wait_job`` stopped waiting; ``job`` is the last state seen (the job itself goes on)."""

    def __init__(self, job: Any, timeout_s: float) -> None:
        super().__init__(f"job {job.id} is still {job.status} after {timeout_s:g} s")
        self.job = job


class ApiError(ClientError):
    """The service answered ``status`` with an error body."""

    status: int = 0

    def __init__(
        self, status: int, detail: ErrorDetail, *, method: str, url: str, retry_after_s: float | None = None
    ) -> None:
        super().__init__(f"{method} {url} answered {status}: {detail.type}: {detail.message}")
        self.status = status
        self.method = method
        self.url = url
        self.detail = detail
        self.type = detail.type
        self.message = detail.message
        self.line = detail.line
        self.column = detail.column
        self.retry_after_s = retry_after_s


class BadRequestError(ApiError):
    """400."""


class AuthenticationError(ApiError):
    """401: no valid key (set ``api_key`` or ``EVALUATOR_HOST_API_KEY``)."""


class PermissionDenied(ApiError):
    """403: the key may not use this route (the operator's routes need the operator key)."""


class NotFoundError(ApiError):
    """404: no such resource in this workspace."""


class ConflictError(ApiError):
    """409."""


class MigrationMismatchError(ConflictError):
    """409 ``MigrationMismatch``: the migrated code answered differently on some rows (in ``detail``)."""


class FixturesFailedError(ConflictError):
    """409 ``FixturesFailed``: the revision was stored as a draft (never the latest) because fixtures failed;
    :attr:`draft` is it, with its ``fixture_report`` (save again with ``force=True`` to make it the latest)."""

    @property
    def draft(self) -> Evaluator:
        """The stored draft revision."""
        return Evaluator.model_validate(getattr(self.detail, "evaluator", None) or {})


class PayloadTooLarge(ApiError):
    """413: the body is past the service's request limit."""


class UnprocessableError(ApiError):
    """422: the definition, the dataset or the body cannot be accepted; ``type`` says why."""


class BuildFailedError(UnprocessableError):
    """422 ``BuildError``: the package set could not be installed."""


class RateLimitError(ApiError):
    """429: a workspace quota is used up."""


class ServerError(ApiError):
    """5xx: the service failed."""


class ServiceUnavailable(ServerError):
    """503: the sandbox backend is down or overloaded; retry after ``retry_after_s``."""


class StorageFullError(ServerError):
    """507: the service's disk is full."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDenied,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLarge,
    422: UnprocessableError,
    429: RateLimitError,
    503: ServiceUnavailable,
    507: StorageFullError,
}
_BY_TYPE: dict[str, type[ApiError]] = {
    "MigrationMismatch": MigrationMismatchError,
    "BuildError": BuildFailedError,
    "FixturesFailed": FixturesFailedError,
}


def _detail(response: httpx.Response) -> ErrorDetail:
    try:
        return ErrorDetail.model_validate(response.json()["error"])
    except (ValueError, KeyError, TypeError, ValidationError):
        return ErrorDetail(type=f"HTTP {response.status_code}", message=response.text[:500] or response.reason_phrase)


def error_for(response: httpx.Response) -> ApiError:
    """The exception for an error answer (status >= 400)."""
    detail = _detail(response)
    status = response.status_code
    cls = _BY_TYPE.get(detail.type) or _BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
    retry = response.headers.get("retry-after")
    try:
        retry_after = float(retry) if retry is not None else None
    except ValueError:
        retry_after = None
    request = response.request
    return cls(status, detail, method=request.method, url=str(request.url), retry_after_s=retry_after)
