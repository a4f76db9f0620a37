"""Model-target jobs on the service's lanes: generate each row (``targets/``), then score it.

Contract (for :mod:`evaluator_host.jobs.running.runner` at creation and :mod:`evaluator_host.jobs.running.lanes` when a
job with a ``target`` runs):

* :func:`checked_target` is what ``POST /v1/jobs`` checks of a target before anything is stored: the
  prompt template compiles (``TargetError``, 400; compiled off the event loop), names only columns some row
  has (``FieldMappingError``, 422, with a "did you mean") and renders the dataset's first row within the
  prompt sandbox's bounds (``TargetError``, 400), ``messages_column`` is a dataset column and
  ``field_mapping.outputs`` is not set (the generation is the outputs: ``FieldMappingError``), the key's
  secret exists (``SecretError``), the endpoint passes the egress allowlist (``TargetError``, 400, naming
  the host). It answers what the job stores: the target with ``concurrency`` bounded by the workspace's
  cap (``target_workspace_concurrency``); the key's value is never part of it.
* :class:`TargetedRows` runs a job's rows not scored yet: the endpoint is checked again and its address
  pinned, the budget restored from the stored generations, the :class:`~evaluator_host.targets.generate.GenerationStage`
  started, and ``parallelism`` lanes take the rows it hands on (whatever is ready, up to the sizer's
  chunk: :meth:`~evaluator_host.jobs.running.progress.Sizer.for_evaluator`, as any job's lanes, so an async
  evaluator's chunk may hold ``ASYNC_ROUNDS`` × its in-flight rows) and score them: ``outputs`` = the
  text, ``trace`` = the call's span, ``inputs`` as the field mapping gives them; a row without text is an
  error result (``GenerationError``, the reason) and is not sent to the evaluator. Each chunk is committed
  by the lanes' own commit.
* :meth:`TargetedRows.run` answers None, or why the budget stopped the job (its rows kept); a job the
  generation stage stopped as fatal (a model refusing every call, a template over a bound on every row:
  :attr:`~evaluator_host.targets.generate.GenerationStage.fatal`) raises ``TargetError`` once its rows in
  flight are stored: the job fails with that message.
* :class:`WorkspaceSlots` is the semaphore per workspace shared by its jobs in this service.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

from evaluator_host.errors import FieldMappingError, TargetError
from evaluator_host.evaluation.evaluators import Evaluators
from evaluator_host.evaluation.path import Bound
from evaluator_host.jobs.datasets.mapping import RowMapper
from evaluator_host.jobs.models import FieldMapping
from evaluator_host.jobs.running.executor import ChunkExecutor
from evaluator_host.jobs.running.progress import Sizer
from evaluator_host.observability import tracing
from evaluator_host.sandbox.base import RawOutcome
from evaluator_host.sandbox.protocol import JobCases, WireCase
from evaluator_host.settings import Settings
from evaluator_host.store.jobs.generations import GenerationStore, UsageTotals
from evaluator_host.targets.budget import Budget, Prices
from evaluator_host.targets.endpoint import Endpoint, check_endpoint
from evaluator_host.targets.generate import Generated, GenerationStage, trace_of
from evaluator_host.targets.models import Target, TargetUsage
from evaluator_host.targets.openai import ChatClient
from evaluator_host.tenancy.vault import check_name

__all__ = ["TargetedRows", "WorkspaceSlots", "checked_target", "usage_of"]

Commit = Callable[[list[tuple[int, WireCase]], list[RawOutcome]], Coroutine[Any, Any, None]]
_NO_OUTPUTS = "the dataset has no 'outputs' or 'output' column"
_KEY_WANTED_BY = "target.api_key_secret names"


class WorkspaceSlots:
    """One semaphore per workspace (``target_workspace_concurrency`` model calls in flight)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._slots: dict[str, asyncio.Semaphore] = {}

    def of(self, workspace: str) -> asyncio.Semaphore:
        found = self._slots.get(workspace)
        if found is None:
            found = self._slots[workspace] = asyncio.Semaphore(self.size)
        return found


async def _endpoint(settings: Settings, evaluators: Evaluators, workspace: str, target: Target) -> Endpoint:
    allow = frozenset(evaluators.workspaces.get(workspace).network_allow)
    open_service = not evaluators.workspaces.auth_required
    return await check_endpoint(target.base_url, allow, open_service=open_service, pinned=settings.egress_hosts)


async def checked_target(
    settings: Settings,
    evaluators: Evaluators,
    workspace: str,
    target: Target,
    mapping: FieldMapping,
    columns: list[str],
    mapper: RowMapper,
    first_row: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The target as the job stores it, once checked (the module's contract; ``first_row``: the dataset's
    first row, tried); drops the mapper's no-outputs warning (the generation is the outputs)."""
    if target.prompt is not None:
        from evaluator_host.targets.prompts import PromptTemplate  # Jinja2: with a job that has a prompt

        template = await asyncio.to_thread(PromptTemplate, target.prompt)
        template.check_columns(columns)
        if first_row is not None:
            await template.check_row(first_row)
    if target.messages_column is not None and columns and target.messages_column not in columns:
        raise FieldMappingError(
            f"target.messages_column names column {target.messages_column!r}, which the dataset does not have"
        )
    if mapping.outputs is not None:
        raise FieldMappingError(
            "field_mapping.outputs cannot be set on a job with a target: the generation is the outputs"
        )
    if target.api_key_secret is not None:
        await evaluators.vault.values(workspace, [check_name(target.api_key_secret)], _KEY_WANTED_BY)
    await _endpoint(settings, evaluators, workspace, target)
    mapper.warnings[:] = [w for w in mapper.warnings if not w.startswith(_NO_OUTPUTS)]
    concurrency = min(target.concurrency, settings.target_workspace_concurrency)
    return target.model_copy(update={"concurrency": concurrency}).model_dump(exclude_none=True)


def usage_of(totals: UsageTotals, model: str, prices: Prices) -> TargetUsage:
    """A job's :class:`TargetUsage` from its generations' totals."""
    return TargetUsage(
        calls=totals.calls,
        rows=totals.rows,
        prompt_tokens=totals.prompt_tokens,
        completion_tokens=totals.completion_tokens,
        total_tokens=totals.total_tokens,
        cost_estimate=prices.cost(model, totals.prompt_tokens, totals.completion_tokens),
    )


class TargetedRows:
    """Runs model-target jobs' rows (one per :class:`~evaluator_host.jobs.running.lanes.Lanes`)."""

    def __init__(
        self, settings: Settings, evaluators: Evaluators, store: GenerationStore, executor: ChunkExecutor
    ) -> None:
        self.settings = settings
        self.evaluators = evaluators
        self.store = store
        self.executor = executor
        self.prices = Prices(settings.target_prices)
        self.slots = WorkspaceSlots(settings.target_workspace_concurrency)
        self.stages: dict[str, GenerationStage] = {}  # the jobs generating here: their live usage

    def live_usage(self, job_id: str, model: str) -> TargetUsage | None:
        """What a job generating here has used, without the database (None: not running here)."""
        stage = self.stages.get(job_id)
        if stage is None:
            return None
        totals = UsageTotals(
            stage.rows,
            stage.budget.calls,
            stage.prompt_tokens,
            stage.completion_tokens,
            stage.prompt_tokens + stage.completion_tokens,
        )
        return usage_of(totals, model, self.prices)

    async def run(
        self,
        job_id: str,
        workspace: str,
        target: Target,
        parallelism: int,
        bound: Bound,
        mapper: RowMapper,
        rows: Iterator[tuple[int, bytes]],
        commit: Commit,
    ) -> str | None:
        """Generate and score ``rows`` (the module's contract); the budget's reason when it stopped the job."""
        endpoint = await _endpoint(self.settings, self.evaluators, workspace, target)
        key = None
        if target.api_key_secret is not None:
            names = [target.api_key_secret]
            key = (await self.evaluators.vault.values(workspace, names, _KEY_WANTED_BY))[target.api_key_secret]
        totals = await asyncio.to_thread(self.store.usage, job_id)
        budget = Budget(target.max_calls, target.max_tokens_total, calls=totals.calls, tokens=totals.total_tokens)
        have = await asyncio.to_thread(self.store.unscored, job_id)
        client = ChatClient(
            endpoint,
            api_key=key,
            key_name=target.api_key_secret,
            timeout_s=target.timeout_s,
            max_retries=target.max_retries,
            connections=target.concurrency,
            tls=_tls(self.settings) if endpoint.scheme == "https" else None,
        )
        stage = GenerationStage(
            job_id,
            target,
            client,
            self.store,
            budget,
            self.slots.of(workspace),
            concurrency=target.concurrency,
            backlog=max(4 * target.concurrency, 2 * parallelism * 64),
        )
        stage.rows, stage.prompt_tokens, stage.completion_tokens = (
            totals.rows,
            totals.prompt_tokens,
            totals.completion_tokens,
        )
        self.stages[job_id] = stage
        # as any job's lanes: an async evaluator's chunks up to at least ASYNC_ROUNDS × its rows in flight
        sizer = Sizer.for_evaluator(self.settings.job_chunk_s, self.settings.job_chunk_rows, bound.spec.in_flight)
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(stage.run(rows, have))
                for _ in range(parallelism):
                    group.create_task(self._lane(job_id, target.model, stage, sizer, bound, mapper, commit, group))
        finally:
            self.stages.pop(job_id, None)
            await client.close()
        if stage.fatal is not None:
            raise TargetError(stage.fatal)
        return stage.exhausted

    async def _lane(
        self,
        job_id: str,
        model: str,
        stage: GenerationStage,
        sizer: Sizer,
        bound: Bound,
        mapper: RowMapper,
        commit: Commit,
        group: asyncio.TaskGroup,
    ) -> None:
        committing: asyncio.Task[None] | None = None  # the lane's previous chunk, being stored
        while (items := await _take(stage, sizer.size())) is not None:
            traced: tracing.Attributes = {
                **bound.traced,
                "evaluator_host.job.id": job_id,
                "evaluator_host.job.rows": len(items),
            }
            with tracing.span("job.chunk", traced, root=True):
                outcomes, seconds, scored = await self._score(job_id, model, items, bound, mapper)
                if scored:
                    sizer.observe(scored, seconds)
                if committing is not None:
                    await committing
                chunk: list[tuple[int, WireCase]] = [(g.idx, {}) for g in items]  # the commit reads the indices
                committing = group.create_task(commit(chunk, outcomes))
        if committing is not None:
            await committing

    async def _score(
        self, job_id: str, model: str, items: list[Generated], bound: Bound, mapper: RowMapper
    ) -> tuple[list[RawOutcome], float, int]:
        """The outcomes of ``items`` in order: rows without text are errors, the others the evaluator's."""
        outcomes: list[RawOutcome | None] = [None] * len(items)
        cases: list[WireCase] = []
        at: list[int] = []
        for i, generated in enumerate(items):
            record = generated.record
            if record.text is None:
                error = {"type": "GenerationError", "message": record.error or "the model gave no text"}
                outcomes[i] = RawOutcome(status="error", error=error)
                continue
            case = mapper.wire_case(generated.row, generated.line)
            case["outputs"] = record.text
            case["trace"] = trace_of(job_id, record, model, self.prices)
            cases.append(case)
            at.append(i)
        seconds = 0.0
        if cases:
            ran = await self.executor.run(bound, cases, JobCases(None))
            seconds = ran.seconds
            for i, outcome in zip(at, ran.outcomes, strict=True):
                outcomes[i] = outcome
        return [o for o in outcomes if o is not None], seconds, len(cases)


def _tls(settings: Settings) -> ssl.SSLContext:
    """What an ``https`` endpoint is verified with: the ``CA_BUNDLE`` setting's CAs, else the system's."""
    return ssl.create_default_context(cafile=str(settings.ca_bundle) if settings.ca_bundle else None)


async def _take(stage: GenerationStage, size: int) -> list[Generated] | None:
    """The rows ready now (waiting for the first), at most ``size``; None once the stage has ended."""
    first = await stage.ready.get()
    if first is None:
        stage.ready.put_nowait(None)  # the other lanes see the end too
        return None
    items = [first]
    while len(items) < size:
        try:
            item = stage.ready.get_nowait()
        except asyncio.QueueEmpty:
            break
        if item is None:
            stage.ready.put_nowait(None)
            break
        items.append(item)
    stage.taken(len(items))
    return items
