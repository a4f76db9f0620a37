"""Replaying a stored result: one row of a job run again on the job's exact revision and runtime, compared.

Contract (``POST /v1/results/replay``): "a stored result" is a job's row — ``(job_id, index)`` — as
``job_results`` holds it (its revision and runtime id with it). :func:`replay` reads the job (of the
caller's workspace: another's is not found), the revision it ran, the row's dataset line and the job's
field mapping, makes the case the job made (``RowMapper.case``; a model-target job's row takes its stored
generation as ``outputs`` and the model call as ``trace``, as the job did — never calling the model again; a row
whose call failed has nothing to replay: ``ConflictError``), binds the revision (its runtime by id:
the same pins build the same runtime; a stored row whose runtime id is not the revision's is a
``ConflictError``) and runs it once — charged one evaluation to the workspace's
``max_evaluations_per_s`` (429 over it) — — never answered from the result cache — then compares the
answer with the stored one field by field (:data:`COMPARED`; timings, printed output and the cached
mark are not compared). 404 when the job or the row's result is not stored.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from evaluator_host.errors import ConflictError, NotFoundError
from evaluator_host.evaluation.models import EvaluationResult
from evaluator_host.jobs.datasets.mapping import RowMapper
from evaluator_host.jobs.models import FieldMapping, Replay
from evaluator_host.jobs.running.runner import JobRunner
from evaluator_host.jobs.stored_form import full_form
from evaluator_host.targets.generate import trace_of
from evaluator_host.targets.models import Target

__all__ = ["COMPARED", "replay"]

COMPARED = ("status", "score", "passed", "outputs", "details", "label", "reason")
_ERROR = ("type", "message", "line")


def changed_fields(stored: EvaluationResult, replayed: EvaluationResult) -> list[str]:
    """Each compared field whose value differs, as ``field: stored → replayed``."""
    found = [
        f"{name}: {getattr(stored, name)!r} → {getattr(replayed, name)!r}"
        for name in COMPARED
        if getattr(stored, name) != getattr(replayed, name)
    ]
    before = stored.error.model_dump(include=set(_ERROR)) if stored.error else None
    after = replayed.error.model_dump(include=set(_ERROR)) if replayed.error else None
    if before != after:
        found.append(f"error: {before!r} → {after!r}")
    return found


async def replay(runner: JobRunner, workspace: str, job_id: str, index: int) -> Replay:
    """Run row ``index`` of job ``job_id`` again and compare (the module's contract)."""
    job, revision = await runner.job_and_revision(workspace, job_id)
    found = await asyncio.to_thread(runner.store.results, job_id, index, 1)
    if not found or found[0].idx != index:
        raise NotFoundError(f"job {job_id!r} has no stored result for row {index}")
    stored_row = found[0]
    if stored_row.runtime_id != revision.runtime_id:
        raise ConflictError(
            f"row {index} ran on runtime {stored_row.runtime_id!r}, its revision names {revision.runtime_id!r}"
        )
    dataset = await asyncio.to_thread(runner.store.get_dataset, job.dataset_id)
    line = next((text for idx, text in runner.datasets.files.lines(dataset.id, index) if idx == index), None)
    if line is None:
        raise NotFoundError(f"the dataset of job {job_id!r} has no row {index}")
    mapper = RowMapper(FieldMapping(**job.field_mapping), dataset.columns)
    case = mapper.case(json.loads(line))
    if job.target is not None:  # a model-target job's row: its stored generation is the outputs, its call the trace
        targeted = runner.lanes.targeted
        generation = (await asyncio.to_thread(targeted.store.of, job_id, [index])).get(index)
        if generation is None or generation.text is None:
            raise ConflictError(
                f"row {index} of job {job_id!r} has no generated text (its model call failed): "
                "the evaluator never ran on it, so there is nothing to replay"
            )
        case["outputs"] = generation.text
        case["trace"] = trace_of(job_id, generation, Target(**job.target).model, targeted.prices)
    charged = runner.quotas.take_evaluations(revision.workspace_id, 1)  # one case, as a call: 429 over the rate
    bound = await runner.revisions.bind(revision)
    raw = (await bound.run([case], charged=charged))[0]
    replayed = bound.result(raw).model_copy(update={"evaluator_id": revision.id, "revision": revision.revision})
    shared: dict[str, Any] = {
        "interface": revision.interface,
        "runtime": {"id": stored_row.runtime_id, "language": revision.language, "packages": revision.packages},
        "evaluator_id": revision.id,
        "revision": stored_row.revision,
    }
    stored = EvaluationResult.model_validate({**json.loads(full_form(stored_row.result)), **shared})
    found_differences = changed_fields(stored, replayed)
    return Replay(
        job_id=job_id,
        index=index,
        evaluator_id=revision.id,
        revision=revision.revision,
        runtime_id=bound.runtime.id,
        identical=not found_differences,
        differences=found_differences,
        stored=stored,
        replayed=replayed,
    )
