"""``GET /healthz``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from evaluator_host import API_VERSION, __version__
from evaluator_host.api import interpreters
from evaluator_host.api.deps import ServicesDep
from evaluator_host.definitions import languages
from evaluator_host.observability.metrics import CONTENT_TYPE

router = APIRouter(tags=["health"])


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(services: ServicesDep) -> PlainTextResponse:
    """Prometheus metrics (text format); what they count: ``evaluator_host/observability/metrics.py``."""
    return PlainTextResponse(services.pool.metrics.render(), media_type=CONTENT_TYPE)


@router.get("/healthz")
def healthz(services: ServicesDep) -> dict[str, Any]:
    """Liveness, the versions (``version``: the distribution's; ``api_version``: the ``/vN`` of the paths), the
    backend in use and the isolation it provides."""
    isolation = services.backend.isolation
    stats = services.pool.stats()
    return {
        "status": "ok",
        "version": __version__,
        "api_version": API_VERSION,
        "backend": services.backend.name,
        "isolation": isolation["summary"],
        "isolation_details": isolation,
        "workers": {
            "total": stats.workers,
            "idle": stats.idle,
            "started": stats.started,
            "spares": stats.spares,
            "memory_mb": services.pool.live_mb(),  # memory_mb of every live worker (bound, starting, spare)
            "memory_budget_mb": services.pool.memory_budget_mb,  # what the machine admits (None: no bound)
        },
        "runtimes_built": services.backend.builder.builds,
        # the interpreters evaluators run under on this backend ("unknown" when one could not be asked)
        "runtimes": interpreters.known(services.backend.name) or {},
        "online": services.online.health(),  # scores queued or running, rows this process dropped
        "policy": {
            "default": services.evaluation.default_policy,
            "setting": services.settings.default_policy,
            "applies_to": [
                lang for lang in languages.names() if "restricted" in languages.get(lang).family.policy_names
            ],
        },
    }
