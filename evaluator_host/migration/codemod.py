"""Migration of legacy evaluators to the v2 interface: one codemod per language family.

``migrate(language, code, correct_answer_key)`` asks the language's ``migrator`` (named in its
family's ``runtimes/<family>/manifest.json``, like the detector) and answers a
:class:`~evaluator_host.migration.base.Migration`. Python: :mod:`evaluator_host.migration.python`
(libcst); JavaScript/TypeScript: :mod:`evaluator_host.migration.js` (acorn offsets, spliced).
:mod:`evaluator_host.migration.compare` compares what two revisions answered (the differential run).
"""

from __future__ import annotations

from evaluator_host.definitions import languages
from evaluator_host.migration.base import TODO, Migration, Note, Reads, unified_diff

__all__ = ["TODO", "Migration", "Note", "Reads", "migrate", "unified_diff"]


def migrate(language: str, code: str, correct_answer_key: str = "correct_answer") -> Migration:
    """Migrate ``code`` (blocking: a parse, or a round trip to Node). ``DefinitionError`` (422) for
    code that does not parse or define an entrypoint, ``MigrationRefused`` for what the tool will
    not rewrite."""
    return languages.get(language).migrate(code, correct_answer_key)
