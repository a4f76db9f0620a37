"""The rows two versions of an evaluator are compared on, and the revision comparison over them.

:func:`sample_cases` gives a comparison's rows: the request's inline ``cases`` (the case-count limit of
a call), or a dataset's first ``sample`` rows mapped by ``field_mapping`` (read only up to
``max_body_bytes`` of rows, the bound a body of inline cases already has: over it, a 422
``LimitError`` naming the row, before the rows are parsed; a dataset of no rows: a 422
``NothingCompared``). Migration's equivalence run reads its
rows here, and so does :func:`compare` — ``POST /v1/evaluators/{id}/compare``: both revisions run on
the same rows (:func:`evaluator_host.evaluation.compare.compare_revisions`, charged two evaluations a
row), and the answer lists every flipped row's index, the aggregates and their deltas, and one page of
the per-row table (``offset``/``limit``, ``only_flipped``).
"""

from __future__ import annotations

import asyncio
import json

from evaluator_host.errors import LimitError, NothingCompared
from evaluator_host.evaluation.compare import compare_revisions
from evaluator_host.evaluation.limits import check_case_count
from evaluator_host.evaluation.models import Case
from evaluator_host.evaluation.usecases import Components
from evaluator_host.jobs.datasets.mapping import RowMapper
from evaluator_host.jobs.datasets.uploads import DatasetCatalog
from evaluator_host.jobs.models import CompareRequest, CompareResponse, FieldMapping

__all__ = ["compare", "sample_cases"]


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

    rows = await asyncio.to_thread(first_rows)
    if not rows:  # a comparison of no rows compares nothing: never an answer of 0 rows, 0 flipped
        raise NothingCompared(
            f"dataset {record.id!r} has no rows: nothing would be compared",
            field="rows",
            rows=0,
            columns=record.columns,
        )
    return rows


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
