"""``POST /v1/migrate`` and ``POST /v1/evaluators/{id}/migrate``: legacy evaluators → v2."""

from __future__ import annotations

from fastapi import APIRouter

from evaluator_host.api.deps import ServicesDep, WorkspaceDep
from evaluator_host.migration.models import (
    EvaluatorMigrateRequest,
    EvaluatorMigrateResponse,
    MigrateRequest,
    MigrateResponse,
)
from evaluator_host.migration.service import Migrations
from evaluator_host.services import Services

router = APIRouter(tags=["migrate"])


def _migrations(services: Services) -> Migrations:
    return Migrations(services, services.datasets)


@router.post("/migrate", response_model=MigrateResponse)
async def migrate(body: MigrateRequest, services: ServicesDep, _workspace: WorkspaceDep) -> MigrateResponse:
    """Rewrite legacy code to ``evaluate(inputs, outputs, trace)``; v2 or ``main`` code comes back unchanged."""
    return await _migrations(services).migrate(body.language, body.code, body.settings.correct_answer_key)


@router.post("/evaluators/{evaluator_id}/migrate", response_model=EvaluatorMigrateResponse)
async def migrate_evaluator(
    evaluator_id: str, body: EvaluatorMigrateRequest, services: ServicesDep, workspace: WorkspaceDep
) -> EvaluatorMigrateResponse:
    """Migrate a stored evaluator: run both on the rows, save a revision only when every row agrees (else 409)."""
    return await _migrations(services).migrate_evaluator(workspace, evaluator_id, body)
