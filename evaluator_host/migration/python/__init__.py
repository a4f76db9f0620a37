"""The Python migrator: legacy ``evaluate(app_params, inputs, output, correct_answer)`` → v2, with libcst.

Structured like bump-pydantic: one rule per module, applied in the order of :data:`RULES`, each
with before/after fixtures (``tests/migrate/fixtures/python``):

==========================  ==========================================================================
``numeric-string-returns``  string returns become numbers (``returns.py``): the answer stays the same
``signature-prologue``      the default: new signature, prologue rebinding the old names (``prologue.py``)
``adapter``                 the fallback: legacy function kept whole and renamed, v2 ``evaluate``
                            calling it (``adapter.py``); why it was needed is a note
``legacy-callers``          notes only: module code that still calls ``evaluate`` with four arguments
==========================  ==========================================================================

Everything libcst keeps — comments, blank lines, quotes, layout — is kept. Refused (422
``MigrationRefused``): an entrypoint that refers to itself by name (recursion or registration:
after the rewrite that name is the 3-argument entrypoint), and code libcst cannot parse.
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import GlobalScope, MetadataWrapper, PositionProvider, ScopeProvider

from evaluator_host.definitions.interfaces import detect_python
from evaluator_host.errors import MigrationRefused
from evaluator_host.migration.base import TODO, Migration, Note, Reads
from evaluator_host.migration.python import adapter, prologue
from evaluator_host.migration.python.entry import (
    Entry,
    adapter_reason,
    app_params_keys,
    find_entry,
    free_name,
    reads_param,
)
from evaluator_host.migration.python.entry import self_references as _self_references
from evaluator_host.migration.python.returns import HELPER, lambda_returns_string, rewrite_returns

__all__ = ["RULES", "migrate_python"]

RULES = ("numeric-string-returns", "signature-prologue", "adapter", "legacy-callers")


def _unchanged(code: str, interface: str) -> Migration:
    return Migration(code=code, changed=False, interface_before=interface, interface_after=interface, original=code)


def _helper(name: str) -> cst.BaseStatement:
    statement = cst.parse_statement(HELPER.format(name=name).lstrip("\n"))
    return statement.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])


def _line_of(code: str, needle: str) -> int | None:
    for number, text in enumerate(code.splitlines(), 1):
        if needle in text:
            return number
    return None


def _callers(code: str) -> list[Note]:
    """Module code outside ``evaluate`` that still refers to it (it now takes three arguments)."""
    wrapper = MetadataWrapper(cst.parse_module(code))
    positions = wrapper.resolve(PositionProvider)
    scopes = wrapper.resolve(ScopeProvider)
    entry = find_entry(wrapper)
    inside: set[cst.CSTNode] = set()

    class _Inside(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            inside.add(node)
            return True

    entry.statement.visit(_Inside())
    notes = []
    global_scope = next((s for s in scopes.values() if isinstance(s, GlobalScope)), None)
    if global_scope is None:
        return []
    for access in sorted(global_scope.accesses["evaluate"], key=lambda a: positions[a.node].start.line):
        if access.node not in inside and access.node in positions:
            line = positions[access.node].start.line
            notes.append(
                Note(line, f"{TODO}: this refers to evaluate(), which now takes (inputs, outputs, trace); update it")
            )
    return notes


def _rewrite(wrapper: MetadataWrapper, entry: Entry, key: str) -> tuple[list[cst.BaseStatement], list[str], str]:
    """The statements replacing the entry, the rules applied, and the adapter's reason ("" if none)."""
    reason = adapter_reason(wrapper, entry)
    app_read = reads_param(wrapper, entry, 0)
    helper = free_name(wrapper, "_legacy_score")
    rules: list[str] = []
    fn = entry.function
    wrapped = 0
    if isinstance(fn, cst.FunctionDef):
        fn, wrapped, literals = rewrite_returns(fn, helper)
        if wrapped or literals:
            rules.append("numeric-string-returns")
    if reason is None:
        assert isinstance(fn, cst.FunctionDef)
        spec = prologue.Prologue(
            names=entry.names,
            annotations=[p.annotation for p in entry.params.params],
            read=[reads_param(wrapper, entry, position) for position in range(4)],
            correct_answer_key=key,
        )
        statements: list[cst.BaseStatement] = [prologue.rewrite(fn, spec)]
        rules.append("signature-prologue")
    else:
        legacy = free_name(wrapper, "_evaluate_v1")
        lambda_string = isinstance(fn, cst.Lambda) and lambda_returns_string(fn)
        old = fn if isinstance(fn, cst.FunctionDef) else entry.statement
        statements = [
            adapter.rename(old, legacy),
            adapter.adapter_function(
                legacy,
                key=key,
                is_async=entry.is_async,
                app_params_todo=app_read,
                score_helper=helper if lambda_string else None,
            ),
        ]
        wrapped += lambda_string
        if lambda_string:
            rules.append("numeric-string-returns")
        rules.append("adapter")
    if wrapped:
        statements.append(_helper(helper))
    return statements, rules, reason or ""


def migrate_python(language: str, code: str, correct_answer_key: str = "correct_answer") -> Migration:
    """Migrate one Python evaluator (the registry's ``migrator`` of Python); see the module docstring."""
    before = detect_python(language, code).interface  # a syntax error is a 422 with line/column here
    if before != "legacy":
        return _unchanged(code, before)
    try:
        wrapper = MetadataWrapper(cst.parse_module(code))
    except cst.ParserSyntaxError as exc:
        raise MigrationRefused(f"libcst cannot parse this code: {exc.message}", line=exc.raw_line) from exc
    entry = find_entry(wrapper)
    for name in _self_references(wrapper, entry):
        raise MigrationRefused(
            "evaluate() refers to itself by name (recursion or registration); after the migration that name "
            "is the 3-argument entrypoint. Move the recursive part into a helper function, then migrate.",
            line=wrapper.resolve(PositionProvider)[name].start.line,
        )
    reads = Reads(
        output=reads_param(wrapper, entry, 2),
        correct_answer=reads_param(wrapper, entry, 3),
        app_params=app_params_keys(entry) if reads_param(wrapper, entry, 0) else (),
    )
    statements, rules, reason = _rewrite(wrapper, entry, correct_answer_key)
    body: list[cst.BaseStatement] = []
    for statement in wrapper.module.body:
        body.extend(statements if statement is entry.statement else [statement])
    migrated = wrapper.module.with_changes(body=body).code
    after = detect_python(language, migrated).interface
    if after != "evaluate":
        raise AssertionError(f"the Python migration produced a {after} evaluator")
    notes: list[Note] = []
    if reason:
        notes.append(
            Note(
                _line_of(migrated, "def evaluate(inputs, outputs, trace)"),
                f"the legacy function was kept and a v2 evaluate() calls it: {reason}",
            )
        )
    if (line := _line_of(migrated, f"# {TODO}: v2 has no app_params")) is not None:
        notes.append(
            Note(line, "the code reads app_params, which is {} from now on: take these values from inputs or settings")
        )
    if "numeric-string-returns" in rules:
        notes.append(
            Note(
                None,
                "v2 answers invalid_result for strings: returned numeric string literals became numbers, and "
                "values built as strings go through a helper doing what the legacy normalization did",
            )
        )
    notes.extend(_callers(migrated))
    return Migration(
        code=migrated,
        changed=True,
        interface_before=before,
        interface_after=after,
        original=code,
        notes=notes,
        rules=rules,
        reads=reads,
    )
