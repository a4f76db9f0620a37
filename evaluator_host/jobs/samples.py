"""The rows two versions of an evaluator are compared on, and the revision comparison over them.

:func:`sample_cases` gives a comparison's rows: the request's inline ``cases`` (the case-count limit of
a call), or a dataset's first ``sample`` rows mapped by ``field_mapping`` (read only up to
``max_body_bytes`` of rows, the bound a body of inline cases already has: over it, a 422
``LimitError`` naming the row, before the rows are parsed). Migration's equivalence run reads its
rows here, and so does :func:`compare` — ``POST /v1/evaluators/{id}/compare``: both revisions run on
the same rows (:func:`evaluator_host.evaluation.compare.compare_revisions`, charged two evaluations a
row), and the answer lists every flipped row's index, the aggregates and their deltas, and one page of
the per-row table (``offset``/``limit``, ``only_flipped``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from evaluator_host.definitions.models import MAX_REVISION
from evaluator_host.errors import LimitError
from evaluator_host.evaluation.compare import compare_revisions
from evaluator_host.evaluation.limits import check_case_count
from evaluator_host.evaluation.models import Aggregate, Case
from evaluator_host.evaluation.usecases import Components
from evaluator_host.jobs.mapping import RowMapper
from evaluator_host.jobs.models import FieldMapping
from evaluator_host.jobs.uploads import DatasetCatalog

__all__ = ["CompareRequest", "CompareResponse", "compare", "sample_cases"]

MAX_PAGE = 1000  # rows of the per-row table in one answer


class CompareRequest(BaseModel):
    """``POST /v1/evaluators/{id}/compare``: two revisions, and the rows (exactly one of ``cases`` /
    ``dataset_id``: a dataset's first ``sample`` rows, mapped by ``field_mapping``)."""

    model_config = ConfigDict(extra="forbid")

    base_revision: int = Field(ge=1, le=MAX_REVISION, description="The revision compared against.")
    head_revision: int = Field(ge=1, le=MAX_REVISION, description="The revision compared.")
    cases: list[Case] | None = Field(None, min_length=1)
    dataset_id: str | None = None
    sample: int = Field(100, ge=1, le=10_000, description="Rows of the dataset compared (its first ones).")
    field_mapping: FieldMapping | None = None
    tolerance: float = Field(1e-9, ge=0, le=1e9, description="A score flips when |Δscore| is over this.")
    only_flipped: bool = Field(False, description="The per-row table lists only the rows that flipped.")
    offset: int = Field(0, ge=0, description="The per-row table's first row (a page: offset, limit).")
    limit: int = Field(100, ge=1, le=MAX_PAGE, description="Rows of the per-row table in this answer.")

    @model_validator(mode="after")
    def _one_source(self) -> CompareRequest:
        if (self.cases is None) == (self.dataset_id is None):
            raise ValueError("give exactly one of cases / dataset_id")
        return self


class CompareResponse(BaseModel):
    """Both revisions on the same rows: what flipped, the aggregates and their deltas, a page of rows."""

    evaluator_id: str
    base_revision: int
    head_revision: int
    compared: int = Field(description="Rows run on both revisions.")
    flipped: list[int] = Field(description="Indices (in the compared rows) of every row that flipped.")
    deltas: dict[str, Any] = Field(
        description="head − base: pass_rate, mean_score, errors; flipped: rows flipped per field "
        "(status, passed, label, score)."
    )
    base: Aggregate
    head: Aggregate
    rows: list[dict[str, Any]] = Field(
        description="The per-row table's page: {index, flipped, fields, base, head, delta}; base/head: "
        "{status, score, passed, label, error}."
    )
    next_offset: int | None = Field(None, description="The next page's offset (same request); null: last page.")


async def sample_cases(
    datasets: DatasetCatalog,
    components: Components,
    workspace: str,
    cases: list[Case] | None,
    dataset_id: str | None,
    field_mapping: FieldMapping | None,
    sample: int,
) -> list[Case]:
    """The rows of a comparison: ``cases``, or ``dataset_id``'s first ``sample`` rows (module docstring)."""
    if cases is not None:
        check_case_count(len(cases), components.settings)
        return list(cases)
    assert dataset_id is not None
    record = await datasets.get(workspace, dataset_id)  # 404 when unknown
    mapper = RowMapper(field_mapping or FieldMapping(), record.columns)
    limit = components.settings.max_body_bytes

    def first_rows() -> list[Case]:
        lines: list[bytes] = []
        size = 0
        for index, line in datasets.files.lines(record.id):
            if index >= sample:
                break
            size += len(line)
            if size > limit:
                raise LimitError(
                    f"the dataset's first {index + 1} rows are over {limit:,} bytes (max_body_bytes), the most "
                    f"one differential run reads; compare fewer rows (sample={index} or less)"
                )
            lines.append(line)
        return [Case.model_validate(mapper.case(json.loads(line))) for line in lines]

    return await asyncio.to_thread(first_rows)


async def compare(
    components: Components, datasets: DatasetCatalog, workspace: str, evaluator_id: str, body: CompareRequest
) -> CompareResponse:
    """``POST /v1/evaluators/{id}/compare`` in ``workspace`` (module docstring). Both revisions are read
    first (404 for one that does not exist), before any row runs."""
    for number in (body.base_revision, body.head_revision):
        await components.evaluators.get(workspace, evaluator_id, number)
    cases = await sample_cases(
        datasets, components, workspace, body.cases, body.dataset_id, body.field_mapping, body.sample
    )
    compared = await compare_revisions(
        components, workspace, evaluator_id, body.base_revision, body.head_revision, cases, body.tolerance
    )
    table = [r for r in compared.rows if r["flipped"]] if body.only_flipped else compared.rows
    end = body.offset + body.limit
    return CompareResponse(
        evaluator_id=evaluator_id,
        base_revision=body.base_revision,
        head_revision=body.head_revision,
        compared=len(cases),
        flipped=compared.flipped,
        deltas=compared.deltas(),
        base=compared.base,
        head=compared.head,
        rows=table[body.offset : end],
        next_offset=end if end < len(table) else None,
    )
