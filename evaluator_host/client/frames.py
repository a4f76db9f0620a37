"""pandas at the client's edges, imported only when used: a DataFrame as dataset rows, a job's results
as a DataFrame.

Contract: :func:`records_of` takes a list of dicts (kept as they are) or a DataFrame (its rows as
dicts: NaN and NaT become null, timestamps ISO 8601, through pandas' own JSON writer); anything else
is a ``TypeError`` naming what was given. :func:`results_frame` needs pandas (an ``ImportError``
saying ``pip install pandas`` otherwise) and gives one row a result: ``index``, ``status``, ``score``,
``passed``, ``label``, ``reason``, ``error`` (the message), ``duration_ms``, one ``outputs.NAME``
column per named output, and the dataset row's columns as ``row.NAME``.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from evaluator_host.jobs.models import JobResult

__all__ = ["records_of", "results_frame"]


def _pandas() -> Any:
    try:
        return importlib.import_module("pandas")
    except ImportError as exc:
        raise ImportError("a DataFrame needs pandas: pip install pandas") from exc


def records_of(source: Any) -> list[Mapping[str, Any]]:
    """Dataset rows from a list of dicts or a pandas DataFrame."""
    if type(source).__module__.startswith("pandas") and hasattr(source, "to_json"):
        records: list[Mapping[str, Any]] = json.loads(source.to_json(orient="records", date_format="iso"))
        return records
    if isinstance(source, Sequence) and not isinstance(source, str | bytes):
        if all(isinstance(row, Mapping) for row in source):
            return list(source)
    raise TypeError(f"a dataset is a file path, a list of dicts or a pandas DataFrame, not {type(source).__name__}")


def _flat(result: JobResult) -> dict[str, Any]:
    r = result.result
    out: dict[str, Any] = {
        "index": result.index,
        "status": r.status,
        "score": r.score,
        "passed": r.passed,
        "label": r.label,
        "reason": r.reason,
        "error": r.error.message if r.error else None,
        "duration_ms": r.duration_ms,
    }
    out.update({f"outputs.{k}": v for k, v in (r.outputs or {}).items()})
    out.update({f"row.{k}": v for k, v in result.row.items()})
    return out


def results_frame(results: Iterable[JobResult]) -> Any:
    """A job's results as a pandas DataFrame (see the module's contract)."""
    pandas = _pandas()
    return pandas.DataFrame([_flat(r) for r in results])
