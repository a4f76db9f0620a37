"""Whether a differential run compares anything: the fields the legacy code reads must be on the rows.

A migration is saved when every row answers the same on both versions; rows on which the code never
sees what it reads prove nothing (``0 == 0`` on every row, or the same error on every row). Before the
run, :func:`check_rows` looks at the rows for each field the legacy code reads (:class:`Reads`, found by
the migrator in the code): ``outputs`` (the legacy ``output``), ``inputs[correct_answer_key]`` (the legacy
``correct_answer``) and each ``app_params`` key read by a literal name. A field null or missing on EVERY
row is :class:`~evaluator_host.errors.NothingCompared` (422) naming it, the columns the rows have and the
columns that look meant ("did you mean"); on some rows, a warning saying how many. After the run,
:func:`check_answers` refuses a run in which every row is an error on both versions the same way, and
warns how many rows only compared an error. Nothing is saved in either refusal.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from evaluator_host.errors import NothingCompared
from evaluator_host.evaluation.models import Case, EvaluationResult
from evaluator_host.evaluation.outcomes.error_summary import errors_on_both
from evaluator_host.migration.base import Reads

__all__ = ["Rows", "check_answers", "check_rows", "did_you_mean"]

# the names an answer column / a reference column usually has (what "did you mean" offers beside close spellings)
ANSWER_NAMES = (
    "response",
    "answer",
    "completion",
    "generation",
    "prediction",
    "predicted",
    "output_text",
    "generated",
    "result",
    "reply",
    "text",
)
REFERENCE_NAMES = (
    "expected",
    "expected_output",
    "expected_answer",
    "reference",
    "ground_truth",
    "gold",
    "target",
    "label",
    "correct",
    "answer",
)


@dataclass(frozen=True)
class Rows:
    """The rows of a differential run and where they came from: ``columns`` are the dataset's (or, for
    inline cases, the keys of the cases' ``inputs``); ``dataset``: they are a dataset's rows."""

    cases: Sequence[Case]
    columns: list[str]
    dataset: bool


def did_you_mean(
    wanted: str, columns: Sequence[str], known: Sequence[str] = (), exclude: Sequence[str] = ()
) -> list[str]:
    """The columns that look meant for ``wanted``: close spellings first, then the usual names in ``known``."""
    candidates = [c for c in columns if c not in exclude]
    close = difflib.get_close_matches(wanted, candidates, n=3, cutoff=0.6)
    usual = [c for c in candidates if c.lower() in known and c not in close]
    return (close + usual)[:5]


def columns_of(cases: Sequence[Case]) -> list[str]:
    """The keys of the cases' ``inputs`` objects, in the order first seen (what inline cases have for columns)."""
    seen: dict[str, None] = {}
    for case in cases:
        if isinstance(case.inputs, dict):
            seen.update(dict.fromkeys(case.inputs))
    return list(seen)


@dataclass(frozen=True)
class _Field:
    name: str  # as the answer names it
    legacy: str  # what the legacy code calls it
    value: Callable[[Case], Any]
    hint: Callable[[list[str]], str]  # how to feed it, given the columns that look meant


def _fields(reads: Reads, key: str, rows: Rows) -> list[tuple[_Field, list[str]]]:
    fields: list[tuple[_Field, list[str]]] = []
    columns = rows.columns
    if reads.output:
        meant = did_you_mean("outputs", columns, ANSWER_NAMES, exclude=(key,))

        def outputs_hint(meant: list[str]) -> str:
            if not rows.dataset:
                return "give each case its outputs"
            if meant:
                return f'did you mean field_mapping {{"outputs": {json.dumps(meant[0])}}}?'
            return 'name the answer column in field_mapping ({"outputs": "<column>"})'

        fields.append((_Field("outputs", "output", lambda c: c.outputs, outputs_hint), meant))
    if reads.correct_answer:
        meant = did_you_mean(key, columns, REFERENCE_NAMES, exclude=(key,))

        def reference(case: Case) -> Any:
            return case.inputs.get(key) if isinstance(case.inputs, dict) else None

        def reference_hint(meant: list[str]) -> str:
            if rows.dataset and key in columns:  # the column is there: field_mapping.inputs left it out
                return f"the dataset has the column {json.dumps(key)}: list it in field_mapping.inputs"
            if meant:
                return f"did you mean the correct_answer_key setting {json.dumps(meant[0])} (now {json.dumps(key)})?"
            return f"set the evaluator's correct_answer_key to the column holding the answer (now {json.dumps(key)})"

        fields.append((_Field(f"inputs[{json.dumps(key)}]", "correct_answer", reference, reference_hint), meant))
    for name in reads.app_params:

        def param(case: Case, name: str = name) -> Any:
            return case.app_params.get(name) if isinstance(case.app_params, dict) else None

        meant = did_you_mean(name, columns)

        def param_hint(meant: list[str], name: str = name) -> str:
            return (
                f"give rows whose app_params has {json.dumps(name)} (field_mapping.app_params names the column "
                "of objects), or move the value into inputs or settings first"
            )

        fields.append((_Field(f"app_params[{json.dumps(name)}]", "app_params", param, param_hint), meant))
    return fields


def _shown(columns: Sequence[str]) -> str:
    return ", ".join(repr(c) for c in columns[:50]) + (" …" if len(columns) > 50 else "") or "none"


def check_rows(reads: Reads | None, key: str, rows: Rows) -> list[str]:
    """Refuse rows that never carry a field the legacy code reads (:class:`NothingCompared`); the
    warnings for fields some rows lack (how many, which field). ``key``: the correct_answer_key setting."""
    total = len(rows.cases)
    whose = "the dataset's columns" if rows.dataset else "the cases' inputs keys"
    if total == 0:
        raise NothingCompared(
            "the differential run has no rows: nothing would be compared; nothing was saved",
            field="rows",
            rows=0,
            columns=rows.columns,
        )
    if reads is None:
        return []
    warnings: list[str] = []
    for field, meant in _fields(reads, key, rows):
        missing = sum(1 for case in rows.cases if field.value(case) is None)
        if missing == total:
            raise NothingCompared(
                f"the differential run would compare nothing: {field.name} (the legacy code's {field.legacy}) is "
                f"null or missing on every one of the {total} rows, so both versions see nothing there; "
                f"{whose}: {_shown(rows.columns)}. {field.hint(meant)} Nothing was saved.",
                field=field.name,
                rows=total,
                columns=rows.columns,
                did_you_mean=meant,
            )
        if missing:
            warnings.append(
                f"{field.name} (the legacy code's {field.legacy}) is null or missing on {missing} of {total} rows: "
                "those rows do not exercise it"
            )
    return warnings


def check_answers(
    before: Sequence[EvaluationResult], after: Sequence[EvaluationResult], columns: list[str]
) -> list[str]:
    """Refuse a run whose every row is an error on both versions (:class:`NothingCompared`, field
    ``errors``, with the most common error and an example); the warning when some rows are."""
    both, summary = errors_on_both(before, after)
    if not both:
        return []
    total = len(before)
    if summary is None:
        return [f"{len(both)} of {total} rows are errors on both versions: only their error type was compared"]
    raise NothingCompared(
        f"the differential run compared nothing: every one of the {total} rows is an error on both versions "
        f"(legacy: {summary.sentence()}). Fix the rows or the code so they run, then migrate; nothing was saved.",
        field="errors",
        rows=total,
        columns=columns,
    )
