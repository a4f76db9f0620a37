"""``POST /v1/inspect``: everything known about a definition before it runs, in one cheap answer.

The playground asks this while the user types (debounced), so it must never build, run or
refuse: every problem is *reported* in the answer (HTTP 200), none is raised. It answers:

* the detected ``interface`` and its ``entrypoint`` (with the entrypoint's line), or null;
* ``errors``: each definition problem the service would answer 422 for — syntax, interface,
  policy, size, each bad pin — with ``type``, ``message``, ``line`` and ``column`` (1-based),
  and ``package`` for a pin; ``ok`` is true when there are none (the definition would be accepted);
* ``capabilities``: the static capability report (docs/api.md), also when the code has errors
  it can still be read for (Python needs a parse; JS/TS is read from the text);
* ``pins``: one check per pin as typed, ``{name, version, ok, normalized, message}``;
* ``policy``: the policy the code would run under (``settings.policy`` raised to the service's floor);
* ``runtime``: ``{id, built}`` for a valid pin set — ``built`` false means the first run builds
  the package set (the page says "building packages…"); null when a pin is invalid;
* ``warnings``: imports no pin (nor, once built, the lock) provides.

Work is bounded like evaluation's: the same size limit, detection and scans on the inspection
threads with their caches, and a built-runtime lookup that never builds.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from evaluator_host.definitions import languages
from evaluator_host.definitions.interfaces import choose
from evaluator_host.definitions.models import Capabilities, Language, Packages
from evaluator_host.definitions.packages import normalize_pins
from evaluator_host.errors import DefinitionError, PackageSpecError, SandboxError
from evaluator_host.evaluation.limits import code_size_error
from evaluator_host.evaluation.models import _Definition
from evaluator_host.evaluation.path import Evaluation
from evaluator_host.evaluation.prepared import unpinned_imports

__all__ = ["InspectRequest", "InspectResponse", "PinCheck", "inspect"]


class InspectRequest(_Definition):
    """``POST /v1/inspect``: a definition as the user is writing it (the body of ``POST /v1/evaluate`` minus cases)."""


class DefinitionProblem(BaseModel):
    """One reason the definition would be refused (the 422 error body's fields)."""

    type: str = Field(description="SyntaxError, InterfaceError, PolicyError, PackageSpecError, LimitError")
    message: str
    line: int | None = None
    column: int | None = None
    package: str | None = Field(None, description="The offending pin entry (PackageSpecError).")


class PinCheck(BaseModel):
    """One pin as typed, checked on its own."""

    name: str
    version: str
    ok: bool
    normalized: str | None = Field(None, description="The name as the installer sees it (PyPI names normalized).")
    message: str | None = Field(None, description="Why the pin is refused.")


class RuntimeState(BaseModel):
    """The runtime a valid pin set maps to."""

    id: str
    built: bool | None = Field(
        description="False: the first evaluation builds the package set (seconds to minutes); null: unknown "
        "(the sandbox backend is unavailable)."
    )


class InspectResponse(BaseModel):
    """What ``POST /v1/inspect`` answers (always 200; problems are in ``errors``)."""

    ok: bool = Field(description="No errors: the definition would be accepted as it is.")
    language: Language
    interface: str | None = Field(None, description="evaluate | legacy | main, when detected.")
    entrypoint: str | None = None
    line: int | None = Field(None, description="The entrypoint's line.")
    is_async: bool | None = Field(
        None,
        alias="async",
        description="The entrypoint is async (async def / async function, or returns a promise): its rows run "
        "many at once per worker (settings.max_in_flight), when detected.",
    )
    errors: list[DefinitionProblem]
    capabilities: Capabilities
    pins: list[PinCheck]
    policy: str | None = Field(None, description="The execution policy it would run under.")
    runtime: RuntimeState | None = None
    warnings: list[str]


def _problem(exc: DefinitionError) -> DefinitionProblem:
    package = exc.package if isinstance(exc, PackageSpecError) else None
    return DefinitionProblem(type=exc.type_name, message=exc.message, line=exc.line, column=exc.column, package=package)


def _pin_items(language: str, packages: Packages | None) -> list[tuple[str, str, Packages]]:
    """Each pin as typed: (name, version, the one-pin value to check alone)."""
    if not packages:
        return []
    if isinstance(packages, dict):
        return [(name, version, {name: version}) for name, version in packages.items()]
    family = languages.get(language).family
    items: list[tuple[str, str, Packages]] = []
    for entry in packages:
        name, version = family.split_pin(entry) or (entry, "")
        items.append((name, version, [entry]))
    return items


def check_pins(language: str, packages: Packages | None) -> list[PinCheck]:
    """Every pin checked on its own, so each row of a pins table gets its own verdict."""
    checks = []
    for name, version, alone in _pin_items(language, packages):
        try:
            normalized = next(iter(normalize_pins(language, alone)))
        except PackageSpecError as exc:
            checks.append(PinCheck(name=name, version=version, ok=False, message=exc.message))
        else:
            checks.append(PinCheck(name=name, version=version, ok=True, normalized=normalized))
    return checks


async def inspect(evaluation: Evaluation, body: InspectRequest) -> InspectResponse:
    """Inspect ``body`` (see the module docstring); raises nothing for the definition's own problems."""
    language, code = body.language, body.code
    errors: list[DefinitionProblem] = []
    answer: dict[str, Any] = {}
    oversized = code_size_error(code, evaluation.settings)
    too_large = oversized is not None
    if oversized is not None:
        errors.append(_problem(oversized))
    else:
        try:
            detected = choose(await evaluation.detect(language, code), body.settings.entrypoint)
            answer.update(interface=detected.interface, entrypoint=detected.entrypoint, line=detected.line)
            answer["async"] = detected.is_async
        except DefinitionError as exc:
            errors.append(_problem(exc))
        try:
            answer["policy"] = await evaluation.check_policy(language, code, body.settings.policy)
        except DefinitionError as exc:
            if not any(e.type == "SyntaxError" for e in errors):  # a policy check of unparsable code repeats it
                errors.append(_problem(exc))
    pins = check_pins(language, body.packages)
    runtime: RuntimeState | None = None
    warnings: list[str] = []
    try:
        normalized = normalize_pins(language, body.packages)
    except PackageSpecError as exc:
        errors.append(_problem(exc))
    else:
        try:
            built = await evaluation.builder.lookup(language, normalized)
            known: bool | None = built is not None
        except SandboxError:  # the engine is down: inspecting still answers
            built, known = None, None
        runtime = RuntimeState(id=evaluation.builder.runtime_for(language, normalized), built=known)
        if not too_large:
            warnings = unpinned_imports(language, code, normalized, built.lock if built else [])
    capabilities = {} if too_large else await evaluation.capabilities(language, code)
    return InspectResponse(
        ok=not errors,
        language=language,
        errors=errors,
        capabilities=capabilities,
        pins=pins,
        runtime=runtime,
        warnings=warnings,
        **answer,
    )
