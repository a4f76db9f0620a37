"""The builders of the calls of the evaluation resources, one function a route (``calls.py`` states
the contract): health, evaluate (inline and by id), evaluators and revisions (fixtures, test, compare),
migration, runtimes.
The clients (``sync.py``, ``aio.py``) expose each as a method of the same name; ``datasets.py`` and
``workspace.py`` hold the others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evaluator_host.builds.models import RuntimeList, RuntimeLock, RuntimeView
from evaluator_host.client.calls import Call, as_json, body_of, model, nothing
from evaluator_host.evaluation.models import (
    BatchResponse,
    Case,
    EvaluationResult,
    Evaluator,
    EvaluatorList,
    EvaluatorSettings,
    RevisionList,
)
from evaluator_host.jobs.models import CompareResponse, EvaluatorTestResponse, FieldMapping, Replay
from evaluator_host.migration.models import EvaluatorMigrateResponse, MigrateResponse

Json = Any
Settings = EvaluatorSettings | Mapping[str, Any] | None
Cases = Sequence[Case | Mapping[str, Any]]

# --- health -------------------------------------------------------------------------------------


def request(method: str, path: str, body: Any = None, **params: Any) -> Call[Any]:
    """Any route, as plain JSON: ``method path`` with a JSON ``body`` and the query ``params`` that are not
    None; the decoded answer (None when empty). Errors as every method's. For routes newer than the client."""
    return Call(method.upper(), path, as_json, body, params=params)


def health() -> Call[dict[str, Any]]:
    """``GET /healthz``: status, backend, isolation (no key needed)."""
    return Call("GET", "/healthz", as_json)


# --- evaluate -----------------------------------------------------------------------------------


def evaluate(
    code: str,
    language: str = "python",
    *,
    inputs: Json = None,
    outputs: Json = None,
    trace: Json = None,
    app_params: Json = None,
    packages: Mapping[str, str] | Sequence[str] | None = None,
    settings: Settings = None,
    secrets: Sequence[str] | None = None,
    network: Sequence[Any] | None = None,
) -> Call[EvaluationResult]:
    """``POST /v1/evaluate`` with one case: the code's result (a failure of the code is a ``status``, not an error)."""
    body = body_of(
        language=language, code=code, packages=packages, settings=settings, secrets=secrets, network=network,
        inputs=inputs, outputs=outputs, trace=trace, app_params=app_params,
    )  # fmt: skip
    return Call("POST", "/v1/evaluate", model(EvaluationResult), body)


def evaluate_cases(
    code: str,
    cases: Cases,
    language: str = "python",
    *,
    packages: Mapping[str, str] | Sequence[str] | None = None,
    settings: Settings = None,
    secrets: Sequence[str] | None = None,
    network: Sequence[Any] | None = None,
) -> Call[BatchResponse]:
    """``POST /v1/evaluate`` with ``cases``: each case's result and the aggregate."""
    body = body_of(
        language=language, code=code, packages=packages, settings=settings, secrets=secrets, network=network,
        cases=list(cases),
    )  # fmt: skip
    return Call("POST", "/v1/evaluate", model(BatchResponse), body)


def evaluate_by_id(
    evaluator_id: str,
    *,
    inputs: Json = None,
    outputs: Json = None,
    trace: Json = None,
    app_params: Json = None,
    revision: int | None = None,
) -> Call[EvaluationResult]:
    """``POST /v1/evaluators/{id}/evaluate`` with one case (``revision`` None: the latest)."""
    body = body_of(inputs=inputs, outputs=outputs, trace=trace, app_params=app_params, revision=revision)
    return Call("POST", f"/v1/evaluators/{evaluator_id}/evaluate", model(EvaluationResult), body)


def evaluate_cases_by_id(evaluator_id: str, cases: Cases, *, revision: int | None = None) -> Call[BatchResponse]:
    """``POST /v1/evaluators/{id}/evaluate`` with ``cases``."""
    body = body_of(cases=list(cases), revision=revision)
    return Call("POST", f"/v1/evaluators/{evaluator_id}/evaluate", model(BatchResponse), body)


# --- evaluators ---------------------------------------------------------------------------------


def create_evaluator(
    name: str,
    code: str,
    language: str = "python",
    *,
    packages: Mapping[str, str] | Sequence[str] | None = None,
    settings: Settings = None,
    description: str | None = None,
    secrets: Sequence[str] | None = None,
    network: Sequence[Any] | None = None,
    fixtures: Sequence[Mapping[str, Any]] | None = None,
    force: bool | None = None,
) -> Call[Evaluator]:
    """``POST /v1/evaluators``: stored, its runtime built (a bad pin or a failed build is a 422 now), its
    ``fixtures`` run (any failing: :class:`~evaluator_host.client.errors.FixturesFailedError`, the revision
    stored as a draft, unless ``force``)."""
    body = body_of(
        name=name, language=language, code=code, packages=packages, settings=settings, description=description,
        secrets=secrets, network=network, fixtures=None if fixtures is None else list(fixtures), force=force,
    )  # fmt: skip
    return Call("POST", "/v1/evaluators", model(Evaluator), body)


def replace_evaluator(
    evaluator_id: str,
    name: str,
    code: str,
    language: str = "python",
    *,
    packages: Mapping[str, str] | Sequence[str] | None = None,
    settings: Settings = None,
    description: str | None = None,
    secrets: Sequence[str] | None = None,
    network: Sequence[Any] | None = None,
    fixtures: Sequence[Mapping[str, Any]] | None = None,
    force: bool | None = None,
) -> Call[Evaluator]:
    """``PUT /v1/evaluators/{id}``: a new revision with exactly these fields (fixtures as for
    :func:`create_evaluator`)."""
    body = body_of(
        name=name, language=language, code=code, packages=packages, settings=settings, description=description,
        secrets=secrets, network=network, fixtures=None if fixtures is None else list(fixtures), force=force,
    )  # fmt: skip
    return Call("PUT", f"/v1/evaluators/{evaluator_id}", model(Evaluator), body)


def update_evaluator(evaluator_id: str, **fields: Any) -> Call[Evaluator]:
    """``PATCH /v1/evaluators/{id}``: a new revision, the fields given changed (``settings`` merged key by key)."""
    return Call("PATCH", f"/v1/evaluators/{evaluator_id}", model(Evaluator), body_of(**fields))


def get_evaluator(evaluator_id: str) -> Call[Evaluator]:
    """``GET /v1/evaluators/{id}``: the latest revision."""
    return Call("GET", f"/v1/evaluators/{evaluator_id}", model(Evaluator))


def list_evaluators(*, limit: int | None = None, cursor: str | None = None) -> Call[EvaluatorList]:
    """``GET /v1/evaluators`` (every one, or a page with ``limit``; ``next_cursor`` for the next)."""
    return Call("GET", "/v1/evaluators", model(EvaluatorList), params={"limit": limit, "cursor": cursor})


def list_revisions(evaluator_id: str, *, limit: int | None = None, cursor: str | None = None) -> Call[RevisionList]:
    """``GET /v1/evaluators/{id}/revisions``, oldest first."""
    params = {"limit": limit, "cursor": cursor}
    return Call("GET", f"/v1/evaluators/{evaluator_id}/revisions", model(RevisionList), params=params)


def delete_evaluator(evaluator_id: str) -> Call[None]:
    """``DELETE /v1/evaluators/{id}``."""
    return Call("DELETE", f"/v1/evaluators/{evaluator_id}", nothing)


def test_evaluator(evaluator_id: str, *, revision: int | None = None) -> Call[EvaluatorTestResponse]:
    """``POST /v1/evaluators/{id}/test``: a revision's fixtures run now (``failed`` > 0 is an answer, not an error)."""
    return Call("POST", f"/v1/evaluators/{evaluator_id}/test", model(EvaluatorTestResponse), body_of(revision=revision))


def compare_revisions(
    evaluator_id: str,
    base_revision: int,
    head_revision: int,
    *,
    cases: Cases | None = None,
    dataset_id: str | None = None,
    sample: int | None = None,
    field_mapping: FieldMapping | Mapping[str, Any] | None = None,
    tolerance: float | None = None,
    only_flipped: bool | None = None,
    offset: int | None = None,
    limit: int | None = None,
) -> Call[CompareResponse]:
    """``POST /v1/evaluators/{id}/compare``: both revisions on the same rows (``cases``, or a dataset's first
    ``sample`` rows); the flipped rows, the aggregates' deltas and a page of the per-row table."""
    body = body_of(
        base_revision=base_revision, head_revision=head_revision, cases=None if cases is None else list(cases),
        dataset_id=dataset_id, sample=sample, field_mapping=field_mapping, tolerance=tolerance,
        only_flipped=only_flipped, offset=offset, limit=limit,
    )  # fmt: skip
    return Call("POST", f"/v1/evaluators/{evaluator_id}/compare", model(CompareResponse), body)


# --- migration ----------------------------------------------------------------------------------


def migrate(code: str, language: str = "python", *, correct_answer_key: str | None = None) -> Call[MigrateResponse]:
    """``POST /v1/migrate``: legacy code rewritten to ``evaluate(inputs, outputs, trace)`` (nothing is stored)."""
    settings = {"correct_answer_key": correct_answer_key} if correct_answer_key else None
    return Call("POST", "/v1/migrate", model(MigrateResponse), body_of(language=language, code=code, settings=settings))


def migrate_evaluator(
    evaluator_id: str,
    *,
    cases: Cases | None = None,
    dataset_id: str | None = None,
    sample: int | None = None,
    field_mapping: FieldMapping | Mapping[str, Any] | None = None,
    dry_run: bool = False,
) -> Call[EvaluatorMigrateResponse]:
    """``POST /v1/evaluators/{id}/migrate``: both revisions run on the rows; a new revision only when all agree
    (else :class:`~evaluator_host.client.errors.MigrationMismatchError`, the rows in its ``detail``)."""
    body = body_of(
        cases=None if cases is None else list(cases), dataset_id=dataset_id, sample=sample,
        field_mapping=field_mapping, dry_run=dry_run,
    )  # fmt: skip
    return Call("POST", f"/v1/evaluators/{evaluator_id}/migrate", model(EvaluatorMigrateResponse), body)


# --- runtimes -----------------------------------------------------------------------------------


def build_runtime(packages: Mapping[str, str] | Sequence[str], language: str = "python") -> Call[RuntimeView]:
    """``POST /v1/runtimes``: build a package set ahead of time (poll ``get_runtime`` for its status)."""
    return Call("POST", "/v1/runtimes", model(RuntimeView), body_of(language=language, packages=packages))


def get_runtime(runtime_id: str) -> Call[RuntimeView]:
    """``GET /v1/runtimes/{id}``: building, built or failed, with the log's end."""
    return Call("GET", f"/v1/runtimes/{runtime_id}", model(RuntimeView))


def runtime_lock(runtime_id: str) -> Call[RuntimeLock]:
    """``GET /v1/runtimes/{id}/lock``: every package with its version (and hash), the interpreter, the base image."""
    return Call("GET", f"/v1/runtimes/{runtime_id}/lock", model(RuntimeLock))


def runtime_lock_file(runtime_id: str, format: str = "requirements") -> Call[str]:
    """``GET /v1/runtimes/{id}/lock?format=``: ``requirements``, ``package-lock`` or ``cyclonedx`` (SBOM), as text."""
    return Call("GET", f"/v1/runtimes/{runtime_id}/lock", lambda response: response.text, params={"format": format})


def replay_result(job_id: str, index: int) -> Call[Replay]:
    """``POST /v1/results/replay``: row ``index`` of job ``job_id`` run again and compared with its stored result."""
    return Call("POST", "/v1/results/replay", model(Replay), body_of(job_id=job_id, index=index))


def list_runtimes(*, limit: int | None = None, cursor: str | None = None) -> Call[RuntimeList]:
    """``GET /v1/runtimes``."""
    return Call("GET", "/v1/runtimes", model(RuntimeList), params={"limit": limit, "cursor": cursor})
