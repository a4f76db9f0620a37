"""A prepared definition on its built runtime, in one scope: :class:`Bound`, ready to run cases on warm workers.

``Evaluation.bind`` (:mod:`evaluator_host.evaluation.path`) makes one, once per scope, code, runtime,
memory and secret values, and caches it there (the only cache of bound evaluators). ``run`` sends
cases (one, a batch, or a job's chunk) to the pool — the one function that does: it spends the
:class:`~evaluator_host.tenancy.quotas.Charged` receipt it is given before any case leaves, so no
route or loop runs a workspace's code uncharged (tests/unit/test_use_cases.py) — and returns the
harness's raw outcomes with secret values redacted; ``result`` normalizes one; ``evaluate`` does both
for a call's cases and adds the warnings a case earns (a field its interface ignores, an import no pin provides).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from evaluator_host.errors import EvaluatorHostError, SecretError
from evaluator_host.evaluation.models import Case, EvaluationResult
from evaluator_host.evaluation.prepared import Prepared, ignored_fields, unpinned_imports
from evaluator_host.evaluation.results import redact, to_result
from evaluator_host.observability import tracing
from evaluator_host.sandbox.base import RawOutcome, Runtime, WorkerSpec
from evaluator_host.sandbox.pool.workers import WorkerPool
from evaluator_host.sandbox.protocol import JobCases, WireCase
from evaluator_host.tenancy.models import HEADER_VALUE, SECRET_REF
from evaluator_host.tenancy.quotas import Charged
from evaluator_host.tenancy.redaction import Redactor

__all__ = ["Bound", "fill_headers"]


def fill_headers(
    templates: tuple[tuple[str, tuple[tuple[str, str], ...]], ...], values: dict[str, str]
) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    """Header templates with every ``{{secret:NAME}}`` replaced by its value; ``SecretError`` when a value
    is missing or is not one line of printable ASCII (a line break would split the header)."""

    def value(match: Any) -> str:
        name = match.group(1)
        if name not in values:
            raise SecretError(f"a network header names secret {name!r}, which this workspace does not have")
        if not HEADER_VALUE.fullmatch(values[name]):
            raise SecretError(
                f"secret {name!r} cannot be a header value (one line of printable ASCII): a line break, a control "
                "or a non-ASCII character"
            )
        return values[name]

    return tuple((dest, tuple((n, SECRET_REF.sub(value, t)) for n, t in pairs)) for dest, pairs in templates)


class Bound:
    """A prepared evaluator on its built runtime, in one scope: ready to run cases on warm workers."""

    def __init__(
        self,
        prepared: Prepared,
        runtime: Runtime,
        spec: WorkerSpec,
        pool: WorkerPool,
        redactor: Redactor,
        workspace: str,
    ) -> None:
        self.prepared = prepared
        self.workspace = workspace  # the workspace whose receipts its runs spend
        self.runtime = runtime
        self.spec = spec
        self.redactor = redactor  # the secret values its workers hold, replaced in everything they send back
        self.public = {**runtime.public(), "policy": prepared.policy}  # every result's ``runtime``
        self._pool = pool
        self.import_warnings = unpinned_imports(prepared.language, prepared.code, prepared.pins, runtime.lock)
        self.traced: dict[str, str] = {  # the attributes of its spans (no evaluator id: see tracing)
            "evaluator_host.language": prepared.language,
            "evaluator_host.backend": pool.backend.name,
            "evaluator_host.runtime.id": runtime.id,
        }

    async def run(
        self,
        cases: Sequence[WireCase],
        max_bytes: int | None = None,
        *,
        charged: Charged,
        held_replies: bool = False,
        job_cases: JobCases | None = None,
        interactive: bool = False,
    ) -> list[RawOutcome]:
        """The raw outcome of each case (dicts as ``Case.model_dump()``), in order; ``SandboxError``
        when the infrastructure fails (user failures are outcomes); ``ResponseTooLarge`` when the
        replies exceed ``max_bytes``. ``held_replies``, ``job_cases``: see :meth:`WorkerPool.run`
        (job chunks), ``interactive`` (an API call: admission per evaluator, 429 ``Overloaded``).
        ``charged``: the receipt of these cases (:mod:`evaluator_host.tenancy.quotas`), spent first."""
        charged.spend(self.workspace, len(cases))
        settings = self.prepared.settings
        try:
            outcomes = await self._pool.run(
                self.spec,
                cases,
                timeout_s=settings.timeout_s,
                correct_answer_key=settings.correct_answer_key,
                max_bytes=max_bytes,
                held_replies=held_replies,
                job_cases=job_cases,
                interactive=interactive,
            )
        except EvaluatorHostError as exc:  # e.g. a worker that died printing a secret: its output is the message
            if self.redactor:
                exc.message = self.redactor.text(exc.message)
                exc.args = (exc.message,)
            raise
        if self.redactor:
            for raw in outcomes:
                redact(raw, self.redactor)
        return outcomes

    def result(self, raw: RawOutcome) -> EvaluationResult:
        """One outcome, normalized (and counted)."""
        result = to_result(raw, self.prepared, self.public)
        self._pool.metrics.evaluated(result.status, self.prepared.language, self._pool.backend.name)
        return result

    def count(self, statuses: Iterable[str]) -> None:
        """Count results normalized elsewhere (a job's stored rows), one metrics update per status."""
        language, backend = self.prepared.language, self._pool.backend.name
        for status, n in Counter(statuses).items():
            self._pool.metrics.evaluated(status, language, backend, n)

    async def evaluate(
        self,
        cases: Sequence[Case],
        max_bytes: int | None = None,
        *,
        charged: Charged,
        batch: bool = False,
        dumped: list[dict[str, Any]] | None = None,
        wire: tuple[Sequence[WireCase], JobCases] | None = None,
    ) -> list[EvaluationResult]:
        """Evaluate ``cases``; one result per case, in order (at most ``max_bytes`` of replies in all),
        spending ``charged`` (:meth:`run`). ``batch`` (an online backfill's rows): run as a job's chunk is —
        one message, replies held and written together, no per-call admission, counted once — instead of an API
        call. ``dumped``: the cases' ``model_dump()`` when the caller has it already (JSON data as they are).
        ``wire``: the cases as sent instead (``dumped`` encoded already) and how (:meth:`run`'s ``job_cases``).

        A case carrying a field the interface never passes on (``app_params`` outside ``legacy``,
        ``trace`` to ``legacy``) gets a warning in its result saying so; a case that raised, in code
        importing what no pinned package provides, gets the warning naming the package to pin.
        """
        dumped = dumped if dumped is not None else [case.model_dump() for case in cases]
        with tracing.span("evaluate", self.traced) as span:
            sent, how = wire if wire is not None else (dumped, None)
            ran = await self.run(
                sent, max_bytes, charged=charged, interactive=not batch, held_replies=batch, job_cases=how
            )
            if batch:  # counted per status, not per row
                results = [to_result(raw, self.prepared, self.public) for raw in ran]
                self.count(result.status for result in results)
            else:
                results = [self.result(raw) for raw in ran]
            if span.is_recording():
                span.set_attribute("evaluator_host.cases", len(results))
                tracing.outcome(span, (result.status for result in results))
        for case, result in zip(dumped, results, strict=True):
            ignored = ignored_fields(self.prepared.interface, case)
            if ignored:
                result.warnings.extend(ignored)
            if self.import_warnings and result.status == "error":
                result.warnings.extend(self.import_warnings)
        return results
