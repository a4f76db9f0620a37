"""App factory: wires settings, services, routers and error handlers. Nothing else."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from evaluator_host.api import datasets, errors, evaluate, evaluators, health, jobs, migrate
from evaluator_host.api.deps import require_api_key
from evaluator_host.api.fastpath import FastPath
from evaluator_host.api.limits import BodyLimitMiddleware
from evaluator_host.api.observe import Observe
from evaluator_host.services import Services
from evaluator_host.settings import Settings

__all__ = ["create_app"]


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the service; components start in the lifespan and stop with it."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        services = Services.start(settings)
        app.state.services = services
        try:
            await services.resume()
            yield
        finally:
            await services.close()

    app = FastAPI(
        title="evaluator-host",
        version="0.1.0",
        description="Sandboxed, polyglot code execution for LLM evaluators.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=settings.max_body_bytes,
        overrides={"/v1/datasets": settings.max_dataset_bytes},
    )
    if settings.fast_path:  # the hot routes skip the rest
        app.add_middleware(FastPath, settings=settings)
    app.add_middleware(Observe)  # outermost of ours: request ids, durations, the access log
    errors.install(app)
    app.include_router(health.router)
    guarded = [Depends(require_api_key)]
    app.include_router(evaluate.router, prefix="/v1", dependencies=guarded)
    app.include_router(evaluators.router, prefix="/v1", dependencies=guarded)
    app.include_router(datasets.router, prefix="/v1", dependencies=guarded)
    app.include_router(jobs.router, prefix="/v1", dependencies=guarded)
    app.include_router(migrate.router, prefix="/v1", dependencies=guarded)
    return app
