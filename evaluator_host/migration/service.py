"""Migrating code and stored evaluators: the codemod, then the differential run, then a revision.

``migrate_code`` runs the language's codemod off the event loop. ``migrate_evaluator`` takes a
stored evaluator's latest revision, migrates its code, runs the revision *and* the migrated code
on the same rows in the sandbox (the request's ``cases``, or a dataset's first ``sample`` rows),
compares the answers row by row (:mod:`evaluator_host.migration.compare`), and stores the migrated
code as a new revision only when every row agrees (and it is not a ``dry_run``). Rows that differ
raise :class:`~evaluator_host.errors.MigrationMismatch` (HTTP 409) and nothing is stored.

The differential run (:func:`~evaluator_host.migration.compare.differential`) is bounded like any
evaluation: inline ``cases`` obey the case-count limit of a call, each row runs twice, so it charges
the workspace's ``max_evaluations_per_s`` two evaluations per row before anything runs (429 as for
``/evaluate``), and a dataset's sample is read only up to ``max_body_bytes`` of rows, the bound a body
of inline ``cases`` has already (over it: 422 ``LimitError`` naming the row, before the rows are parsed):
:func:`evaluator_host.jobs.datasets.samples.sample_cases`, shared with ``POST /v1/evaluators/{id}/compare``.
The new revision keeps the current one's fixtures (they run on the migrated code as it is saved).

A run that compares nothing is refused before anything is saved (422 ``NothingCompared``,
:mod:`evaluator_host.migration.coverage`): a field the legacy code reads null on every row (checked
before the rows run), or every row an error on both versions (after); fields some rows lack and rows
that are errors on both sides are the answer's ``warnings``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from evaluator_host.errors import MigrationMismatch
from evaluator_host.evaluation.limits import check_code_size
from evaluator_host.evaluation.models import Case, EvaluatorCreate
from evaluator_host.evaluation.usecases import Components, Definition
from evaluator_host.jobs.datasets.samples import sample_cases
from evaluator_host.jobs.datasets.uploads import DatasetCatalog
from evaluator_host.migration.codemod import Migration, migrate
from evaluator_host.migration.compare import StoredRevision, differential_run
from evaluator_host.migration.coverage import Rows, check_answers, check_rows, columns_of
from evaluator_host.migration.models import (
    EvaluatorMigrateRequest,
    EvaluatorMigrateResponse,
    MigrateResponse,
    MigrationNote,
    MigrationReads,
)

__all__ = ["Migrations", "response_of"]


def response_of(migration: Migration) -> dict[str, Any]:
    """The fields of :class:`MigrateResponse` for ``migration``."""
    return {
        "code": migration.code,
        "changed": migration.changed,
        "interface_before": migration.interface_before,
        "interface_after": migration.interface_after,
        "diff": migration.diff(),
        "notes": [MigrationNote(line=n.line, message=n.message) for n in migration.notes],
        "rules": migration.rules,
        "reads": None
        if migration.reads is None
        else MigrationReads(
            output=migration.reads.output,
            correct_answer=migration.reads.correct_answer,
            app_params=list(migration.reads.app_params),
        ),
    }


class Migrations:
    """The migration surfaces' service (stateless: made per request from the long-lived components)."""

    def __init__(self, components: Components, datasets: DatasetCatalog) -> None:
        self.components = components
        self.settings = components.settings
        self.datasets = datasets

    async def migrate_code(self, language: str, code: str, correct_answer_key: str) -> Migration:
        """The codemod's answer for ``code`` (a parse, or a round trip to Node: off the event loop)."""
        check_code_size(code, self.settings)
        return await asyncio.to_thread(migrate, language, code, correct_answer_key)

    async def migrate(self, language: str, code: str, correct_answer_key: str) -> MigrateResponse:
        """``POST /v1/migrate``."""
        return MigrateResponse(**response_of(await self.migrate_code(language, code, correct_answer_key)))

    async def _rows(self, workspace: str, body: EvaluatorMigrateRequest) -> Rows:
        cases: list[Case] = await sample_cases(
            self.datasets, self.components, workspace, body.cases, body.dataset_id, body.field_mapping, body.sample
        )
        if body.dataset_id is None:
            return Rows(cases, columns_of(cases), dataset=False)
        record = await self.datasets.get(workspace, body.dataset_id)
        return Rows(cases, record.columns, dataset=True)

    async def migrate_evaluator(
        self, workspace: str, evaluator_id: str, body: EvaluatorMigrateRequest
    ) -> EvaluatorMigrateResponse:
        """``POST /v1/evaluators/{id}/migrate`` in ``workspace``: see the module docstring."""
        current = await self.components.evaluators.get(workspace, evaluator_id)
        settings = current.settings
        migration = await self.migrate_code(current.language, current.code, settings.correct_answer_key)
        fields = response_of(migration)
        if not migration.changed:
            return EvaluatorMigrateResponse(**fields, compared=0, dry_run=body.dry_run, saved=False)
        sample = await self._rows(workspace, body)
        cases = sample.cases
        warnings = check_rows(migration.reads, settings.correct_answer_key, sample)  # NothingCompared: 422
        run = await differential_run(
            self.components,
            workspace,
            StoredRevision(current.id, current.revision),
            Definition.of(current, code=migration.code),
            cases,
        )
        rows = run.rows
        if rows:
            raise MigrationMismatch(
                f"the migrated code answered differently on {len(rows)} of {len(cases)} rows; nothing was saved",
                rows=rows,
                code=migration.code,
                compared=len(cases),
            )
        warnings += check_answers(run.before, run.after, sample.columns)  # every row an error on both: 422
        if body.dry_run:
            return EvaluatorMigrateResponse(**fields, compared=len(cases), dry_run=True, saved=False, warnings=warnings)
        saved = await self.components.evaluators.update(
            workspace,
            current.id,
            EvaluatorCreate(
                name=current.name,
                description=current.description,
                language=current.language,
                code=migration.code,
                packages=current.packages,
                settings=settings,
                secrets=current.secrets,
                network=current.network,
                fixtures=current.fixtures or None,
            ),
        )
        return EvaluatorMigrateResponse(
            **fields, compared=len(cases), dry_run=False, saved=True, evaluator=saved, warnings=warnings
        )
