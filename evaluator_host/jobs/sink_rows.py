"""The trace ids a job with sinks writes its row results against (issue 52, docs/online.md *Job results to
sinks*).

A row's trace id, span id and session id come from its ``trace_id``, ``span_id`` and ``session_id`` columns,
or the columns ``field_mapping.trace_id`` / ``span_id`` / ``session_id`` name (a top-level key, else a
dotted path into nested objects, as the other mapped columns). A value is text or an integer, at most
:data:`MAX_ID` characters once trimmed (hex ids lower-cased); anything else counts as missing.

* :func:`check_traced` refuses (422 ``NothingCompared``) a job with sinks whose dataset has no row with a
  trace id, naming the columns it looked for: such a job could deliver nothing, yet end green;
* :func:`row_ids` reads the ids of given rows (the sink delivery loop, ``sinks/delivery.py``, through the
  service);
* :func:`uncounted` is a job's sink summaries before any delivery is counted (every done row pending).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from evaluator_host.errors import NothingCompared
from evaluator_host.jobs.datasets.files import DatasetFiles
from evaluator_host.jobs.models import JobSinkSummary
from evaluator_host.sandbox import fastjson

__all__ = ["MAX_ID", "check_traced", "columns", "row_ids", "uncounted"]

MAX_ID = 128
_HEX = re.compile("[0-9a-fA-F]+")


def columns(mapping: dict[str, Any]) -> tuple[str, str, str]:
    """The (trace, span, session) columns of a job's stored ``field_mapping``."""
    return (
        str(mapping.get("trace_id") or "trace_id"),
        str(mapping.get("span_id") or "span_id"),
        str(mapping.get("session_id") or "session_id"),
    )


def _value(row: dict[str, Any], name: str) -> str | None:
    value: Any = row.get(name) if name in row else None
    if name not in row and "." in name:
        value = row
        for part in name.split("."):
            value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    text = str(value).strip()
    if not text or len(text) > MAX_ID:
        return None
    return text.lower() if _HEX.fullmatch(text) else text


def ids(row: dict[str, Any], names: tuple[str, str, str]) -> tuple[str | None, str | None, str | None]:
    """``row``'s (trace id, span id, session id)."""
    return _value(row, names[0]), _value(row, names[1]), _value(row, names[2])


def row_ids(
    files: DatasetFiles, dataset_id: str, mapping: dict[str, Any], indexes: Sequence[int]
) -> dict[int, tuple[str | None, str | None, str | None]]:
    """The ids of the dataset's rows ``indexes`` (read from the first of them to the last)."""
    if not indexes:
        return {}
    wanted, last, names = set(indexes), max(indexes), columns(mapping)
    out = {}
    for index, line in files.lines(dataset_id, min(indexes)):
        if index > last:
            break
        if index in wanted:
            row = fastjson.loads(line)
            out[index] = ids(row if isinstance(row, dict) else {}, names)
    return out


def check_traced(files: DatasetFiles, dataset_id: str, mapping: dict[str, Any], row_count: int) -> None:
    """:class:`NothingCompared` unless some row of the dataset has a trace id (read until the first one)."""
    names = columns(mapping)
    for _index, line in files.lines(dataset_id, 0):
        row = fastjson.loads(line)
        if isinstance(row, dict) and _value(row, names[0]) is not None:
            return
    looked = ", ".join(repr(n) for n in names)
    raise NothingCompared(
        f"a job with sinks writes each row's result against its trace, but none of the {row_count:,} rows has a "
        f"trace id in column {names[0]!r} (the columns looked for: {looked}; name others with "
        "field_mapping.trace_id / span_id / session_id): it would deliver nothing",
        field="trace_id",
        rows=row_count,
        columns=list(names),
    )


def uncounted(sinks: Sequence[dict[str, Any]], done: int) -> list[JobSinkSummary]:
    """The summary of each of a job's ``sinks`` (as stored) with no delivery counted: its ``done`` rows pending."""
    counts = {"delivered": 0, "pending": done, "failed": 0, "skipped": 0}
    return [JobSinkSummary(type=sink["type"], url=sink["url"], name=sink.get("name"), **counts) for sink in sinks]
