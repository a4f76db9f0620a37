"""Request and response models of the migration routes (``/v1/migrate``, ``/v1/evaluators/{id}/migrate``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from evaluator_host.definitions.models import Language
from evaluator_host.evaluation.models import Case, Evaluator, EvaluatorSettings
from evaluator_host.jobs.models import FieldMapping

__all__ = [
    "EvaluatorMigrateRequest",
    "EvaluatorMigrateResponse",
    "MigrateRequest",
    "MigrateResponse",
    "MigrationNote",
    "MigrationReads",
]


class MigrateRequest(BaseModel):
    """``POST /v1/migrate``: code to migrate from the legacy interface to ``evaluate(inputs, outputs, trace)``."""

    model_config = ConfigDict(extra="forbid")

    language: Language = Field(description="python | javascript | typescript")
    code: str = Field(description="The evaluator's source code.")
    settings: EvaluatorSettings = Field(
        default_factory=EvaluatorSettings, description="Only correct_answer_key matters here."
    )


class MigrationNote(BaseModel):
    """Something to look at in the migrated code; ``line`` is 1-based in the migrated code (or null)."""

    line: int | None
    message: str


class MigrationReads(BaseModel):
    """What the legacy code reads of a case (found in its code): a differential run in which one of these is
    null on every row compares nothing (422 ``NothingCompared``; docs/migration.md)."""

    output: bool = Field(description="It reads output (the case's outputs).")
    correct_answer: bool = Field(description="It reads correct_answer (inputs[correct_answer_key]).")
    app_params: list[str] = Field(description="The app_params keys it reads by a literal name.")


class MigrateResponse(BaseModel):
    """The migrated code (the same code with ``changed: false`` when there was nothing to migrate)."""

    code: str
    changed: bool
    interface_before: Literal["evaluate", "legacy", "main", "metric"]
    interface_after: Literal["evaluate", "legacy", "main", "metric"]
    diff: str = Field(description="Unified diff from the original code (empty when unchanged).")
    notes: list[MigrationNote]
    rules: list[str] = Field(description="The rewrite rules that changed something, in order.")
    reads: MigrationReads | None = Field(
        None, description="What the legacy code reads of a case (null: the code was not legacy)."
    )


class EvaluatorMigrateRequest(BaseModel):
    """``POST /v1/evaluators/{id}/migrate``: the rows of the differential run (exactly one of
    ``cases`` / ``dataset_id``; a dataset's first ``sample`` rows, mapped by ``field_mapping``)."""

    model_config = ConfigDict(extra="forbid")

    cases: list[Case] | None = Field(None, min_length=1)
    dataset_id: str | None = None
    sample: int = Field(100, ge=1, le=10_000, description="Rows of the dataset compared (its first ones).")
    field_mapping: FieldMapping | None = None
    dry_run: bool = Field(False, description="Compare only; never save a revision.")

    @model_validator(mode="after")
    def _one_source(self) -> EvaluatorMigrateRequest:
        if (self.cases is None) == (self.dataset_id is None):
            raise ValueError("give exactly one of cases / dataset_id")
        return self


class EvaluatorMigrateResponse(MigrateResponse):
    """The migration of a stored evaluator, compared with its current revision on the same rows."""

    compared: int = Field(description="Rows run on both revisions.")
    dry_run: bool
    saved: bool = Field(description="Whether a new revision was stored (every row agreed, not a dry run).")
    evaluator: Evaluator | None = Field(None, description="The new revision, when saved.")
    warnings: list[str] = Field(
        default_factory=list,
        description="What the rows did not exercise: a field the legacy code reads null on some rows (how many), "
        "rows that are errors on both versions.",
    )
