"""The use cases of evaluation: what one call asks of the service, written once for every surface.

The HTTP routes, the fast path in front of them, the command line and migration do not string
the path's steps together themselves: each calls one of these functions with the service's
components (anything shaped like :class:`Components`; ``services.Services`` is one) and the
caller's workspace, and turns what comes back into its own answer (JSON, a table, an exit code).

* :func:`evaluate_definition` — a definition sent with its cases (``POST /v1/evaluate``,
  ``evaluator-host run FILE --case/--cases``): the case-count limit, the workspace's evaluation
  rate, the declarations against the workspace (secret names, ``network`` allowlist), then
  :func:`run_definition`.
* :func:`evaluate_stored` — a stored revision on cases (``POST /v1/evaluators/{id}/evaluate``):
  the case-count limit, the rate, then :func:`run_stored`.
* Every run takes a :class:`~evaluator_host.tenancy.quotas.Charged` receipt (the workspace's
  ``max_evaluations_per_s``, :mod:`evaluator_host.tenancy.quotas`) and ``Bound.run`` spends it before any
  case reaches a worker: a call charges with ``QuotaGuard.take_evaluations`` (429 over the rate), an
  online rule with ``QuotaGuard.pace_evaluations`` (the rest waits), a job's chunks with ``job_chunks``.
  A new route that forgets to charge cannot run code (tests/unit/test_use_cases.py).
* :func:`run_definition` — validate (size, interface, policy, pins: ``Evaluation.validate``, the
  only caller of it outside the evaluation path itself), the secret values it lists and those the
  egress proxy injects, bind and run. For a definition whose declarations were checked when it was
  stored (migration's rewritten revision) or that declares none (the CLI's migrate check).
* :func:`run_stored` — a stored revision (read once, bound with its secrets) on cases.

Two versions side by side (:func:`evaluator_host.evaluation.compare.run_both`: a revision compare,
and the differential run of migration, :func:`evaluator_host.migration.compare.differential`) are the
same two run steps. Limits are checked in :mod:`.limits`, once each; nothing here
renders an answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from evaluator_host.evaluation.caching.cache import ResultCache
from evaluator_host.evaluation.caching.cached_calls import CacheKeys
from evaluator_host.evaluation.evaluators import Evaluators, check_declarations
from evaluator_host.evaluation.limits import check_case_count
from evaluator_host.evaluation.models import Case, EvaluationResult, Evaluator, EvaluatorSettings, _Definition
from evaluator_host.evaluation.path import Evaluation
from evaluator_host.settings import Settings
from evaluator_host.store import RevisionRecord
from evaluator_host.tenancy.models import NetworkEntry
from evaluator_host.tenancy.quotas import Charged, QuotaGuard
from evaluator_host.tenancy.vault import Vault
from evaluator_host.tenancy.workspaces import Workspaces

__all__ = [
    "Components",
    "Definition",
    "Evaluated",
    "evaluate_definition",
    "evaluate_stored",
    "run_definition",
    "run_stored",
]


class Components(Protocol):
    """What the use cases need of the service's long-lived components."""

    @property
    def settings(self) -> Settings: ...
    @property
    def evaluation(self) -> Evaluation: ...
    @property
    def evaluators(self) -> Evaluators: ...
    @property
    def vault(self) -> Vault: ...
    @property
    def workspaces(self) -> Workspaces: ...
    @property
    def quotas(self) -> QuotaGuard: ...


@dataclass(frozen=True)
class Definition:
    """An evaluator's definition as a caller gives it: code and language, pins (as typed: validation
    normalizes them), settings, the secrets it lists and the network it declares."""

    language: str
    code: str
    packages: Any = None
    settings: EvaluatorSettings = field(default_factory=EvaluatorSettings)
    secrets: tuple[str, ...] = ()
    network: tuple[str | NetworkEntry, ...] = ()

    @classmethod
    def of(cls, source: _Definition | Evaluator, *, code: str | None = None) -> Definition:
        """The definition of a request body or a stored evaluator (``code``: other code in its place)."""
        return cls(
            language=source.language,
            code=source.code if code is None else code,
            packages=source.packages,
            settings=source.settings,
            secrets=tuple(source.secrets),
            network=tuple(source.network),
        )


@dataclass(frozen=True)
class Evaluated:
    """What a use case gives back: one result per case, in order, and what the answer names with them
    (the definition's capability report; the stored revision that ran)."""

    results: list[EvaluationResult]
    capabilities: dict[str, list[dict[str, Any]]] | None = None
    record: RevisionRecord | None = None


async def run_definition(
    components: Components, workspace: str, definition: Definition, cases: Sequence[Case], charged: Charged
) -> Evaluated:
    """Validate ``definition``, bind it in ``workspace`` (with the secret values it lists and those the
    egress proxy sets in its headers) and run ``cases``, spending ``charged`` (the caller charged them);
    no limit of the call: see the module docstring. Definition problems raise (422); user failures are results."""
    evaluation = components.evaluation
    prepared = await evaluation.validate(
        definition.language,
        definition.code,
        definition.packages,
        definition.settings,
        secrets=definition.secrets,
        network=definition.network,
    )
    env = await components.vault.values(workspace, prepared.secrets)
    injected = await components.vault.values(workspace, prepared.injected)  # the egress proxy's, never the code's
    results = await evaluation.evaluate(
        prepared, cases, charged=charged, workspace=workspace, env=env, injected=injected
    )
    for runtime_id in {r.runtime.get("id") for r in results if r.runtime.get("packages")}:
        if isinstance(runtime_id, str):  # a package set this workspace ran on: GET /v1/runtimes lists it
            await components.workspaces.note_runtime(workspace, runtime_id)
    return Evaluated(results, capabilities=prepared.capabilities)


async def run_stored(
    components: Components,
    workspace: str,
    evaluator_id: str,
    revision: int | None,
    cases: Sequence[Case],
    charged: Charged,
    cache: ResultCache | None = None,
    keys: CacheKeys | None = None,
) -> Evaluated:
    """Run ``cases`` on a stored revision of ``workspace`` (``revision`` None: the latest), spending
    ``charged``; each result names the evaluator and revision. ``NotFoundError`` for an evaluator of
    another workspace. With ``cache`` (an online backfill's), answered from the result cache where it can be
    (``keys``: filled with the cases' keys, :class:`~evaluator_host.evaluation.caching.cached_calls.CacheKeys`)."""
    record, results = await components.evaluators.evaluate(
        workspace, evaluator_id, revision, cases, charged, cache, keys
    )
    return Evaluated(results, record=record)


async def evaluate_definition(
    components: Components, workspace: str, definition: Definition, cases: Sequence[Case]
) -> Evaluated:
    """One call evaluating ``definition`` on ``cases`` in ``workspace``: the case-count limit, the
    workspace's evaluation rate (``QuotaExceeded``, 429), its declarations against the workspace
    (``SecretError``, ``EgressError``), then :func:`run_definition`."""
    check_case_count(len(cases), components.settings)
    charged = components.quotas.take_evaluations(workspace, len(cases))
    check_declarations(components.workspaces, workspace, list(definition.secrets), definition.network)
    return await run_definition(components, workspace, definition, cases, charged)


async def evaluate_stored(
    components: Components, workspace: str, evaluator_id: str, revision: int | None, cases: Sequence[Case]
) -> Evaluated:
    """One call evaluating a stored revision on ``cases``: the case-count limit, the workspace's
    evaluation rate, then :func:`run_stored`."""
    check_case_count(len(cases), components.settings)
    charged = components.quotas.take_evaluations(workspace, len(cases))
    return await run_stored(components, workspace, evaluator_id, revision, cases, charged)
