"""App factory: wires settings, services, routers and error handlers. Nothing else."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from fastapi import Depends, FastAPI

from evaluator_host import API_VERSION, __version__
from evaluator_host.api import errors, interpreters
from evaluator_host.api.examples import with_examples
from evaluator_host.api.middleware.auth import ApiKeyGate
from evaluator_host.api.middleware.fastpath import FastPath
from evaluator_host.api.middleware.hosts import HostGate
from evaluator_host.api.middleware.limits import BodyLimitMiddleware
from evaluator_host.api.middleware.observe import Observe
from evaluator_host.api.query import known_query_parameters
from evaluator_host.api.routes import (
    backfills,
    datasets,
    docs,
    evaluate,
    evaluators,
    health,
    inspect,
    jobs,
    migrate,
    online,
    redeliver,
    results,
    review,
    runtimes,
    secrets,
    sessions,
    shadow,
    traces,
    web,
    workspaces,
)
from evaluator_host.errors import ErrorBody
from evaluator_host.observability import tracing
from evaluator_host.services import Services
from evaluator_host.settings import Settings

if TYPE_CHECKING:  # grpc and protobuf are imported only when the gRPC receiver is on (otlp_grpc_port)
    from evaluator_host.api.otlp_grpc import GrpcReceiver

__all__ = ["ERROR_RESPONSES", "create_app"]


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorBody, "description": description}


# What every /v1 route may answer besides its success; the body is always ErrorBody.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _error("The body could not be parsed at all (e.g. broken multipart data): BadRequest."),
    401: _error("Keys are configured or stored and the request has no valid `Authorization: Bearer` key."),
    403: _error(
        "The operator key on a workspace's route (or a workspace key on an operator route); a request from a "
        "web page of another site (OriginNotAllowed)."
    ),
    404: _error("The evaluator, revision, dataset, job or secret does not exist in the key's workspace."),
    413: _error("The request body is over the limit (MAX_BODY_BYTES; datasets: MAX_DATASET_BYTES)."),
    421: _error("The Host header names none of the service's names (HostNotAllowed; ALLOWED_HOSTS)."),
    422: _error(
        "The body or the definition is refused: ValidationError, SyntaxError, InterfaceError, "
        "PackageSpecError, LimitError, BuildError, DatasetError, FieldMappingError, MappingPathError, SecretError, "
        "EgressError."
    ),
    429: _error("A workspace quota is used up (QuotaExceeded, naming it in `quota`); retry after `Retry-After`."),
    503: _error("The sandbox is unavailable (SandboxError, BackendUnavailable); retry after `Retry-After` seconds."),
}


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the service; components start in the lifespan and stop with it."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        services = Services.start(settings)
        app.state.services = services
        traced = False
        receiver: GrpcReceiver | None = None
        asking: asyncio.Task[None] | None = None
        try:
            traced = tracing.start(settings)  # when configured (off by default)
            await services.resume()
            if settings.otlp_grpc_port is not None:  # OTLP/gRPC in
                from evaluator_host.api import otlp_grpc

                receiver = await otlp_grpc.start(services)
            await asyncio.to_thread(interpreters.discover, settings, services.backend.name)  # /healthz runtimes
            asking = asyncio.create_task(interpreters.ask_again(settings, services.backend.name))  # any unknown
            yield
        finally:
            if asking is not None:
                asking.cancel()
            if receiver is not None:
                await receiver.stop()
            await services.close()
            if traced:
                await asyncio.to_thread(tracing.stop)  # the last spans exported (bounded)

    app = FastAPI(
        title="evaluator-host",
        version=__version__,
        description="Sandboxed, polyglot code execution for LLM evaluators.",
        lifespan=lifespan,
        docs_url=None,  # served by api/docs.py from local assets
        redoc_url=None,
        # every route: an unknown query parameter is a 422 naming it, as an unknown body field is
        dependencies=[Depends(known_query_parameters)],
        # FastAPI's built-in telemetry follows the process-global OpenTelemetry providers: off, the service's
        # spans are its own (observability/tracing.py), and no request pays its per-request provider checks
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.settings = settings
    app.add_middleware(BodyLimitMiddleware, settings=settings)  # MAX_BODY_BYTES; uploads: MAX_DATASET_BYTES
    if settings.fast_path:  # the hot routes skip the rest
        app.add_middleware(FastPath, settings=settings)
    app.add_middleware(ApiKeyGate)  # before anything reads a body
    app.add_middleware(HostGate, settings=settings)  # a name this service answers to, before anything else
    app.add_middleware(Observe)  # outermost of ours: request ids, durations, the access log
    errors.install(app)
    docs.install(app)
    build_openapi = app.openapi
    # info.version: the distribution's version; info.x-api-version: the /vN of the paths (evaluator_host/__init__.py)
    app.openapi = lambda: with_examples(_with_api_version(build_openapi()))  # type: ignore[method-assign]
    app.include_router(health.router)
    # every route takes the caller's workspace (or the operator) as a dependency of its own
    for router in (
        evaluate.router,
        inspect.router,
        evaluators.router,
        datasets.router,
        jobs.router,
        results.router,
        runtimes.router,
        secrets.router,
        workspaces.router,
        online.router,
        backfills.router,
        shadow.router,
        traces.router,
        sessions.router,
        review.router,
        redeliver.router,
    ):
        app.include_router(router, prefix="/v1", responses=ERROR_RESPONSES)
    conflict = _error("MigrationMismatch: the migrated code answered differently (+ rows, compared, code).")
    app.include_router(migrate.router, prefix="/v1", responses={**ERROR_RESPONSES, 409: conflict})
    web.install(app)
    return app


def _with_api_version(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with ``info.x-api-version`` (the HTTP API's major version) set."""
    spec.setdefault("info", {})["x-api-version"] = API_VERSION
    return spec
