"""The generation stage of a model-target job: each row's model call, stored before it is scored.

Contract (one :class:`GenerationStage` per run of a job; the job's lanes consume :attr:`ready`):

* :meth:`GenerationStage.run` reads the rows not scored yet (``(idx, line)``, in order): a row whose
  generation is stored already is handed on as it is (a resumed job NEVER calls the model again for it);
  any other row gets its messages (:mod:`evaluator_host.targets.prompts`) and one call
  (:class:`~evaluator_host.targets.openai.ChatClient`, retried there) — at most ``concurrency`` calls of the
  job in flight, and at most the workspace's cap over all its jobs (``workspace_slots``, shared) — and its
  :class:`~evaluator_host.store.job_generations.GenerationRecord` is committed (batched: whatever finished
  while the previous batch was written) BEFORE the row is handed on. A row whose prompt cannot be made or
  whose call finally failed is stored with its ``error`` (and handed on: its result is an error).
* Rows handed on and not yet taken are bounded (``backlog``): the stage waits for the lanes.
* When the budget is exhausted (:class:`~evaluator_host.targets.budget.BudgetExhausted`) no further call is
  sent and no further row started; the calls in flight finish and are stored; :attr:`exhausted` says why.
* :attr:`ready` ends with ``None`` once every row is handed on.
* :func:`trace_of` is the row's ``trace`` (:func:`~evaluator_host.evaluation.trace_shape.single_span_trace`:
  one client span with the messages, the text, tokens, duration and, when priced, cost).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

from evaluator_host.evaluation.trace_shape import single_span_trace
from evaluator_host.sandbox import fastjson
from evaluator_host.store.job_generations import GenerationRecord, GenerationStore
from evaluator_host.targets.budget import Budget, BudgetExhausted, Prices
from evaluator_host.targets.models import Target
from evaluator_host.targets.openai import ChatClient, Completion
from evaluator_host.targets.prompts import PromptTemplate, RenderError, row_messages

__all__ = ["GenerationStage", "Generated", "trace_of"]

_encode = msgspec.json.Encoder().encode
_REPLAY_BATCH = 256  # stored generations read at once on resume


@dataclass(slots=True)
class Generated:
    """A row with its stored generation, ready to be scored."""

    idx: int
    line: bytes
    row: dict[str, Any]
    record: GenerationRecord


class GenerationStage:
    """Generates a job's rows (see the module's contract)."""

    def __init__(
        self,
        job_id: str,
        target: Target,
        client: ChatClient,
        store: GenerationStore,
        budget: Budget,
        workspace_slots: asyncio.Semaphore,
        *,
        concurrency: int,
        backlog: int,
    ) -> None:
        self.job_id = job_id
        self.target = target
        self.client = client
        self.store = store
        self.budget = budget
        self.workspace_slots = workspace_slots
        self.concurrency = concurrency
        self.template = PromptTemplate(target.prompt) if target.prompt is not None else None
        self.ready: asyncio.Queue[Generated | None] = asyncio.Queue()
        self._backlog = asyncio.Semaphore(backlog)
        self._pending: list[Generated] = []
        self._wake = asyncio.Event()
        self.exhausted: str | None = None
        self.rows = 0  # rows with a stored generation (the caller sets what earlier runs stored)
        self.prompt_tokens = self.completion_tokens = 0

    def taken(self, n: int) -> None:
        """``n`` rows of :attr:`ready` were taken by a lane (room in the backlog)."""
        for _ in range(n):
            self._backlog.release()

    async def run(self, rows: Iterator[tuple[int, bytes]], have: set[int]) -> None:
        """Generate and hand on every row of ``rows`` (see the module's contract), then put ``None``."""
        slots = asyncio.Semaphore(self.concurrency)
        calls: set[asyncio.Task[None]] = set()
        committer = asyncio.ensure_future(self._committer())
        replay: list[tuple[int, bytes]] = []
        try:
            for idx, line in rows:
                if idx in have:
                    replay.append((idx, line))
                    if len(replay) >= _REPLAY_BATCH:
                        await self._replay(replay)
                        replay = []
                    continue
                await self._backlog.acquire()
                await slots.acquire()
                if self.exhausted is not None:
                    slots.release()
                    self._backlog.release()
                    break
                task = asyncio.ensure_future(self._one(idx, line, slots))
                calls.add(task)
                task.add_done_callback(calls.discard)
            await self._replay(replay)
            if calls:
                await asyncio.gather(*calls)
            self._wake.set()
            self._closing = True
            await committer
        finally:
            for task in (*calls, committer):
                task.cancel()
        await self.ready.put(None)

    async def _replay(self, rows: list[tuple[int, bytes]]) -> None:
        if not rows:
            return
        stored = await asyncio.to_thread(self.store.of, self.job_id, [idx for idx, _ in rows])
        for idx, line in rows:
            await self._backlog.acquire()
            await self.ready.put(Generated(idx, line, fastjson.loads(line), stored[idx]))

    def _count(self, record: GenerationRecord) -> None:
        self.rows += 1
        self.prompt_tokens += record.prompt_tokens
        self.completion_tokens += record.completion_tokens

    async def _one(self, idx: int, line: bytes, slots: asyncio.Semaphore) -> None:
        try:
            row = fastjson.loads(line)
            try:
                messages = row_messages(row, self.template, self.target.messages_column, self.target.system)
            except RenderError as exc:
                record = _record(self.job_id, idx, [], Completion(None, error=str(exc)))
            else:
                body: dict[str, Any] = {"model": self.target.model, "messages": messages}
                if self.target.temperature is not None:
                    body["temperature"] = self.target.temperature
                if self.target.max_tokens is not None:
                    body["max_tokens"] = self.target.max_tokens
                try:
                    async with self.workspace_slots:
                        done = await self.client.complete(body, self.budget.take_call)
                except BudgetExhausted as exc:
                    self.exhausted = str(exc)
                    self._backlog.release()
                    return  # not generated: the row stays pending
                self.budget.add_tokens(done.usage["total_tokens"])
                record = _record(self.job_id, idx, messages, done)
            self._pending.append(Generated(idx, line, row, record))
            self._wake.set()
        finally:
            slots.release()

    _closing = False

    async def _committer(self) -> None:
        """Store what finished (one transaction a batch), then hand it on."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, []
            if batch:
                await asyncio.to_thread(self.store.add, [g.record for g in batch])
                for generated in batch:
                    self._count(generated.record)
                    self.ready.put_nowait(generated)
            if self._closing and not self._pending:
                return


def _record(job_id: str, idx: int, messages: list[dict[str, Any]], done: Completion) -> GenerationRecord:
    usage = done.usage
    return GenerationRecord(
        job_id=job_id,
        idx=idx,
        messages=_encode(messages).decode(),
        text=done.text,
        finish_reason=done.finish_reason,
        prompt_tokens=usage["prompt_tokens"],
        completion_tokens=usage["completion_tokens"],
        total_tokens=usage["total_tokens"],
        latency_ms=done.latency_ms,
        attempts=done.attempts,
        error=done.error,
        start_ns=done.start_ns,
        end_ns=done.end_ns or done.start_ns,
    )


def trace_of(job_id: str, record: GenerationRecord, model: str, prices: Prices) -> dict[str, Any]:
    """The row's ``trace``: one span for its model call (see the module's contract)."""
    digest = hashlib.sha256(f"{job_id}:{record.idx}".encode()).hexdigest()
    attributes: dict[str, Any] = {
        "ag.data.inputs": fastjson.loads(record.messages),
        "ag.data.outputs": record.text,
        "ag.metrics.unit.duration.total": record.latency_ms,
        "ag.metrics.unit.tokens.prompt": record.prompt_tokens,
        "ag.metrics.unit.tokens.completion": record.completion_tokens,
        "ag.metrics.unit.tokens.total": record.total_tokens,
        "gen_ai.request.model": model,
        "gen_ai.response.finish_reasons": [record.finish_reason] if record.finish_reason else [],
        "gen_ai.usage.input_tokens": record.prompt_tokens,
        "gen_ai.usage.output_tokens": record.completion_tokens,
    }
    cost = prices.cost(model, record.prompt_tokens, record.completion_tokens)
    if cost is not None:
        attributes["ag.metrics.unit.costs.total"] = cost
    return single_span_trace(
        digest[:32], digest[32:48], f"chat {model}", record.start_ns, record.end_ns, attributes, error=record.error
    )
