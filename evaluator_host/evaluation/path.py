"""The evaluation path — the one way code becomes results, for one-off calls, stored evaluators and jobs.

``validate`` turns a definition into a :class:`Prepared` evaluator (interface, pins, runtime
id) or raises a :class:`DefinitionError`; ``bind`` makes sure its runtime exists and gives
a :class:`Bound` evaluator: the prepared definition on that runtime in one *scope* (an
evaluator revision, or ``adhoc``), with its worker key and ``load`` frame computed once.
``Bound.run`` sends cases (one, a batch, or a job's chunk) to warm workers and returns the
harness's raw outcomes; ``Bound.result`` normalizes one. The use cases
(:mod:`evaluator_host.evaluation.usecases`), stored evaluators and the job runner go through
here; none of them talks to the pool or the builder.

The concepts live in their own modules and are re-exported here: :mod:`.prepared` (the validated
definition), :mod:`.bound` (on its runtime, ready to run), :mod:`.results` (an outcome normalized),
:mod:`.limits` (the definition's and the call's limits, each checked in one function).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from evaluator_host.definitions import languages
from evaluator_host.definitions.interfaces import Detected, cached, detect
from evaluator_host.definitions.packages import normalize_pins
from evaluator_host.errors import EgressError
from evaluator_host.evaluation.bound import Bound, fill_headers
from evaluator_host.evaluation.limits import check_code_size
from evaluator_host.evaluation.models import Case, EvaluationResult, EvaluatorSettings
from evaluator_host.evaluation.prepared import Prepared, ignored_fields
from evaluator_host.evaluation.results import NETWORK_HINT, redact, to_result
from evaluator_host.sandbox.base import Builder, Runtime, RuntimeKey, WorkerSpec
from evaluator_host.sandbox.pool.workers import WorkerPool
from evaluator_host.settings import Settings
from evaluator_host.shared.lru import LRU
from evaluator_host.tenancy.models import DEFAULT_WORKSPACE, NetworkEntry
from evaluator_host.tenancy.quotas import Charged
from evaluator_host.tenancy.redaction import Redactor

__all__ = [
    "ADHOC",
    "NETWORK_HINT",
    "Bound",
    "Evaluation",
    "Prepared",
    "ignored_fields",
    "redact",
    "to_result",
]

ADHOC = "adhoc"  # the scope of one-off evaluations: workers shared by identical definitions of one workspace
_BOUND_CACHE = 1024
_SCAN_CACHE = 512  # definitions whose capability report / policy check is remembered (like detection)


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

    async def detect(self, language: str | languages.Language, code: str) -> Detected:
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
        check_code_size(code, self.settings)
        lang = languages.get(language)  # looked up once: detection, pins, policy, capabilities and the id carry it
        detected = await self.detect(lang, code)
        pins = normalize_pins(lang, packages)
        settings = settings or EvaluatorSettings()
        policy = await self.check_policy(lang, code, settings.policy)
        if network and self.pool.backend.egress is None:
            raise EgressError(
                f"this service's {self.pool.backend.name} sandbox cannot give evaluators network access "
                "(the process backend needs namespaces: run as root or with user namespaces)"
            )
        return Prepared.of(
            language,
            code,
            detected,
            pins=pins,
            settings=settings,
            runtime_id=self.builder.runtime_for(lang, pins),
            policy=policy,
            capabilities=await self.capabilities(lang, code),
            secrets=secrets,
            network=network,
        )

    async def capabilities(self, language: str | languages.Language, code: str) -> dict[str, list[dict[str, Any]]]:
        """The capability report of ``code``: remembered (one-off calls resend the same code), or
        scanned on the inspection threads."""
        key = (language if isinstance(language, str) else language.name, code)
        found = self._scanned.get(key)
        if found is None:
            loop = asyncio.get_running_loop()
            found = await loop.run_in_executor(self._inspecting, languages.resolve(language).capabilities, code)
            self._scanned.put(key, found)
        return found

    def effective_policy(self, language: str | languages.Language, requested: str) -> str:
        """The policy code of ``language`` runs under: ``requested``, raised to the service's
        :attr:`default_policy` when the language's family offers it."""
        family = languages.resolve(language).family
        if requested == "standard" and self.default_policy in family.policy_names:
            return self.default_policy
        return requested

    async def check_policy(self, language: str | languages.Language, code: str, requested: str) -> str:
        """The effective policy (:meth:`effective_policy`), after checking ``code`` under it
        (``PolicyError`` with line and column when refused; on the inspection threads)."""
        lang = languages.resolve(language)
        policy = self.effective_policy(lang, requested)
        if (policy != "standard" or requested != "standard") and (lang.name, policy, code) not in self._allowed:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._inspecting, lang.family.check_policy, policy, code)
            self._allowed.put((lang.name, policy, code), True)
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
        headers = fill_headers(prepared.headers, injected or {}) if prepared.headers else ()
        digest = ""  # no secret value and no header: nothing to digest (a call by id of most revisions)
        if env or headers:
            digest = self._env_digest({**env, **{f"\0{d}\0{n}": v for d, pairs in headers for n, v in pairs}})
        key = (f"{workspace}/{scope}", prepared.code_hash, runtime.id, memory_mb, digest)
        bound = self._bound.get(key)  # (marked used: replaced below when stale, which marks it used as well)
        # the same runtime id at another location: it was removed and built again meanwhile
        # (the same prepared object, as a stored revision's calls pass, is equal without comparing every field)
        same = bound is not None and (bound.prepared is prepared or bound.prepared == prepared)
        if bound is not None and same and bound.runtime.location == runtime.location:
            return bound
        spec = self._spec(prepared, runtime, f"{workspace}/{scope}|{digest}", workspace, env, headers)
        # an injected value never enters the sandbox; redacted all the same, should a host echo it back
        bound = Bound(prepared, runtime, spec, self.pool, Redactor({**(injected or {}), **env}), workspace)
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
        in_flight = prepared.in_flight(self.settings.max_in_flight)
        key_src = (
            f"{scope}|{prepared.code_hash}|{runtime.id}|{memory_mb}|{prepared.interface}|{prepared.policy}"
            f"|{','.join(prepared.network)}"
        )
        if in_flight > 1:  # its egress gate's cap follows it (a sync evaluator's key is what it always was)
            key_src += f"|{in_flight}"
        if prepared.interface == "metric":  # the same code may run another of its metric classes
            key_src += f"|{prepared.entrypoint}"
        plain = prepared.settings.env  # settings.env: plain variables, in the key (a worker's env is fixed)
        if plain:
            key_src += "|env:" + hashlib.sha256(json.dumps(sorted(plain.items())).encode()).hexdigest()
        load = {
            "code": prepared.code if prepared.compiled is None else prepared.compiled,
            "filename": f"evaluator{language.module_suffix}",
            "language": prepared.language,
            "interface": prepared.interface,
            "entrypoint": prepared.entrypoint,
            "policy": prepared.policy,
            **prepared.loader,
        }
        if env or plain:
            load["env"] = {**plain, **env}  # a name is never both (the definition's validator)
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
            in_flight=in_flight,
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
        charged: Charged,
        scope: str = ADHOC,
        workspace: str = DEFAULT_WORKSPACE,
        env: dict[str, str] | None = None,
        injected: dict[str, str] | None = None,
    ) -> list[EvaluationResult]:
        """Evaluate ``cases`` (bind, then run, spending ``charged``: :meth:`Bound.run`); one result per case,
        in order. User failures are results."""
        bound = await self.bind(prepared, scope, workspace=workspace, env=env, injected=injected)
        return await bound.evaluate(cases, self.settings.max_response_bytes, charged=charged)
