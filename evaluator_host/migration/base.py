"""What every migrator answers: the migrated code, notes, and the unified diff.

A migrator is a language's ``migrator`` in its family's manifest (``runtimes/<family>/
manifest.json``): ``(language, code, correct_answer_key) -> Migration``. It rewrites a legacy
``evaluate(app_params, inputs, output, correct_answer)`` into ``evaluate(inputs, outputs, trace)``
keeping every other byte it can, and returns code that is already v2 (or ``main``) unchanged.
What it cannot rewrite safely it refuses (:class:`~evaluator_host.errors.MigrationRefused`,
HTTP 422) with the reason; what it rewrote but a person should look at carries a ``TODO``
comment with :data:`TODO` in the code and a :class:`Note`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

__all__ = ["TODO", "Migration", "Note", "Reads", "unified_diff"]

TODO = "TODO[evaluator-migrate]"  # the marker of what the tool could not settle (grep for it)


@dataclass(frozen=True)
class Note:
    """Something the user should know about the migrated code; ``line`` is 1-based in it (or None)."""

    line: int | None
    message: str


@dataclass(frozen=True)
class Reads:
    """What the legacy code reads of a case, found by the migrator in its code (never by running it):
    ``output`` (the case's ``outputs``), ``correct_answer`` (``inputs[correct_answer_key]``) and the
    ``app_params`` keys it reads by a literal name (``app_params["k"]``, ``.get("k")``, ``app_params.k``).
    A differential run in which one of them is null on every row compared nothing
    (:mod:`evaluator_host.migration.coverage`). When the migrator cannot tell, it says read."""

    output: bool = True
    correct_answer: bool = True
    app_params: tuple[str, ...] = ()


@dataclass(frozen=True)
class Migration:
    """The outcome of migrating one evaluator's code."""

    code: str
    changed: bool
    interface_before: str
    interface_after: str
    original: str
    notes: list[Note] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)  # the rules that rewrote something, in order
    reads: Reads | None = None  # what the legacy code reads of a case (None: not legacy code)

    def diff(self, path: str = "evaluator") -> str:
        """The unified diff from the original code (empty when unchanged)."""
        return unified_diff(self.original, self.code, path) if self.changed else ""


def unified_diff(before: str, after: str, path: str = "evaluator") -> str:
    """``diff -u`` of two texts, ``a/<path>`` → ``b/<path>``."""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}"
    )
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
