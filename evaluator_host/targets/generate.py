"""The generation stage of a model-target job: each row's model call, stored before it is scored.

Contract (one :class:`GenerationStage` per run of a job; the job's lanes consume :attr:`ready`):

* :meth:`GenerationStage.run` reads the rows not scored yet (``(idx, line)``, in order): a row whose
  generation is stored already is handed on as it is (a resumed job NEVER calls the model again for it);
  any other row gets its messages (:mod:`evaluator_host.targets.prompts`) and one call
  (:class:`~evaluator_host.targets.openai.ChatClient`, retried there) — at most ``concurrency`` calls of the
  job in flight, and at most the workspace's cap over all its jobs (``workspace_slots``, shared) — and its
  :class:`~evaluator_host.store.jobs.generations.GenerationRecord` is committed (batched: whatever finished
  while the previous batch was written) BEFORE the row is handed on. A row whose prompt cannot be made or
  whose call finally failed is stored with its ``error`` (and handed on: its result is an error).
* Rows handed on and not yet taken are bounded (``backlog``): the stage waits for the lanes.
* When the budget is exhausted (:class:`~evaluator_host.targets.budget.BudgetExhausted`) no further call is
  sent and no further row started; the calls in flight finish and are stored; :attr:`exhausted` says why.
* Prompts render on the prompt threads (:func:`~evaluator_host.targets.prompts.render_messages`), never on
  the event loop.
* Until one row got an answer that was not a refusal (the endpoint takes the key and knows the model), at
  most ``PROBE_ROWS`` rows are generated at once. A job whose model refuses it — HTTP 401, 403 or 404 on
  ``REFUSALS_TO_STOP`` calls in a row before any other answer, or on ``REFUSALS_AFTER_ANSWERS`` in a row
  later — and a job whose prompt template passes a bound of the sandbox on ``REFUSALS_TO_STOP`` rows
  before any row rendered start no further row, like a spent budget: :attr:`fatal` says
  why (the host, the status, the secret used, or the bound), and the job fails with it. A model refusing
  from the start so gets at most ``PROBE_ROWS + REFUSALS_TO_STOP - 1`` (10) calls.
* :attr:`ready` ends with ``None`` once every row is handed on.
* :func:`trace_of` is the row's ``trace`` (:func:`~evaluator_host.evaluation.trace_shape.single_span_trace`:
  one client span with the messages, the text, tokens, duration and, when priced, cost).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from evaluator_host.evaluation.trace_shape import single_span_trace
from evaluator_host.sandbox import fastjson
from evaluator_host.store.jobs.generations import GenerationRecord, GenerationStore
from evaluator_host.targets.bounds import RenderError, SandboxRefusal
from evaluator_host.targets.budget import Budget, BudgetExhausted, Prices
from evaluator_host.targets.models import Target
from evaluator_host.targets.openai import ChatClient, Completion

if TYPE_CHECKING:  # the prompts (Jinja2) are imported with the first job that has a target, not with the service
    from evaluator_host.targets.prompts import PromptTemplate

__all__ = ["PROBE_ROWS", "REFUSALS_AFTER_ANSWERS", "REFUSALS_TO_STOP", "GenerationStage", "Generated", "trace_of"]

PROBE_ROWS = 8  # rows generated at once until one call got an answer that was not a refusal
REFUSALS_TO_STOP = 3  # refusals (401/403/404) in a row, before any other answer, that stop a job
REFUSALS_AFTER_ANSWERS = 10  # the same once the endpoint answered a row
_REFUSALS = (401, 403, 404)

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
        self.template: PromptTemplate | None = None
        if target.prompt is not None:
            from evaluator_host.targets.prompts import PromptTemplate

            self.template = PromptTemplate(target.prompt)
        self.ready: asyncio.Queue[Generated | None] = asyncio.Queue()
        self._backlog = asyncio.Semaphore(backlog)
        self._pending: list[Generated] = []
        self._wake = asyncio.Event()
        self.exhausted: str | None = None
        self.fatal: str | None = None  # why the job fails (a refusing model, a template over a bound)
        self.proven = False  # a row got an answer that was not a refusal
        self.rendered = False  # a row's prompt rendered
        self._probing = 0  # rows generating before the endpoint answered one
        self._gate = asyncio.Condition()
        self._refusals = self._refused_renders = 0
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
                if self.stopped:
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

    @property
    def stopped(self) -> bool:
        """No further row is started (a spent budget, or :attr:`fatal`)."""
        return self.exhausted is not None or self.fatal is not None

    async def _one(self, idx: int, line: bytes, slots: asyncio.Semaphore) -> None:
        try:
            probe = await self._enter()
            if probe is None:  # the job stopped meanwhile: not generated, the row stays pending
                self._backlog.release()
                return
            answered = False
            try:
                answered = await self._generate(idx, line)
            finally:
                await self._leave(probe, answered)
        finally:
            slots.release()

    async def _generate(self, idx: int, line: bytes) -> bool:
        """Make and store the row's generation; True when its call got an answer that was not a refusal."""
        row = fastjson.loads(line)
        answered = False
        target = self.target
        from evaluator_host.targets.prompts import render_messages

        try:
            messages = await render_messages(row, self.template, target.messages_column, target.system)
        except RenderError as exc:
            self._render_failed(exc)
            record = _record(self.job_id, idx, [], Completion(None, error=str(exc)))
        else:
            self.rendered = True
            body: dict[str, Any] = {"model": target.model, "messages": messages}
            if target.temperature is not None:
                body["temperature"] = target.temperature
            if target.max_tokens is not None:
                body["max_tokens"] = target.max_tokens
            try:
                async with self.workspace_slots:
                    done = await self.client.complete(body, self.budget.take_call)
            except BudgetExhausted as exc:
                self.exhausted = str(exc)
                self._backlog.release()
                return False  # not generated: the row stays pending
            self.budget.add_tokens(done.usage["total_tokens"])
            answered = self._answered(done)
            record = _record(self.job_id, idx, messages, done)
        self._pending.append(Generated(idx, line, row, record))
        self._wake.set()
        return answered

    async def _enter(self) -> bool | None:
        """True: this row is a probe (the endpoint has answered none yet); False: rows go on at once; None:
        the job stopped."""
        async with self._gate:
            await self._gate.wait_for(lambda: self.proven or self.stopped or self._probing < PROBE_ROWS)
            if self.stopped:
                return None
            if self.proven:
                return False
            self._probing += 1
            return True

    async def _leave(self, probe: bool | None, answered: bool) -> None:
        if probe:
            async with self._gate:
                self._probing -= 1
                self.proven = self.proven or answered
                self._gate.notify_all()

    def _answered(self, done: Completion) -> bool:
        """Counts refusals in a row (stopping the job at the module's bounds); True for any other answer."""
        if done.status not in _REFUSALS:
            self._refusals = 0
            return True
        self._refusals += 1
        if self._refusals >= (REFUSALS_AFTER_ANSWERS if self.proven else REFUSALS_TO_STOP) and self.fatal is None:
            self.fatal = _refused(self.target, self.client.endpoint.netloc, done, self._refusals)
        return False

    def _render_failed(self, exc: RenderError) -> None:
        if isinstance(exc, SandboxRefusal) and not self.rendered:
            self._refused_renders += 1
            if self._refused_renders >= REFUSALS_TO_STOP and self.fatal is None:
                self.fatal = (
                    f"target.prompt passes a bound of the prompt sandbox on {self._refused_renders} rows before "
                    f"rendering any ({exc}); the job stopped, rows so far are kept"
                )

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


def _refused(target: Target, host: str, done: Completion, count: int) -> str:
    """Why a job whose model refuses its calls stops: the host, the status, the secret used."""
    if done.status == 404:
        why = (
            f"the model {target.model!r} does not exist there, or {target.base_url}/chat/completions is not "
            "the API's address (check target.model and target.base_url)"
        )
    elif target.api_key_secret is not None:
        why = (
            f"the key in secret {target.api_key_secret!r} is refused (set its value with "
            f"PUT /v1/secrets/{target.api_key_secret}, or check the key's access to model {target.model!r})"
        )
    else:
        why = "no key was sent: name the workspace secret holding it in target.api_key_secret"
    return (
        f"the model endpoint {host} answered HTTP {done.status} to {count} call(s) in a row: {why}; "
        f"the job stopped, rows so far are kept. The last answer: {(done.error or '')[:300]}"
    )


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
