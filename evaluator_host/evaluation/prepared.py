"""A validated definition: :class:`Prepared`, made in one place (:meth:`Prepared.of`), and what follows from it alone.

A definition becomes a :class:`Prepared` twice over in the service's life — when a call or a
save validates it (:meth:`~evaluator_host.evaluation.path.Evaluation.validate`), and when a
stored revision is made runnable again (``evaluation/evaluators.py``) — and both go through
:meth:`Prepared.of`, the one mapping of a detection and declarations onto its fields. Also
here, as pure functions of a definition: the fields an interface never passes to the code
(:func:`ignored_fields`) and the imports no pin provides (:func:`unpinned_imports`).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from evaluator_host.definitions import languages
from evaluator_host.definitions.imports import unpinned
from evaluator_host.definitions.interfaces import Detected, choose
from evaluator_host.evaluation.models import EvaluatorSettings
from evaluator_host.tenancy.models import NetworkEntry, destinations, header_templates, injected_secrets

__all__ = ["Prepared", "ignored_fields", "unpinned_imports"]

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
    "metric": {
        "app_params": "a metric's compute_scores(metric_input) reads inputs as metric_input.row.data; "
        "put what it carries in inputs",
    },
}


def ignored_fields(interface: str, fields: dict[str, Any]) -> list[str]:
    """A warning for each field in ``fields`` that carries a value (not null) ``interface`` never passes on."""
    return [
        f"{name} is ignored by the {interface!r} interface: {why}"
        for name, why in _IGNORED.get(interface, {}).items()
        if fields.get(name) is not None
    ]


def unpinned_imports(language: str, code: str, pins: dict[str, str], lock: list[str]) -> list[str]:
    """The warnings for imports of ``code`` that no pin (nor, once built, the runtime's ``lock``) provides:
    the one computation of them, for a save, a bound evaluator's failed cases and an inspection."""
    return unpinned(languages.get(language).family.installer, code, pins, lock)


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
    is_async: bool = False  # the entrypoint awaits: its rows may run many at once per worker

    @classmethod
    def of(
        cls,
        language: str,
        code: str,
        detected: Detected,
        *,
        pins: dict[str, str],
        settings: EvaluatorSettings,
        runtime_id: str,
        policy: str,
        interface: str | None = None,
        capabilities: dict[str, list[dict[str, Any]]] | None = None,
        secrets: Sequence[str] | None = (),
        network: Sequence[str | NetworkEntry | dict[str, object]] | None = (),
    ) -> Prepared:
        """The one construction of a definition's runnable form: ``detected`` gives the entrypoint, the
        loader and the compiled code (and the interface, unless a stored revision names its own);
        ``network`` entries give the destinations and the egress proxy's header templates."""
        network = network or ()
        detected = choose(detected, settings.entrypoint)  # a metric class among several: the one named
        return cls(
            language=language,
            code=code,
            interface=interface if interface is not None else detected.interface,
            entrypoint=detected.entrypoint,
            pins=pins,
            settings=settings,
            runtime_id=runtime_id,
            loader=dict(detected.loader),
            compiled=detected.compiled,
            policy=policy,
            capabilities=capabilities if capabilities is not None else {},
            secrets=tuple(secrets or ()),
            network=tuple(destinations(network)),
            headers=header_templates(network),
            is_async=detected.is_async,
        )

    def in_flight(self, bound: int) -> int:
        """Rows one worker runs at once: 1 for a sync evaluator; for an async one its ``max_in_flight``
        setting, or the service's ``bound`` (which the setting never exceeds)."""
        if not self.is_async:
            return 1
        asked = self.settings.max_in_flight
        return bound if asked is None else min(asked, bound)

    @property
    def injected(self) -> list[str]:
        """The workspace secrets its header templates name (the proxy's, never the sandbox's)."""
        return injected_secrets(self.headers)

    @functools.cached_property
    def code_hash(self) -> str:
        """Content hash of (language, code)."""
        return hashlib.sha256(f"{self.language}\0{self.code}".encode()).hexdigest()
