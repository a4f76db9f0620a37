"""The evaluation path — the one way code becomes results, for one-off calls, stored evaluators and jobs.

``validate`` turns a definition into a :class:`Prepared` evaluator (interface, pins, runtime
id) or raises a :class:`DefinitionError`; ``bind`` makes sure its runtime exists and gives
a :class:`Bound` evaluator: the prepared definition on that runtime in one *scope* (an
evaluator revision, or ``adhoc``), with its worker key and ``load`` frame computed once.
``Bound.run`` sends cases (one, a batch, or a job's chunk) to warm workers and returns the
harness's raw outcomes; ``Bound.result`` normalizes one. Routes, the CLI and the job runner
all go through here; none of them talks to the pool or the builder.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import json
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from evaluator_host.definitions import languages
from evaluator_host.definitions.imports import unpinned
from evaluator_host.definitions.interfaces import Detected, cached, detect
from evaluator_host.definitions.packages import normalize_pins
from evaluator_host.errors import EgressError, EvaluatorHostError, LimitError, SecretError
from evaluator_host.evaluation.models import Case, EvaluationResult, EvaluatorSettings
from evaluator_host.evaluation.normalize import normalize
from evaluator_host.observability import tracing
from evaluator_host.sandbox.base import Builder, RawOutcome, Runtime, RuntimeKey, WorkerSpec, error_info
from evaluator_host.sandbox.pool import WorkerPool
from evaluator_host.sandbox.protocol import JobCases, WireCase
from evaluator_host.settings import Settings
from evaluator_host.shared.lru import LRU
from evaluator_host.tenancy.models import (
    DEFAULT_WORKSPACE,
    HEADER_VALUE,
    SECRET_REF,
    NetworkEntry,
    destinations,
    header_templates,
    injected_secrets,
)
from evaluator_host.tenancy.redaction import Redactor

__all__ = ["ADHOC", "Bound", "Evaluation", "Prepared", "ignored_fields", "to_result"]

ADHOC = "adhoc"  # the scope of one-off evaluations: workers shared by identical definitions of one workspace
_BOUND_CACHE = 1024
_SCAN_CACHE = 512  # definitions whose capability report / policy check is remembered (like detection)

# What each interface never passes to the code (docs/api.md, Interfaces), and where it belongs instead.
_IGNORED: dict[str, dict[str, str]] = {
    "evaluate": {
        "app_params": "only the legacy evaluate(app_params, inputs, output, correct_answer) receives it; "
        "put what it carries in inputs",
    },
    "main": {
        "app_params": "only the legacy evaluate(app_params, inputs, output, correct_answer) receives it; "
        "put what it carries in inputs (each key of inputs is a main parameter)",
    },
    "legacy": {"trace": "evaluate(app_params, inputs, output, correct_answer) has no trace parameter"},
}


def ignored_fields(interface: str, fields: dict[str, Any]) -> list[str]:
    """A warning for each field in ``fields`` that carries a value (not null) ``interface`` never passes on."""
    return [
        f"{name} is ignored by the {interface!r} interface: {why}"
        for name, why in _IGNORED.get(interface, {}).items()
        if fields.get(name) is not None
    ]


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
    policy: str = "standard"  # the policy it runs under: settings.policy, or the service's floor
    capabilities: dict[str, list[dict[str, Any]]] = field(default_factory=dict, compare=False)
    secrets: tuple[str, ...] = ()  # workspace secrets its workers get as environment variables
    network: tuple[str, ...] = ()  # "host:port" its workers may reach through the egress proxy
    # (destination, ((header, template), ...)): headers the egress proxy sets there, "{{secret:NAME}}" filled in
    headers: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()

    @property
    def injected(self) -> list[str]:
        """The workspace secrets its header templates name (the proxy's, never the sandbox's)."""
        return injected_secrets(self.headers)

    @functools.cached_property
    def code_hash(self) -> str:
        """Content hash of (language, code)."""
        return hashlib.sha256(f"{self.language}\0{self.code}".encode()).hexdigest()


# What a network call reports inside the sandbox (Python's socket / urllib / requests, Node's dns / fetch).
_NO_NETWORK = (
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "getaddrinfo EAI_AGAIN",
    "getaddrinfo ENOTFOUND",
    "connect ENETUNREACH",
    "fetch failed",
)
NETWORK_HINT = (
    "evaluators run without network access (no DNS, no connections) unless they declare `network` "
    "(host:port destinations their workspace's operator allows, reached through the egress proxy): "
    "declare it, or fetch what the code needs before the call and pass it in inputs"
)


def _hints(error: dict[str, Any] | None) -> list[str]:
    """Hints for failures whose cause the message does not name (a network call in the sandbox)."""
    if not error:
        return []
    text = f"{error.get('message', '')}\n{str(error.get('traceback', ''))[-2000:]}"
    return [NETWORK_HINT] if any(marker in text for marker in _NO_NETWORK) else []


def _fill(
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
    refused = [e for e in raw.egress if str(e.get("status", "")).startswith("refused")]
    notes = [f"the egress proxy refused {len(refused)} connection(s): see details.egress"] if refused else []
    if raw.status != "ok":
        details = {"egress": raw.egress} if raw.egress else {}
        hints = notes if prepared.network else _hints(raw.error)
        return EvaluationResult(status=raw.status, error=raw.error, warnings=hints, details=details, **base)
    norm = normalize(raw.value, interface=prepared.interface, threshold=prepared.settings.threshold)
    if norm.invalid is not None:
        return EvaluationResult(status="invalid_result", error=error_info("InvalidResult", norm.invalid), **base)
    details = norm.details
    if raw.egress:  # the connections it made through the egress proxy (the user's own "egress" key wins)
        details = {**details, "egress": details.get("egress", raw.egress)}
    return EvaluationResult(
        status="ok",
        score=norm.score,
        passed=norm.passed,
        outputs=norm.outputs,
        details=details,
        reason=norm.reason,
        label=norm.label,
        warnings=norm.warnings + notes,
        **base,
    )


def redact(raw: RawOutcome, redactor: Redactor) -> None:
    """Replace secret values in everything of ``raw`` user code could have put them in."""
    raw.stdout = redactor.text(raw.stdout)
    raw.stderr = redactor.text(raw.stderr)
    raw.error = redactor.value(raw.error)
    raw.value = redactor.value(raw.value)


class Bound:
    """A prepared evaluator on its built runtime, in one scope: ready to run cases on warm workers."""

    def __init__(
        self, prepared: Prepared, runtime: Runtime, spec: WorkerSpec, pool: WorkerPool, redactor: Redactor
    ) -> None:
        self.prepared = prepared
        self.runtime = runtime
        self.spec = spec
        self.redactor = redactor  # the secret values its workers hold, replaced in everything they send back
        self.public = {**runtime.public(), "policy": prepared.policy}  # every result's ``runtime``
        self._pool = pool
        installer = languages.get(prepared.language).family.installer
        self.import_warnings = unpinned(installer, prepared.code, prepared.pins, runtime.lock)
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
        held_replies: bool = False,
        job_cases: JobCases | None = None,
    ) -> list[RawOutcome]:
        """The raw outcome of each case (dicts as ``Case.model_dump()``), in order; ``SandboxError``
        when the infrastructure fails (user failures are outcomes); ``ResponseTooLarge`` when the
        replies exceed ``max_bytes``. ``held_replies``, ``job_cases``: see :meth:`WorkerPool.run`
        (job chunks)."""
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

    async def evaluate(self, cases: Sequence[Case], max_bytes: int | None = None) -> list[EvaluationResult]:
        """Evaluate ``cases``; one result per case, in order (at most ``max_bytes`` of replies in all).

        A case carrying a field the interface never passes on (``app_params`` outside ``legacy``,
        ``trace`` to ``legacy``) gets a warning in its result saying so; a case that raised, in code
        importing what no pinned package provides, gets the warning naming the package to pin.
        """
        dumped = [case.model_dump() for case in cases]
        with tracing.span("evaluate", self.traced) as span:
            results = [self.result(raw) for raw in await self.run(dumped, max_bytes)]
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


class Evaluation:
    """Validates definitions and binds them to runtimes and warm workers."""

    def __init__(self, settings: Settings, pool: WorkerPool, builder: Builder, *, weak_isolation: bool = False) -> None:
        self.settings = settings
        self.pool = pool
        self.builder = builder
        restricted = settings.default_policy == "restricted" or settings.default_policy == "auto" and weak_isolation
        self.default_policy = "restricted" if restricted else "standard"  # the floor, where offered
        self._bound: LRU[tuple[str, str, str, int, str], Bound] = LRU(_BOUND_CACHE)
        self._scanned: LRU[tuple[str, str], dict[str, list[dict[str, Any]]]] = LRU(_SCAN_CACHE)
        self._allowed: LRU[tuple[str, str, str], bool] = LRU(_SCAN_CACHE)  # code checked under a policy
        # detection has threads of its own: builds or database calls never hold it up, nor it them
        self._inspecting = ThreadPoolExecutor(max_workers=2, thread_name_prefix="evh-inspect")
        self._digest_key = os.urandom(32)

    async def detect(self, language: str, code: str) -> Detected:
        """The code's interface: remembered, or found off the event loop on the inspection threads
        (a parse, or the JS/TS inspector), so a slow one never stalls other requests."""
        found = cached(language, code)
        if found is not None:
            return found
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._inspecting, detect, language, code)

    async def validate(
        self,
        language: str,
        code: str,
        packages: Any,
        settings: EvaluatorSettings | None = None,
        *,
        secrets: Sequence[str] = (),
        network: Sequence[str | NetworkEntry] = (),
    ) -> Prepared:
        """Check size, interface and pins; raise ``DefinitionError`` (HTTP 422) otherwise. ``secrets`` and
        ``network`` are taken as given (the workspace checks them: :mod:`evaluator_host.evaluation.evaluators`)."""
        size = len(code.encode())
        if size > self.settings.max_code_bytes:
            raise LimitError(
                f"the code is {size} bytes; the limit is {self.settings.max_code_bytes} (EVALUATOR_HOST_MAX_CODE_BYTES)"
            )
        detected = await self.detect(language, code)
        pins = normalize_pins(language, packages)
        settings = settings or EvaluatorSettings()
        policy = await self.check_policy(language, code, settings.policy)
        if network and self.pool.backend.egress is None:
            raise EgressError(
                f"this service's {self.pool.backend.name} sandbox cannot give evaluators network access "
                "(the process backend needs namespaces: run as root or with user namespaces)"
            )
        return Prepared(
            language=language,
            code=code,
            interface=detected.interface,
            entrypoint=detected.entrypoint,
            pins=pins,
            settings=settings,
            runtime_id=self.builder.runtime_for(language, pins),
            loader=dict(detected.loader),
            compiled=detected.compiled,
            policy=policy,
            capabilities=await self.capabilities(language, code),
            secrets=tuple(secrets),
            network=tuple(destinations(network)),
            headers=header_templates(network),
        )

    async def capabilities(self, language: str, code: str) -> dict[str, list[dict[str, Any]]]:
        """The capability report of ``code``: remembered (one-off calls resend the same code), or
        scanned on the inspection threads."""
        key = (language, code)
        found = self._scanned.get(key)
        if found is None:
            loop = asyncio.get_running_loop()
            found = await loop.run_in_executor(self._inspecting, languages.get(language).capabilities, code)
            self._scanned.put(key, found)
        return found

    def effective_policy(self, language: str, requested: str) -> str:
        """The policy code of ``language`` runs under: ``requested``, raised to the service's
        :attr:`default_policy` when the language's family offers it."""
        family = languages.get(language).family
        if requested == "standard" and self.default_policy in family.policy_names:
            return self.default_policy
        return requested

    async def check_policy(self, language: str, code: str, requested: str) -> str:
        """The effective policy (:meth:`effective_policy`), after checking ``code`` under it
        (``PolicyError`` with line and column when refused; on the inspection threads)."""
        policy = self.effective_policy(language, requested)
        if (policy != "standard" or requested != "standard") and (language, policy, code) not in self._allowed:
            family = languages.get(language).family
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._inspecting, family.check_policy, policy, code)
            self._allowed.put((language, policy, code), True)
        return policy

    async def ensure_runtime(self, prepared: Prepared, workspace: str | None = None) -> Runtime:
        """Build (once) or fetch the runtime of ``prepared``; ``BuildError`` when the install fails; a build
        counts against ``workspace``'s build concurrency."""
        return await self.builder.ensure(prepared.language, prepared.pins, workspace)

    async def bind(
        self,
        prepared: Prepared,
        scope: str = ADHOC,
        *,
        workspace: str = DEFAULT_WORKSPACE,
        env: dict[str, str] | None = None,
        injected: dict[str, str] | None = None,
    ) -> Bound:
        """``prepared`` on its runtime (built on first use) in ``scope`` of ``workspace``, its workers
        given ``env`` (the secret values it lists) and its egress gate the headers of ``prepared.headers``
        filled with ``injected`` (the values of :attr:`Prepared.injected`; ``SecretError`` when one is
        missing or cannot be a header): workers never cross scopes nor workspaces, and a changed secret
        value makes new ones."""
        runtime = await self.ensure_runtime(prepared, workspace)
        memory_mb = prepared.settings.memory_mb
        env = env or {}
        headers = _fill(prepared.headers, injected or {})
        filled = {f"\0{dest}\0{name}": value for dest, pairs in headers for name, value in pairs}
        digest = self._env_digest({**env, **filled})
        key = (f"{workspace}/{scope}", prepared.code_hash, runtime.id, memory_mb, digest)
        bound = self._bound.peek(key)
        # the same runtime id at another location: it was removed and built again meanwhile
        if bound is not None and bound.prepared == prepared and bound.runtime.location == runtime.location:
            self._bound.touch(key)
            return bound
        spec = self._spec(prepared, runtime, f"{workspace}/{scope}|{digest}", workspace, env, headers)
        # an injected value never enters the sandbox; redacted all the same, should a host echo it back
        bound = Bound(prepared, runtime, spec, self.pool, Redactor({**(injected or {}), **env}))
        self._bound.put(key, bound)
        return bound

    def _env_digest(self, env: dict[str, str]) -> str:
        """A keyed digest of ``env`` (the worker key names it; the values never leave this process)."""
        if not env:
            return ""
        text = json.dumps(sorted(env.items()))
        return hmac.new(self._digest_key, text.encode(), hashlib.sha256).hexdigest()[:32]

    def _spec(
        self,
        prepared: Prepared,
        runtime: Runtime,
        scope: str,
        workspace: str,
        env: dict[str, str],
        headers: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (),
    ) -> WorkerSpec:
        language = languages.get(prepared.language)
        memory_mb = prepared.settings.memory_mb
        key_src = (
            f"{scope}|{prepared.code_hash}|{runtime.id}|{memory_mb}|{prepared.interface}|{prepared.policy}"
            f"|{','.join(prepared.network)}"
        )
        load = {
            "code": prepared.code if prepared.compiled is None else prepared.compiled,
            "filename": f"evaluator{language.module_suffix}",
            "language": prepared.language,
            "interface": prepared.interface,
            "entrypoint": prepared.entrypoint,
            "policy": prepared.policy,
            **prepared.loader,
        }
        if env:
            load["env"] = dict(env)
        return WorkerSpec(
            key=hashlib.sha256(key_src.encode()).hexdigest()[:32],
            runtime=RuntimeKey(language.family.name, runtime.location, memory_mb, egress=bool(prepared.network)),
            runtime_id=runtime.id,
            load=load,
            output_limit=self.settings.output_limit_bytes,
            result_limit=self.settings.result_limit_bytes,
            workspace=workspace,
            network=prepared.network,
            headers=headers,
        )

    def close(self) -> None:
        """Let the inspection threads go."""
        self._inspecting.shutdown(wait=False, cancel_futures=True)

    def warm_bare_runtimes(self) -> None:
        """Start spares of every family's package-free runtime at default limits (call on a running loop)."""
        memory_mb = EvaluatorSettings().memory_mb
        for family in languages.families():
            self.pool.warm(RuntimeKey(family.name, self.builder.bare_location(), memory_mb))

    async def prewarm(self, bound: Bound) -> None:
        """Start a bound worker ahead of the first evaluation (best effort)."""
        await self.pool.prewarm(bound.spec)

    async def evaluate(
        self,
        prepared: Prepared,
        cases: Sequence[Case],
        *,
        scope: str = ADHOC,
        workspace: str = DEFAULT_WORKSPACE,
        env: dict[str, str] | None = None,
        injected: dict[str, str] | None = None,
    ) -> list[EvaluationResult]:
        """Evaluate ``cases`` (bind, then run); one result per case, in order. User failures are results."""
        bound = await self.bind(prepared, scope, workspace=workspace, env=env, injected=injected)
        return await bound.evaluate(cases, self.settings.max_response_bytes)
