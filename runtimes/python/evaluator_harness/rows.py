"""The row → case rule: a dataset row and the columns to take → the case an evaluator is called with.

Written once for Python (standard library only): the harness picks job rows' cases with it in the
sandbox (a ``run`` frame's ``rows`` + ``pick``), and the host loads this same file
(``evaluator_host/jobs/datasets/mapping.py``, and through it the fake backend). The Node harness has its own
copy of the rule (``runtimes/node/rows.mjs``); ``tests/protocol/rows.json`` holds the vectors every
implementation must answer alike.

A case is ``{"inputs": ..., "outputs": ..., "trace": ..., "app_params": ...}``:

* ``inputs`` is the whole row, or, with a list of columns, ``{column: value}`` of those;
* ``outputs`` is the named column, or by default the row's ``outputs`` when it has that key, else
  its ``output``;
* ``trace`` and ``app_params`` are the named columns (by default ``trace`` and ``app_params``);
* a column the row lacks is null; a :func:`path` getter walks a dotted name into nested objects (null
  as soon as a step is not an object);
* a row that is not an object is the case's ``inputs``, every other field null.

``own``: applied to a container taken from the row (a copy, so that the case's fields share nothing
with ``inputs``: the harness) or not at all (the host, whose case is encoded anyway).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

Getter = Callable[[dict[str, Any]], Any]


def column(name: str) -> Getter:
    """The top-level column ``name`` of a row (null when the row lacks it)."""
    return lambda row: row.get(name)


def path(name: str) -> Getter:
    """The dotted path ``name`` (``"response.text"``) into a row's nested objects."""
    keys = name.split(".")

    def nested(row: dict[str, Any]) -> Any:
        value: Any = row
        for key in keys:
            if not isinstance(value, dict):
                return None
            value = value.get(key)
        return value

    return nested


def default_outputs(row: dict[str, Any]) -> Any:
    """A row's outputs when no column is named: its ``outputs``, else its ``output``."""
    return row["outputs"] if "outputs" in row else row.get("output")


def case_of(
    row: Any,
    outputs: Getter,
    trace: Getter,
    app_params: Getter,
    inputs: list[tuple[str, Getter]] | None = None,
    own: Callable[[Any], Any] | None = None,
) -> dict[str, Any]:
    """The case of ``row``: ``inputs`` the row itself, or ``{name: get(row)}`` of the listed columns."""
    if type(row) is not dict:
        return {"inputs": row, "outputs": None, "trace": None, "app_params": None}
    out, seen, params = outputs(row), trace(row), app_params(row)
    if own is not None:  # a copy only of a container (the commonest fields are strings, numbers or absent)
        out = own(out) if type(out) is dict or type(out) is list else out
        seen = own(seen) if type(seen) is dict or type(seen) is list else seen
        params = own(params) if type(params) is dict or type(params) is list else params
    return {
        "inputs": row if inputs is None else {name: get(row) for name, get in inputs},
        "outputs": out,
        "trace": seen,
        "app_params": params,
    }


def pick_getters(pick: dict[str, Any]) -> tuple[Getter, Getter, Getter]:
    """The getters of a ``run`` frame's ``pick`` (top-level columns; ``"outputs": null``: the default)."""
    outputs = pick.get("outputs")
    return (
        default_outputs if outputs is None else column(outputs),
        column(pick.get("trace") or "trace"),
        column(pick.get("app_params") or "app_params"),
    )


def picked_cases(rows: list[Any], pick: dict[str, Any], own: Callable[[Any], Any] | None = None) -> Iterator[Any]:
    """The cases of a ``run`` frame that carries ``rows`` and ``pick`` instead of ``cases``."""
    outputs, trace, app_params = pick_getters(pick)
    for row in rows:
        yield case_of(row, outputs, trace, app_params, None, own)
