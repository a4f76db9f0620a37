"""A Python client of the service's HTTP API: :class:`Client` (sync) and :class:`AsyncClient` (asyncio).

Both are typed with the service's own pydantic models (``Evaluator``, ``Job``, ``EvaluationResult``, …,
from the domain packages' ``models.py``) and raise the tree of ``errors.py`` (``ClientError`` at its
root). The base URL comes from the argument or ``EVALUATOR_HOST_URL`` (default
``http://127.0.0.1:8000``), the key from the argument or ``EVALUATOR_HOST_API_KEY``. This package
imports the API's models and nothing that runs the service (no store, sandbox, settings or api);
``tests/unit/test_layers.py`` holds it to that. docs/client.md is the user's guide.
"""

from __future__ import annotations

from evaluator_host.client.aio import AsyncClient
from evaluator_host.client.base import API_KEY_ENV, DEFAULT_URL, URL_ENV
from evaluator_host.client.errors import (
    ApiError,
    AuthenticationError,
    BadRequestError,
    BuildFailedError,
    ClientError,
    ConflictError,
    FixturesFailedError,
    JobWaitTimeout,
    MigrationMismatchError,
    NotFoundError,
    PayloadTooLarge,
    PermissionDenied,
    RateLimitError,
    ServerError,
    ServiceUnavailable,
    ServiceUnreachable,
    StorageFullError,
    UnprocessableError,
)
from evaluator_host.client.sync import Client

__all__ = [
    "API_KEY_ENV",
    "DEFAULT_URL",
    "URL_ENV",
    "ApiError",
    "AsyncClient",
    "AuthenticationError",
    "BadRequestError",
    "BuildFailedError",
    "Client",
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
]
