"""A builder for tests that builds nothing (the fake backend's, or any pool test's).

Imported by tests only, like :mod:`evaluator_host.testing.fake`, which re-exports :class:`FakeBuilder`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable

from evaluator_host.definitions.languages import Language
from evaluator_host.errors import BuildError
from evaluator_host.sandbox.base import Runtime

__all__ = ["FakeBuilder"]


class FakeBuilder:
    """A :class:`~evaluator_host.sandbox.base.Builder` that builds nothing.

    Runtime ids are a hash of (language, pins); a runtime with pins has the location
    ``fake:<id>``, the bare one ``None``. ``ensure`` counts one build per distinct pinned
    set (``builds``), after ``delay_s`` of (awaited) build time; ``fail(language, pins)``
    returning a message makes that build raise ``BuildError``. ``touched`` records
    :meth:`touch` calls, ``answers`` the :meth:`answered` ones.
    """

    def __init__(self, *, delay_s: float = 0.0, fail: Callable[[str, dict[str, str]], str | None] | None = None):
        self.builds = 0
        self.delay_s = delay_s
        self.fail = fail
        self.touched: list[str] = []
        self.answers: list[str] = []
        self._built: dict[str, Runtime] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def runtime_for(self, language: str | Language, pins: dict[str, str]) -> str:
        """The runtime id of ``pins`` (no build)."""
        name = language if isinstance(language, str) else language.name
        blob = json.dumps([name, sorted(pins.items())], separators=(",", ":"))
        return f"fake-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"

    async def ensure(self, language: str, pins: dict[str, str], workspace: str | None = None) -> Runtime:
        """The runtime of ``pins``, "built" once; ``BuildError`` when ``fail`` says so."""
        rid = self.runtime_for(language, pins)
        if not pins:
            return Runtime(rid, language, {}, self.bare_location())
        async with self._locks.setdefault(rid, asyncio.Lock()):
            if rid not in self._built:
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                message = self.fail(language, pins) if self.fail else None
                if message is not None:
                    raise BuildError(message, runtime_id=rid, output=message)
                self.builds += 1
                self._built[rid] = Runtime(rid, language, dict(pins), f"fake:{rid}")
        return self._built[rid]

    async def lookup(self, language: str, pins: dict[str, str]) -> Runtime | None:
        """The runtime of ``pins`` when "built" already, else None."""
        rid = self.runtime_for(language, pins)
        return Runtime(rid, language, {}, None) if not pins else self._built.get(rid)

    def touch(self, rid: str) -> None:
        """Record a use of runtime ``rid``."""
        self.touched.append(rid)

    def answered(self, rid: str) -> None:
        """Record a worker's first answer on runtime ``rid``."""
        self.answers.append(rid)

    def bare_location(self) -> str | None:
        """The package-free runtime's location: none."""
        return None
