"""``GET /healthz``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from evaluator_host.api.deps import get_services
from evaluator_host.services import Services

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz(services: Services = Depends(get_services)) -> dict[str, Any]:
    """Liveness, the backend in use and the isolation it provides."""
    isolation = services.backend.isolation
    stats = services.pool.stats()
    return {
        "status": "ok",
        "backend": services.backend.name,
        "isolation": isolation["summary"],
        "isolation_details": isolation,
        "workers": {"total": stats.workers, "idle": stats.idle, "started": stats.started},
    }
