"""Review queues, their items and verdicts: the review domain's use cases (``/v1/review-queues``).

Contract:

* :meth:`Review.create` — a queue of the caller's workspace on one source: an online rule (trace or span
  level; its evaluator is the queue's) or a job (its evaluator and revision). A source of another
  workspace, or none, is 422. It is filled at once (:meth:`Review.refill`): a rule's stored scores
  (``store/review/fill.py from_rule``), or a job's stored results with each row's case (its dataset row
  through the job's field mapping; a model-target job's generated text and call span). A rule's queue
  also fills as the rule's scores are stored (the store's hook).
* :meth:`Review.items` and :meth:`Review.shown` — items with what the evaluator judged: a job row's case, or
  the trace (read now, the case built as the scorer built it; once a verdict is given, the case kept
  with the item). A trace gone (retention) leaves ``case_error`` instead.
* :meth:`Review.verdict` — one current verdict per item; a second replaces the first, which stays in the
  history (:meth:`Review.history`). The case is kept with the item on its first verdict.
* :meth:`Review.export` — every item of a state with the evaluator's answer beside the human's (rows for
  CSV / JSON lines).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from evaluator_host.errors import DefinitionError, NotFoundError
from evaluator_host.evaluation.caching.cache import ResultCache
from evaluator_host.evaluation.models import Case
from evaluator_host.jobs.datasets.files import DatasetFiles
from evaluator_host.jobs.datasets.mapping import RowMapper
from evaluator_host.jobs.models import FieldMapping
from evaluator_host.online.levels.cases import Refused, build_case
from evaluator_host.online.levels.traces import load_trace
from evaluator_host.review.models import (
    Item,
    ItemSource,
    Queue,
    QueueCreate,
    QueueSelect,
    QueueSource,
    Verdict,
    VerdictCreate,
)
from evaluator_host.settings import Settings
from evaluator_host.store.jobs.generations import GenerationStore
from evaluator_host.store.jobs.repository import JobStore
from evaluator_host.store.online.rows import OnlineRuleRow
from evaluator_host.store.online.rules import RuleStore, rule_record
from evaluator_host.store.result_cache import ResultCacheStore
from evaluator_host.store.review import fill as review_fill
from evaluator_host.store.review.items import ItemRecord, ReviewItemStore, VerdictRecord
from evaluator_host.store.review.queues import QueueRecord, ReviewQueueStore
from evaluator_host.targets.budget import Prices
from evaluator_host.targets.generate import trace_of

__all__ = ["EXPORT_COLUMNS", "Review", "queue_model", "verdict_model"]

EXPORT_COLUMNS = [
    "item_id", "rule_id", "target_id", "trace_id", "span_id", "job_id", "index", "revision",
    "status", "score", "passed", "label", "reason",
    "human_passed", "human_score", "human_label", "note", "reviewer", "reviewed_at", "agree", "inputs", "outputs",
]  # fmt: skip


def queue_model(record: QueueRecord) -> Queue:
    """The API shape of a stored queue."""
    return Queue(
        id=record.id,
        name=record.name,
        evaluator_id=record.evaluator_id,
        source=QueueSource(rule_id=record.rule_id, job_id=record.job_id),
        select=QueueSelect(**record.selection) if record.selection else None,
        sample=record.sample,
        limit=record.max_items,
        items=record.items,
        reviewed=record.reviewed,
        created_at=record.created_at,
        updated_at=record.updated_at,
    )


def verdict_model(record: VerdictRecord) -> Verdict:
    """The API shape of a stored verdict."""
    return Verdict(**{f: getattr(record, f) for f in Verdict.model_fields})


class Review:
    """Queues, items and verdicts of one service."""

    def __init__(self, settings: Settings, engine: Engine, jobs: JobStore, files: DatasetFiles) -> None:
        self.settings = settings
        self.engine = engine
        self.queues = ReviewQueueStore(engine)
        self.store = ReviewItemStore(engine)
        self.jobs = jobs
        self.files = files
        self.rules = RuleStore(engine)
        self.cache = ResultCache(settings, ResultCacheStore(engine))  # agreement's re-runs: lookups first

    # -- queues --------------------------------------------------------------------------------------
    async def create(self, workspace: str, body: QueueCreate) -> Queue:
        """Store a queue on its source and fill it (see the module docstring)."""
        source = body.source
        if source.rule_id is not None:
            try:
                rule = await asyncio.to_thread(self.rules.get, workspace, source.rule_id)
            except NotFoundError:
                raise DefinitionError(f"online rule {source.rule_id!r} does not exist in this workspace") from None
            if rule.level == "session":
                raise DefinitionError(
                    "a review queue takes trace- and span-level rules' scores; session-level rules are not supported"
                )
            evaluator_id = rule.evaluator_id
        else:
            assert source.job_id is not None
            try:
                job = await asyncio.to_thread(self.jobs.get_job, source.job_id, workspace)
            except NotFoundError:
                raise DefinitionError(f"job {source.job_id!r} does not exist in this workspace") from None
            evaluator_id = job.evaluator_id
        record = await asyncio.to_thread(
            self.queues.create,
            workspace,
            name=body.name,
            evaluator_id=evaluator_id,
            rule_id=source.rule_id,
            job_id=source.job_id,
            selection=body.select.model_dump(exclude_none=True) if body.select else None,
            sample=body.sample,
            max_items=body.limit,
        )
        return await self.refill(workspace, record.id)

    async def refill(self, workspace: str, queue_id: str) -> Queue:
        """Take what the source holds now that the queue takes and does not hold yet (up to its limit):
        the same items every time (the sample is decided per item)."""
        record = await asyncio.to_thread(self.queues.get, workspace, queue_id)
        if record.rule_id is not None:
            await asyncio.to_thread(review_fill.from_rule, self.engine, record)
        else:
            await asyncio.to_thread(self._fill_from_job, record)
        return queue_model(await asyncio.to_thread(self.queues.get, workspace, queue_id))

    def _fill_from_job(self, queue: QueueRecord) -> None:
        assert queue.job_id is not None
        job = self.jobs.get_job(queue.job_id, queue.workspace_id)
        dataset = self.jobs.get_dataset(job.dataset_id)
        mapper = RowMapper(FieldMapping(**job.field_mapping), dataset.columns)
        start = 0
        while True:
            page = review_fill.job_page(self.engine, job.id, start)
            if not page:
                return
            taken = [c for c in page if review_fill.takes(queue, c)]
            model = None if job.target is None else str(job.target.get("model"))
            cases = self._job_cases(job.id, job.dataset_id, model, mapper, taken)
            review_fill.fill(self.engine, queue, cases)
            if self.queues.get(queue.workspace_id, queue.id).items >= queue.max_items:
                return
            start = int(page[-1].job_index or 0) + 1

    def _job_cases(
        self, job_id: str, dataset_id: str, model: str | None, mapper: RowMapper, taken: Sequence[review_fill.Candidate]
    ) -> list[review_fill.Candidate]:
        """``taken`` with each row's case as its snapshot (inputs, outputs, trace): what the job's evaluator got
        (a model-target job's row: the generated text as ``outputs``, the call's span as ``trace``)."""
        wanted = {int(c.job_index or 0) for c in taken}
        if not wanted:
            return []
        rows: dict[int, dict[str, Any]] = {}
        for idx, line in self.files.lines(dataset_id, min(wanted)):
            if idx in wanted:
                case = mapper.case(json.loads(line))
                rows[idx] = {"inputs": case.get("inputs"), "outputs": case.get("outputs"), "trace": case.get("trace")}
            if idx >= max(wanted):
                break
        if model is not None:  # a model-target job: as its lanes built the case (and replay does)
            prices = Prices(self.settings.target_prices)
            for idx, generation in GenerationStore(self.engine).of(job_id, wanted).items():
                if idx in rows:
                    rows[idx]["outputs"] = generation.text
                    rows[idx]["trace"] = trace_of(job_id, generation, model, prices)
        return [review_fill.Candidate(**{**c.__dict__, "snapshot": rows.get(int(c.job_index or 0))}) for c in taken]

    async def get(self, workspace: str, queue_id: str) -> Queue:
        return queue_model(await asyncio.to_thread(self.queues.get, workspace, queue_id))

    async def list_all(self, workspace: str) -> list[Queue]:
        return [queue_model(r) for r in await asyncio.to_thread(self.queues.list_all, workspace)]

    async def rename(self, workspace: str, queue_id: str, name: str) -> Queue:
        return queue_model(await asyncio.to_thread(self.queues.rename, workspace, queue_id, name))

    async def delete(self, workspace: str, queue_id: str) -> None:
        await asyncio.to_thread(self.queues.delete, workspace, queue_id)

    # -- items ---------------------------------------------------------------------------------------
    async def items(self, workspace: str, queue_id: str, state: str | None) -> list[ItemRecord]:
        """A queue's items (404 for an unknown queue), without their cases (:meth:`shown` adds them)."""
        await asyncio.to_thread(self.queues.get, workspace, queue_id)
        return await asyncio.to_thread(self.store.items, workspace, queue_id, state)

    def case_of(self, workspace: str, item: ItemRecord) -> tuple[Case | None, str | None]:
        """What the evaluator judged: the kept case, else the trace's case built now; or why there is none.
        Blocking (reads the trace)."""
        if item.snapshot is not None:
            return Case.model_validate(item.snapshot), None
        if item.rule_id is None or item.trace_id is None:
            return None, "the item's case was not kept"
        with Session(self.engine) as session:
            rule_row = session.get(OnlineRuleRow, item.rule_id)
            loaded = load_trace(
                session.connection(), workspace, item.trace_id, max_spans=self.settings.online_max_trace_spans
            )
        if loaded is None:
            return None, f"trace {item.trace_id} is no longer stored (span retention)"
        mapping = rule_record(rule_row).mapping if rule_row is not None else None
        try:
            return build_case(loaded, item.span_id, mapping), None
        except Refused as exc:
            return None, str(exc)

    async def shown(self, workspace: str, records: Sequence[ItemRecord]) -> list[Item]:
        """The API shape of ``records``, each with its case."""
        return [await asyncio.to_thread(self._shown, workspace, r) for r in records]

    def _shown(self, workspace: str, item: ItemRecord) -> Item:
        case, problem = self.case_of(workspace, item)
        return Item(
            id=item.id,
            queue_id=item.queue_id,
            state="reviewed" if item.reviewed_at is not None else "pending",
            source=_source(item),
            evaluator_id=item.evaluator_id,
            revision=item.revision,
            status=item.status,
            score=item.score,
            passed=item.passed,
            label=item.label,
            reason=item.reason,
            inputs=None if case is None else case.inputs,
            outputs=None if case is None else case.outputs,
            trace=None if case is None else case.trace,
            case_error=problem,
            verdict=verdict_model(item.verdict) if item.verdict is not None else None,
            added_at=item.added_at,
        )

    # -- verdicts ------------------------------------------------------------------------------------
    async def verdict(
        self, workspace: str, queue_id: str, item_id: str, body: VerdictCreate, reviewer: str | None
    ) -> Verdict:
        """Give ``body`` as the item's current verdict (the one before stays in its history)."""
        await asyncio.to_thread(self.queues.get, workspace, queue_id)
        item = await asyncio.to_thread(self.store.item, workspace, queue_id, item_id)
        snapshot = None
        if item.snapshot is None:
            case, _ = await asyncio.to_thread(self.case_of, workspace, item)
            snapshot = None if case is None else case.model_dump(mode="json", include={"inputs", "outputs", "trace"})
        made = await asyncio.to_thread(
            self.store.give,
            workspace,
            queue_id,
            item_id,
            passed=body.passed,
            score=body.score,
            label=body.label,
            note=body.note,
            reviewer=reviewer,
            snapshot=snapshot,
        )
        return verdict_model(made)

    async def history(self, workspace: str, queue_id: str, item_id: str) -> list[Verdict]:
        await asyncio.to_thread(self.queues.get, workspace, queue_id)
        return [verdict_model(v) for v in await asyncio.to_thread(self.store.history, workspace, queue_id, item_id)]

    async def export(self, workspace: str, queue_id: str, state: str | None) -> list[dict[str, Any]]:
        """One row per item of ``state`` (see :data:`EXPORT_COLUMNS`): the evaluator's answer, the human's."""
        records = await self.items(workspace, queue_id, state)
        rows = []
        for item in records:
            case = item.snapshot or {}
            verdict = item.verdict
            rows.append(
                {
                    "item_id": item.id,
                    **_source(item).model_dump(),
                    "revision": item.revision,
                    "status": item.status,
                    "score": item.score,
                    "passed": item.passed,
                    "label": item.label,
                    "reason": item.reason,
                    "human_passed": None if verdict is None else verdict.passed,
                    "human_score": None if verdict is None else verdict.score,
                    "human_label": None if verdict is None else verdict.label,
                    "note": None if verdict is None else verdict.note,
                    "reviewer": None if verdict is None else verdict.reviewer,
                    "reviewed_at": None if item.reviewed_at is None else item.reviewed_at.isoformat(),
                    "agree": None if verdict is None else (item.passed is True) == verdict.passed,
                    "inputs": case.get("inputs"),
                    "outputs": case.get("outputs"),
                }
            )
        return rows


def _source(item: ItemRecord) -> ItemSource:
    if item.rule_id is not None:
        return ItemSource(rule_id=item.rule_id, target_id=item.source_key, trace_id=item.trace_id, span_id=item.span_id)
    return ItemSource(job_id=item.job_id, index=item.job_index)
