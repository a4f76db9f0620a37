"""The evaluation service: from a definition and cases to normalized results.

``validate`` turns a definition into a :class:`Prepared` evaluator (interface, pins,
runtime id) or raises a :class:`DefinitionError`; ``evaluate`` ensures the runtime,
leases warm workers for the (scope, code, runtime, limits) key and normalizes what
comes back. Routes and the CLI both call this; neither does any of it themselves.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import evaluator_host.definitions.js_inspect  # noqa: F401 - registers the JavaScript and TypeScript detectors
from evaluator_host.definitions.interfaces import detect
from evaluator_host.definitions.packages import normalize_pins
from evaluator_host.errors import LimitError
from evaluator_host.models import Case, EvaluationResult, EvaluatorSettings
from evaluator_host.results.normalize import normalize
from evaluator_host.sandbox.base import Builder, RawOutcome, Runtime, WorkerSpec, error_info
from evaluator_host.sandbox.pool import WorkerPool
from evaluator_host.settings import Settings

__all__ = ["EvaluationService", "Prepared", "to_result"]

_SUFFIX = {"python": ".py", "javascript": ".cjs", "typescript": ".cjs"}  # JS/TS: the compiled module


@dataclass(frozen=True)
class Prepared:
    """A validated evaluator definition."""

    language: str
    code: str
    interface: str
    entrypoint: str
    pins: dict[str, str]
    settings: EvaluatorSettings
    runtime_id: str
    loader: dict[str, Any] = field(default_factory=dict)
    compiled: str | None = None  # what the harness runs, when not ``code`` itself (JS/TS)

    @functools.cached_property
    def code_hash(self) -> str:
        """Content hash of (language, code)."""
        return hashlib.sha256(f"{self.language}\0{self.code}".encode()).hexdigest()


def to_result(raw: RawOutcome, prepared: Prepared, runtime: dict[str, Any]) -> EvaluationResult:
    """Normalize one harness outcome into an :class:`EvaluationResult`."""
    base: dict[str, Any] = {
        "stdout": raw.stdout,
        "stderr": raw.stderr,
        "truncated": raw.truncated,
        "duration_ms": raw.duration_ms,
        "interface": prepared.interface,
        "runtime": runtime,
    }
    if raw.status != "ok":
        return EvaluationResult(status=raw.status, error=raw.error, **base)
    norm = normalize(raw.value, interface=prepared.interface, threshold=prepared.settings.threshold)
    if norm.invalid is not None:
        return EvaluationResult(status="invalid_result", error=error_info("InvalidResult", norm.invalid), **base)
    return EvaluationResult(
        status="ok",
        score=norm.score,
        passed=norm.passed,
        outputs=norm.outputs,
        details=norm.details,
        warnings=norm.warnings,
        **base,
    )


class EvaluationService:
    """Validates definitions and runs evaluations on the pool."""

    def __init__(self, settings: Settings, pool: WorkerPool, builder: Builder) -> None:
        self.settings = settings
        self.pool = pool
        self.builder = builder
        self._code_dir = settings.data_dir / "code"
        self._code_dir.mkdir(parents=True, exist_ok=True)
        self._written: set[str] = set()  # code files known to exist: no stat per request

    def validate(self, language: str, code: str, packages: Any, settings: EvaluatorSettings | None = None) -> Prepared:
        """Check size, interface and pins; raise ``DefinitionError`` (HTTP 422) otherwise."""
        size = len(code.encode())
        if size > self.settings.max_code_bytes:
            raise LimitError(f"the code is {size} bytes; the limit is {self.settings.max_code_bytes}")
        detected = detect(language, code)
        pins = normalize_pins(language, packages)
        return Prepared(
            language=language,
            code=code,
            interface=detected.interface,
            entrypoint=detected.entrypoint,
            pins=pins,
            settings=settings or EvaluatorSettings(),
            runtime_id=self.builder.runtime_for(language, pins),
            loader=dict(detected.loader),
            compiled=detected.compiled,
        )

    async def ensure_runtime(self, prepared: Prepared) -> Runtime:
        """Build (once) or fetch the runtime of ``prepared``; ``BuildError`` when pip fails."""
        return await self.builder.ensure(prepared.language, prepared.pins)

    def _code_path(self, prepared: Prepared) -> Path:
        folder = self._code_dir / prepared.code_hash[:32]
        suffix = ".mjs" if prepared.loader.get("module") == "esm" else _SUFFIX[prepared.language]
        path = folder / f"evaluator{suffix}"
        if prepared.code_hash in self._written:
            return path
        if not path.exists():
            folder.mkdir(mode=0o755, exist_ok=True)
            tmp = folder / f".{os.getpid()}.{id(prepared)}.tmp"
            tmp.write_text(prepared.code if prepared.compiled is None else prepared.compiled)
            tmp.chmod(0o644)
            tmp.replace(path)
        self._written.add(prepared.code_hash)
        return path

    def spec(self, prepared: Prepared, runtime: Runtime, scope: str) -> WorkerSpec:
        """The worker key for ``prepared`` in ``scope`` (an evaluator revision, or ad hoc)."""
        s = self.settings
        key_src = f"{scope}|{prepared.code_hash}|{runtime.id}|{prepared.settings.memory_mb}|{prepared.interface}"
        return WorkerSpec(
            key=hashlib.sha256(key_src.encode()).hexdigest()[:32],
            language=prepared.language,
            code_path=str(self._code_path(prepared)),
            entrypoint=prepared.entrypoint,
            interface=prepared.interface,
            runtime_id=runtime.id,
            runtime_location=runtime.location,
            memory_mb=prepared.settings.memory_mb,
            output_limit=s.output_limit_bytes,
            result_limit=s.result_limit_bytes,
            loader=prepared.loader,
        )

    async def prewarm(self, prepared: Prepared, scope: str) -> None:
        """Start a worker ahead of the first evaluation (best effort)."""
        runtime = await self.ensure_runtime(prepared)
        await self.pool.prewarm(self.spec(prepared, runtime, scope))

    async def evaluate(
        self,
        prepared: Prepared,
        cases: Sequence[Case],
        *,
        scope: str = "adhoc",
    ) -> list[EvaluationResult]:
        """Evaluate ``cases``; one result per case, in order. User failures are results."""
        runtime = await self.ensure_runtime(prepared)
        spec = self.spec(prepared, runtime, scope)
        public = runtime.public()
        raws = await self.pool.run(
            spec,
            [case.model_dump() for case in cases],
            timeout_s=prepared.settings.timeout_s,
            correct_answer_key=prepared.settings.correct_answer_key,
        )
        return [to_result(raw, prepared, public) for raw in raws]
