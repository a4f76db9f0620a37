"""Field mapping: a dataset row → the case an evaluator is called with.

NeMo FieldMapping semantics (docs/api.md, Jobs): ``inputs`` is the whole original row
unless ``field_mapping.inputs`` lists columns; ``outputs``, ``trace`` and ``app_params``
come from the named columns, or by default from the row's ``outputs`` (else ``output``),
``trace`` and ``app_params`` columns. A column that is not a top-level key may be a
dotted path into nested objects (``"response.text"``). Mapping to a column the dataset
does not have is a :class:`FieldMappingError` when the job is created, not a null per row.

The per-row rule itself is written once for Python, in the harness's ``rows.py``
(``runtimes/python/evaluator_harness/rows.py``, standard library only, loaded here by path as
``definitions/restricted.py`` loads the ``restricted/`` policy package): the worker picks job rows' cases with the same
file, and the fake backend uses :func:`picked_cases` from here. ``tests/protocol/rows.json`` holds the
vectors every implementation (this one, the Python and the Node harness, the fake) answers alike.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import msgspec

from evaluator_host.definitions.languages import RUNTIMES_DIR
from evaluator_host.errors import FieldMappingError
from evaluator_host.jobs.models import FieldMapping
from evaluator_host.sandbox import fastjson
from evaluator_host.sandbox.protocol import WireCase

__all__ = ["RowMapper", "column_gaps", "picked_cases", "rows_rule"]

Getter = Callable[[dict[str, Any]], Any]


def rows_rule() -> ModuleType:
    """The harness's ``rows.py``: the row → case rule, loaded from the Python runtime folder."""
    spec = importlib.util.spec_from_file_location(
        "evaluator_host_rows", RUNTIMES_DIR / "python" / "evaluator_harness" / "rows.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_rule = rows_rule()


def picked_cases(rows: list[Any], pick: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The cases of a ``run`` frame carrying ``rows`` and ``pick``, as a harness picks them (no copies)."""
    cases: Iterator[dict[str, Any]] = _rule.picked_cases(rows, pick)
    return cases


def _column(name: str, columns: list[str], entry: str) -> Getter:
    if name in columns:
        top: Getter = _rule.column(name)
        return top
    head, _, rest = name.partition(".")
    if rest and head in columns:
        nested: Getter = _rule.path(name)
        return nested
    shown = ", ".join(repr(c) for c in columns[:50]) + (" …" if len(columns) > 50 else "")
    raise FieldMappingError(
        f"field_mapping.{entry} names column {name!r}, which the dataset does not have; its columns: {shown or 'none'}"
    )


class RowMapper:
    """Builds the case for each row; the constructor checks the mapping against ``columns``."""

    def __init__(self, mapping: FieldMapping, columns: list[str]) -> None:
        self.warnings: list[str] = []
        if mapping.outputs is not None:
            self._outputs = _column(mapping.outputs, columns, "outputs")
        else:
            self._outputs = _rule.default_outputs
            if columns and "outputs" not in columns and "output" not in columns:
                self.warnings.append(
                    "the dataset has no 'outputs' or 'output' column and field_mapping.outputs is not set: "
                    "outputs is null for every row"
                )
        self._trace = _column(mapping.trace, columns, "trace") if mapping.trace else _plain("trace")
        self._app_params = (
            _column(mapping.app_params, columns, "app_params") if mapping.app_params else _plain("app_params")
        )
        self._inputs: list[tuple[str, Getter]] | None = None
        if mapping.inputs is not None:
            self._inputs = [(name, _column(name, columns, "inputs")) for name in mapping.inputs]
        # the common mapping (the whole row as inputs, top-level columns for the rest): the worker picks
        # the columns from the row itself (the run frame's "pick", runtimes/PROTOCOL.md)
        self.pick: dict[str, str | None] | None = None
        if mapping.inputs is None and all(
            name is None or name in columns for name in (mapping.outputs, mapping.trace, mapping.app_params)
        ):
            self.pick = {
                "outputs": mapping.outputs,
                "trace": mapping.trace or "trace",
                "app_params": mapping.app_params or "app_params",
            }

    def wire_case(self, row: dict[str, Any], line: bytes) -> dict[str, Any]:
        """The case of ``row`` for a worker's ``run`` frame, encoded with msgspec (``encode_frame(strict=True)``):
        when ``inputs`` is the whole row, it is ``line`` itself (``row``'s JSON, not encoded again)."""
        case = self.case(row)
        if self._inputs is None:
            case["inputs"] = msgspec.Raw(line)
        return case

    def wire_cases(self, lines: list[bytes]) -> list[WireCase]:
        """What a worker's ``run`` frame carries for ``lines`` (rows' JSON; ``encode_frame(strict=True)``):
        with :attr:`pick`, the rows themselves (the worker picks each case's fields); otherwise each
        row's case (:meth:`wire_case`)."""
        if self.pick is not None:
            return [msgspec.Raw(line) for line in lines]
        loads = fastjson.loads
        return [self.wire_case(loads(line), line) for line in lines]

    def case(self, row: dict[str, Any]) -> dict[str, Any]:
        """The case (``inputs``, ``outputs``, ``trace``, ``app_params``) of ``row``."""
        case: dict[str, Any] = _rule.case_of(row, self._outputs, self._trace, self._app_params, self._inputs)
        return case


def column_gaps(mapping: FieldMapping, filled: dict[str, int] | None, total: int, *, outputs: bool = True) -> list[str]:
    """A job's warnings for the columns it maps to ``outputs`` and ``inputs`` that some rows lack (missing or
    null): how many rows, which column. ``filled``: the dataset's rows with a value per top-level column
    (``DatasetFiles.filled``; None: not known, no warning); a dotted path is not counted. ``outputs``: False
    when a model target makes them (the mapped column is not read)."""
    if filled is None or total == 0:
        return []
    named: list[tuple[str, str, str]] = []  # (column, what names it, what is null then)
    if outputs:
        if mapping.outputs is not None:
            named.append((mapping.outputs, f"field_mapping.outputs column {mapping.outputs!r}", "outputs"))
        elif ("outputs" in filled) != ("output" in filled):  # the default column, when only one is there
            column = "outputs" if "outputs" in filled else "output"
            named.append((column, f"the {column!r} column (outputs by default)", "outputs"))
    for column in mapping.inputs or ():
        named.append((column, f"field_mapping.inputs column {column!r}", f"inputs[{column!r}]"))
    warnings = []
    for column, where, what in named:
        if column not in filled:
            continue  # a dotted path, or a column no row has (refused or warned about already)
        missing = total - filled[column]
        if missing > 0:
            every = "every one" if missing == total else f"{missing:,}"
            warnings.append(f"{where} is missing or null on {every} of the {total:,} rows: {what} is null there")
    return warnings


def _plain(name: str) -> Getter:
    getter: Getter = _rule.column(name)
    return getter
