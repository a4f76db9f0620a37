"""Stored evaluators: validate, build, store, pre-warm, and run by id and revision.

A revision may carry fixtures (:mod:`.fixtures`): they run in the sandbox when it is saved, on the
runtime just built; when one fails and the save is not ``force``, the revision is stored as a *draft*
(never the latest: calls and jobs without a revision keep running the previous one) and the save
raises :class:`~evaluator_host.errors.FixturesFailed` (409) carrying the draft and its report.

Revisions are immutable: a revision is read once (then remembered here), and its
:class:`~evaluator_host.evaluation.bound.Bound` form is made once and cached by the evaluation path
(``Evaluation.bind``, the one cache of bound evaluators), reused by calls by id and by jobs alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Sequence
from datetime import datetime

from pydantic import ValidationError

from evaluator_host.definitions import languages
from evaluator_host.errors import EgressError, FixturesFailed, LimitError, NothingCompared, SecretError
from evaluator_host.evaluation import fixtures
from evaluator_host.evaluation.caching.cache import ResultCache
from evaluator_host.evaluation.caching.cached_calls import ONLINE_PICK, CacheKeys, evaluate_cached
from evaluator_host.evaluation.models import (
    Case,
    EvaluationResult,
    Evaluator,
    EvaluatorCreate,
    EvaluatorPatch,
    EvaluatorSettings,
    FixtureReport,
)
from evaluator_host.evaluation.path import Bound, Evaluation
from evaluator_host.evaluation.prepared import Prepared, unpinned_imports
from evaluator_host.shared.lru import LRU
from evaluator_host.store import EvaluatorStore, RevisionRecord
from evaluator_host.tenancy.models import NetworkEntry, destinations, header_templates, injected_secrets
from evaluator_host.tenancy.quotas import Charged, QuotaGuard
from evaluator_host.tenancy.vault import Vault, check_name
from evaluator_host.tenancy.workspaces import Workspaces

__all__ = ["Evaluators", "check_declarations", "prepared_of", "scope_of", "to_model"]

_REMEMBERED = 1024  # revisions kept for calls by id (least recently used go first)


def to_model(record: RevisionRecord) -> Evaluator:
    """The API shape of a stored revision (the record's fields are the model's; a revision stored
    before capability reports existed gets its report computed from its code)."""
    fields = dataclasses.asdict(record)
    del fields["workspace_id"]
    if fields["capabilities"] is None:
        fields["capabilities"] = languages.get(record.language).capabilities(record.code)
    return Evaluator.model_validate(fields)


async def prepared_of(record: RevisionRecord, evaluation: Evaluation) -> Prepared:
    """The runnable form of a stored revision."""
    detected = await evaluation.detect(record.language, record.code)  # remembered: one parse per code
    return Prepared.of(
        record.language,
        record.code,
        detected,
        interface=record.interface,
        pins=record.packages,
        settings=EvaluatorSettings(**record.settings),
        runtime_id=record.runtime_id,
        policy=evaluation.effective_policy(record.language, record.settings.get("policy", "standard")),
        secrets=record.secrets,
        network=record.network,
    )


def scope_of(record: RevisionRecord) -> str:
    """The worker scope of a revision: workers never cross revisions (nor workspaces: see ``bind``)."""
    return f"{record.id}@{record.revision}"


def declared_vs_used(prepared: Prepared) -> list[str]:
    """Warnings where the declared ``network`` and the capability report's network use disagree
    (the report is static: it names what it sees, a declaration is what the sandbox allows)."""
    used = prepared.capabilities.get("network", [])
    if used and not prepared.network:
        where = ", ".join(f"line {u['line']}" for u in used[:3])
        return [f"the code uses the network ({where}) but declares no `network`: those calls will fail"]
    if prepared.network and not used:
        return [
            f"`network` declares {', '.join(prepared.network)} but the capability report sees no network use "
            "in the code (fine if a package makes the calls)"
        ]
    return []


def check_declarations(
    workspaces: Workspaces, workspace_id: str, secrets: list[str], network: Sequence[str | NetworkEntry]
) -> None:
    """``SecretError`` (422) for a secret name that is no valid name (listed, or named by a network header),
    ``EgressError`` for a destination the workspace's ``network_allow`` does not hold (the operator sets
    it: ``PATCH /v1/workspaces/{id}``)."""
    for name in [*secrets, *injected_secrets(header_templates(network))]:
        check_name(name)
    allowed = set(workspaces.get(workspace_id).network_allow)
    refused = [d for d in destinations(network) if d not in allowed]
    if refused:
        raise EgressError(
            f"network destination(s) not in this workspace's allowlist: {', '.join(refused)} "
            '(the operator sets it with PATCH /v1/workspaces/{id} {"network_allow": [...]}; the default '
            "workspace's also with EVALUATOR_HOST_NETWORK_ALLOW, the only way on a service without keys)"
        )


class Evaluators:
    """Evaluator CRUD with immutable revisions."""

    def __init__(
        self,
        store: EvaluatorStore,
        evaluation: Evaluation,
        vault: Vault,
        workspaces: Workspaces,
        quotas: QuotaGuard,
    ) -> None:
        self.store = store
        self.evaluation = evaluation
        self.vault = vault
        self.workspaces = workspaces
        # the service's one guard (services.py; a private one would be a second token bucket): fixtures on
        # save and /test are charged to the workspace's max_evaluations_per_s like any call
        self.quotas = quotas
        self._background: set[asyncio.Task[None]] = set()
        # Revisions never change, so a revision read once serves every later call by id without a
        # database read: the latest revision number is known here because every write of this data
        # dir goes through this process (one service per data dir). Its bound form is the evaluation
        # path's to cache (``Evaluation.bind``), keyed by its secret values: a changed secret binds anew.
        # ``shared`` (PostgreSQL: other services save and delete evaluators on the same database, issue 54):
        # each call by id reads the evaluator's latest revision number (one primary-key read) instead, so a
        # revision saved or an evaluator deleted through another replica is in force on the next call here.
        self._latest: dict[str, int] = {}
        self.shared = False
        # (evaluator, revision) -> its record and runnable form (both immutable: derived from the record alone)
        self._records: LRU[tuple[str, int], tuple[RevisionRecord, Prepared]] = LRU(_REMEMBERED)

    async def _fields(self, workspace: str, body: EvaluatorCreate) -> tuple[dict[str, object], list[str]]:
        """The revision's stored fields (with its fixtures' report: they run now, on the runtime just
        built), and the warnings of its definition (imports no pin provides). Its fixtures are charged to
        the workspace's evaluation rate once the definition is valid (``QuotaExceeded``, 429: before any build)."""
        check_declarations(self.workspaces, workspace, body.secrets, body.network)
        prepared = await self.evaluation.validate(
            body.language, body.code, body.packages, body.settings, secrets=body.secrets, network=body.network
        )
        charged = self.quotas.take_evaluations(workspace, len(body.fixtures)) if body.fixtures else None
        runtime = await self.evaluation.ensure_runtime(prepared, workspace)  # a failing install: 422 at save time
        warnings = unpinned_imports(prepared.language, prepared.code, prepared.pins, runtime.lock)
        warnings += declared_vs_used(prepared)
        warnings += [
            f"secret {name} is set by the egress proxy and also listed in `secrets`, which hands its value to the "
            "code: drop it from `secrets` unless the code needs the value itself"
            for name in prepared.injected
            if name in prepared.secrets
        ]
        checked: FixtureReport | None = None
        if body.fixtures and charged is not None:
            env = await self.vault.values(workspace, prepared.secrets)
            injected = await self.vault.values(workspace, prepared.injected)
            cases = [f.case() for f in body.fixtures]
            results = await self.evaluation.evaluate(
                prepared, cases, charged=charged, workspace=workspace, env=env, injected=injected
            )
            checked = fixtures.report(body.fixtures, results)
        return {
            "name": body.name,
            "description": body.description,
            "language": prepared.language,
            "interface": prepared.interface,
            "code": prepared.code,
            "packages": prepared.pins,
            "settings": prepared.settings.model_dump(),
            "runtime_id": prepared.runtime_id,
            "capabilities": prepared.capabilities,
            "secrets": list(prepared.secrets) or None,
            "network": [e if isinstance(e, str) else e.model_dump() for e in body.network] or None,
            "fixtures": [f.model_dump() for f in body.fixtures] if body.fixtures else None,
            "fixture_report": checked.model_dump() if checked is not None else None,
        }, warnings

    def _prewarm(self, record: RevisionRecord) -> None:
        task = asyncio.ensure_future(self._prewarm_now(record))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _saved(self, record: RevisionRecord, warnings: list[str]) -> Evaluator:
        """The answer of a save; ``FixturesFailed`` (409, with the draft) when it was stored as a draft."""
        saved = to_model(record).model_copy(update={"warnings": warnings})
        if not record.draft:
            self._latest[record.id] = record.revision
            self._prewarm(record)
            return saved
        failed = [o.name for o in saved.fixture_report.results if not o.passed] if saved.fixture_report else []
        raise FixturesFailed(
            f"{len(failed)} of {len(record.fixtures)} fixtures failed ({', '.join(failed[:5])}"
            f"{', …' if len(failed) > 5 else ''}): revision {record.revision} is stored as a draft, not the latest; "
            "fix the code or the fixtures, or save again with force: true",
            evaluator=saved.model_dump(mode="json"),
        )

    @staticmethod
    def _draft(fields: dict[str, object], body: EvaluatorCreate) -> bool:
        report = fields.get("fixture_report")
        return isinstance(report, dict) and report["failed"] > 0 and not body.force

    async def create(self, workspace: str, body: EvaluatorCreate) -> Evaluator:
        """Validate, build the runtime, run the fixtures, store revision 1 in ``workspace`` (a draft when
        its fixtures fail, unless forced: then ``FixturesFailed``), pre-warm a worker."""
        fields, warnings = await self._fields(workspace, body)
        record = await asyncio.to_thread(self.store.create, workspace, draft=self._draft(fields, body), **fields)
        return self._saved(record, warnings)

    async def update(self, workspace: str, evaluator_id: str, body: EvaluatorCreate) -> Evaluator:
        """Store a new revision (a draft when its fixtures fail, unless forced); older ones stay runnable."""
        await asyncio.to_thread(self.store.shown, workspace, evaluator_id)  # 404 before any build
        fields, warnings = await self._fields(workspace, body)
        draft = self._draft(fields, body)
        record = await asyncio.to_thread(self.store.update, workspace, evaluator_id, draft=draft, **fields)
        return self._saved(record, warnings)

    async def patch(self, workspace: str, evaluator_id: str, body: EvaluatorPatch) -> Evaluator:
        """A new revision from the latest one with the fields of ``body`` changed (see :class:`EvaluatorPatch`)."""
        latest = await asyncio.to_thread(self.store.shown, workspace, evaluator_id)  # 404 first
        # null keeps the latest value, except for packages, where it means "no pins"
        changes = {
            k: v
            for k, v in body.model_dump(exclude_unset=True, exclude={"settings"}).items()
            if v is not None or k == "packages"
        }
        settings = dict(latest.settings)
        for key, value in (body.settings or {}).items():
            if value is None:
                settings.pop(key, None)
            else:
                settings[key] = value
        try:
            merged = EvaluatorSettings(**settings)
        except ValidationError as exc:
            problems = "; ".join(f"settings.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise LimitError(problems) from exc
        current = {
            "name": latest.name,
            "description": latest.description,
            "language": latest.language,
            "code": latest.code,
            "packages": latest.packages,
            "secrets": latest.secrets,
            "network": latest.network,
            "fixtures": latest.fixtures,
        }
        return await self.update(workspace, evaluator_id, EvaluatorCreate(**(current | changes), settings=merged))

    async def close(self) -> None:
        """Stop pre-warming (the pool is about to close)."""
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    async def get(
        self, workspace: str, evaluator_id: str, revision: int | None = None, *, or_draft: bool = False
    ) -> Evaluator:
        """One revision (default latest; ``or_draft``: the newest draft when every revision is one)."""
        read = self.store.shown if or_draft else self.store.get
        return to_model(await asyncio.to_thread(read, workspace, evaluator_id, revision))

    async def list_all(
        self, workspace: str, *, limit: int | None = None, before: tuple[datetime, str] | None = None
    ) -> list[Evaluator]:
        """Latest revision of every evaluator of ``workspace``, newest first; a page of them with ``limit``
        and ``before`` (:meth:`EvaluatorStore.list_all`)."""
        found = await asyncio.to_thread(self.store.list_all, workspace, limit=limit, before=before)
        return [to_model(r) for r in found]

    async def revisions(self, workspace: str, evaluator_id: str) -> list[Evaluator]:
        """Every revision, oldest first."""
        return [to_model(r) for r in await asyncio.to_thread(self.store.revisions, workspace, evaluator_id)]

    async def delete(self, workspace: str, evaluator_id: str) -> None:
        """Soft-delete."""
        await asyncio.to_thread(self.store.delete, workspace, evaluator_id)
        self._latest.pop(evaluator_id, None)
        for key in [k for k in self._records if k[0] == evaluator_id]:
            self._records.pop(key)

    async def bind(self, record: RevisionRecord, prepared: Prepared | None = None) -> Bound:
        """A stored revision, bound (with the current values of the secrets it lists): the form calls by
        id and jobs run (``prepared``: its :func:`prepared_of`, when known). ``SecretError`` when a secret
        it lists is not set in its workspace."""
        prepared = prepared or await self._prepared(record)
        # (no secret listed nor header template: no values to look up; a call by id of such a revision asks none)
        env = await self.vault.values(record.workspace_id, record.secrets) if record.secrets else {}
        injected = await self.vault.values(record.workspace_id, prepared.injected) if prepared.headers else {}
        return await self.evaluation.bind(
            prepared, scope_of(record), workspace=record.workspace_id, env=env, injected=injected
        )

    async def _revision(self, workspace: str, evaluator_id: str, revision: int | None) -> tuple[RevisionRecord, Bound]:
        """A revision (``None``: the latest), read once then remembered, and its bound form (with the
        current values of its secrets). An evaluator of another workspace is not found, remembered or not."""
        if self.shared:  # another service may have saved a revision or deleted the evaluator: 404s here
            latest = await asyncio.to_thread(self.store.latest, workspace, evaluator_id)
            number = revision if revision is not None else (latest or None)
        else:
            number = revision if revision is not None else self._latest.get(evaluator_id)
        found = self._records.get((evaluator_id, number)) if number is not None else None
        if found is not None and found[0].workspace_id == workspace:
            record, prepared = found
        else:
            record = await asyncio.to_thread(self.store.get, workspace, evaluator_id, revision)  # 404s here
            if revision is None:
                self._latest[evaluator_id] = record.revision
            prepared = await self._prepared(record)
        return record, await self.bind(record, prepared)

    async def _prepared(self, record: RevisionRecord) -> Prepared:
        """The runnable form of ``record``, made once per revision and remembered with it: every bind of the
        revision (its pre-warm, its calls by id, its jobs) passes the same object, which the evaluation path's
        cache of bound evaluators recognizes by identity (``Evaluation.bind``) instead of comparing every field."""
        found = self._records.get((record.id, record.revision))
        if found is not None and found[0] == record:
            return found[1]
        prepared = await prepared_of(record, self.evaluation)
        self._records.put((record.id, record.revision), (record, prepared))
        return prepared

    async def test(self, workspace: str, evaluator_id: str, revision: int | None) -> tuple[Evaluator, FixtureReport]:
        """Run a stored revision's fixtures now (``revision`` None: the latest, or the newest draft when
        every revision is one) and judge them as on save; charged to the workspace's evaluation rate
        (``QuotaExceeded``, 429) as any call. A revision without fixtures has nothing to test: 422
        ``NothingCompared`` (field ``fixtures``), never a report of 0 passed and 0 failed."""
        record = await asyncio.to_thread(self.store.shown, workspace, evaluator_id, revision)
        model = to_model(record)
        if not model.fixtures:
            raise NothingCompared(
                f"evaluator {model.id!r} revision {model.revision} has no fixtures: nothing to test (add them "
                'with PATCH /v1/evaluators/{id} {"fixtures": [{name, inputs, outputs, expect}]})',
                field="fixtures",
                rows=0,
            )
        cases = [f.case() for f in model.fixtures]
        charged = self.quotas.take_evaluations(workspace, len(cases))
        _, results = await self.evaluate(workspace, evaluator_id, record.revision, cases, charged)
        return model, fixtures.report(model.fixtures, results)

    async def cache_prefix(
        self, workspace: str, evaluator_id: str, revision: int | None, cache: ResultCache
    ) -> bytes | None:
        """The result-cache prefix of a stored revision's online calls (None: its rows are not cached:
        :meth:`ResultCache.for_job`) — what :func:`evaluate_cached` keys its cases with."""
        _, bound = await self._revision(workspace, evaluator_id, revision)
        job_cache = cache.for_job(bound.prepared, bound.runtime, workspace, ONLINE_PICK)
        return None if job_cache is None else job_cache.prefix

    async def _prewarm_now(self, record: RevisionRecord) -> None:
        with contextlib.suppress(SecretError):  # a secret it lists is not set yet: its calls will say so
            await self.evaluation.prewarm(await self.bind(record))

    async def evaluate(
        self,
        workspace: str,
        evaluator_id: str,
        revision: int | None,
        cases: Sequence[Case],
        charged: Charged,
        cache: ResultCache | None = None,
        keys: CacheKeys | None = None,
    ) -> tuple[RevisionRecord, list[EvaluationResult]]:
        """Run ``cases`` on a stored revision of ``workspace`` (``revision`` None: the latest), spending
        ``charged`` (:meth:`Bound.run`); with ``cache``, answered from the result cache where it can be
        (:func:`~evaluator_host.evaluation.caching.cached_calls.evaluate_cached`, which fills ``keys``)."""
        record, bound = await self._revision(workspace, evaluator_id, revision)
        max_bytes = self.evaluation.settings.max_response_bytes
        if cache is not None:  # an online backfill's call: hits from the result cache, the misses run
            results = await evaluate_cached(bound, workspace, cases, cache, max_bytes, charged, keys)
        else:
            results = await bound.evaluate(cases, max_bytes, charged=charged)
        for result in results:
            result.evaluator_id, result.revision = record.id, record.revision
        return record, results
