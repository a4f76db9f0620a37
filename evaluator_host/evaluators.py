"""Stored evaluators: validate, build, store, pre-warm, and run by id and revision.

Revisions are immutable: a revision's :class:`~evaluator_host.evaluation.Bound` form is made
once (the evaluation path caches it) and reused by calls by id and by jobs alike.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import OrderedDict
from collections.abc import Sequence

from pydantic import ValidationError

from evaluator_host import languages
from evaluator_host.definitions.imports import unpinned
from evaluator_host.errors import LimitError
from evaluator_host.evaluation import Bound, Evaluation, Prepared
from evaluator_host.models import Case, EvaluationResult, Evaluator, EvaluatorCreate, EvaluatorPatch, EvaluatorSettings
from evaluator_host.store import EvaluatorStore, RevisionRecord

__all__ = ["Evaluators", "prepared_of", "scope_of", "to_model"]

_REMEMBERED = 1024  # bound revisions kept for calls by id (least recently used go first)


def to_model(record: RevisionRecord) -> Evaluator:
    """The API shape of a stored revision (the record's fields are the model's; a revision stored
    before capability reports existed gets its report computed from its code)."""
    fields = dataclasses.asdict(record)
    if fields["capabilities"] is None:
        fields["capabilities"] = languages.get(record.language).capabilities(record.code)
    return Evaluator.model_validate(fields)


async def prepared_of(record: RevisionRecord, evaluation: Evaluation) -> Prepared:
    """The runnable form of a stored revision."""
    detected = await evaluation.detect(record.language, record.code)  # remembered: one parse per code
    return Prepared(
        language=record.language,
        code=record.code,
        interface=record.interface,
        entrypoint=detected.entrypoint,
        pins=record.packages,
        settings=EvaluatorSettings(**record.settings),
        runtime_id=record.runtime_id,
        loader=dict(detected.loader),
        compiled=detected.compiled,
        policy=evaluation.effective_policy(record.language, record.settings.get("policy", "standard")),
    )


def scope_of(record: RevisionRecord) -> str:
    """The worker scope of a revision: workers never cross revisions."""
    return f"{record.id}@{record.revision}"


class Evaluators:
    """Evaluator CRUD with immutable revisions."""

    def __init__(self, store: EvaluatorStore, evaluation: Evaluation) -> None:
        self.store = store
        self.evaluation = evaluation
        self._background: set[asyncio.Task[None]] = set()
        # Revisions never change, so a revision read and bound once serves every later call by id
        # without a database read: the latest revision number is known here because every write
        # of this data dir goes through this process (one service per data dir).
        self._latest: dict[str, int] = {}
        self._bound: OrderedDict[tuple[str, int], tuple[RevisionRecord, Bound]] = OrderedDict()

    async def _fields(self, body: EvaluatorCreate) -> tuple[dict[str, object], list[str]]:
        """The revision's stored fields, and the warnings of its definition (imports no pin provides)."""
        prepared = await self.evaluation.validate(body.language, body.code, body.packages, body.settings)
        runtime = await self.evaluation.ensure_runtime(prepared)  # a failing install is a 422 at save time
        installer = languages.get(prepared.language).family.installer
        warnings = unpinned(installer, prepared.code, prepared.pins, runtime.lock)
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
        }, warnings

    def _prewarm(self, record: RevisionRecord) -> None:
        task = asyncio.ensure_future(self._prewarm_now(record))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def create(self, body: EvaluatorCreate) -> Evaluator:
        """Validate, build the runtime, store revision 1, pre-warm a worker."""
        fields, warnings = await self._fields(body)
        record = await asyncio.to_thread(self.store.create, **fields)
        self._latest[record.id] = record.revision
        self._prewarm(record)
        return to_model(record).model_copy(update={"warnings": warnings})

    async def update(self, evaluator_id: str, body: EvaluatorCreate) -> Evaluator:
        """Store a new revision; older ones stay runnable."""
        await asyncio.to_thread(self.store.get, evaluator_id)  # 404 before any build
        fields, warnings = await self._fields(body)
        record = await asyncio.to_thread(self.store.update, evaluator_id, **fields)
        self._latest[record.id] = record.revision
        self._prewarm(record)
        return to_model(record).model_copy(update={"warnings": warnings})

    async def patch(self, evaluator_id: str, body: EvaluatorPatch) -> Evaluator:
        """A new revision from the latest one with the fields of ``body`` changed (see :class:`EvaluatorPatch`)."""
        latest = await asyncio.to_thread(self.store.get, evaluator_id)  # 404 before any build
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
        }
        return await self.update(evaluator_id, EvaluatorCreate(**(current | changes), settings=merged))

    async def close(self) -> None:
        """Stop pre-warming (the pool is about to close)."""
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    async def get(self, evaluator_id: str, revision: int | None = None) -> Evaluator:
        """One revision (default latest)."""
        return to_model(await asyncio.to_thread(self.store.get, evaluator_id, revision))

    async def list_all(self) -> list[Evaluator]:
        """Latest revision of every evaluator."""
        return [to_model(r) for r in await asyncio.to_thread(self.store.list_all)]

    async def revisions(self, evaluator_id: str) -> list[Evaluator]:
        """Every revision, oldest first."""
        return [to_model(r) for r in await asyncio.to_thread(self.store.revisions, evaluator_id)]

    async def delete(self, evaluator_id: str) -> None:
        """Soft-delete."""
        await asyncio.to_thread(self.store.delete, evaluator_id)
        self._latest.pop(evaluator_id, None)
        for key in [k for k in self._bound if k[0] == evaluator_id]:
            del self._bound[key]

    async def bind(self, record: RevisionRecord) -> Bound:
        """A stored revision, bound: the form calls by id and jobs run."""
        return await self.evaluation.bind(await prepared_of(record, self.evaluation), scope_of(record))

    async def _revision(self, evaluator_id: str, revision: int | None) -> tuple[RevisionRecord, Bound]:
        """A revision (``None``: the latest) and its bound form: read and bound once, then remembered."""
        number = revision if revision is not None else self._latest.get(evaluator_id)
        if number is not None and (found := self._bound.get((evaluator_id, number))) is not None:
            self._bound.move_to_end((evaluator_id, number))
            return found
        record = await asyncio.to_thread(self.store.get, evaluator_id, revision)  # 404s here
        if revision is None:
            self._latest[evaluator_id] = record.revision
        bound = (record, await self.bind(record))
        self._bound[(record.id, record.revision)] = bound
        if len(self._bound) > _REMEMBERED:
            self._bound.popitem(last=False)
        return bound

    async def _prewarm_now(self, record: RevisionRecord) -> None:
        await self.evaluation.prewarm(await prepared_of(record, self.evaluation), scope_of(record))

    async def evaluate(
        self, evaluator_id: str, revision: int | None, cases: Sequence[Case]
    ) -> tuple[RevisionRecord, list[EvaluationResult]]:
        """Run ``cases`` on a stored revision (``revision`` None: the latest)."""
        record, bound = await self._revision(evaluator_id, revision)
        results = await bound.evaluate(cases, self.evaluation.settings.max_response_bytes)
        for result in results:
            result.evaluator_id, result.revision = record.id, record.revision
        return record, results
