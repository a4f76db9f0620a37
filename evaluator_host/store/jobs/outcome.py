"""How a job whose rows are all stored ends: ``succeeded``, or ``failed`` when every row errored.

A job whose every row is an error (status other than ``ok``: an exception, a timeout, an invalid result)
checked nothing: it ends ``failed`` with the error ``AllRowsErrored`` — how many rows, the most common
error type and its count, one example row with its line (:mod:`evaluator_host.evaluation.outcomes.error_summary`),
read from the stored results (the first :data:`SCANNED` rows at most) — not ``succeeded``. Every path that
finishes a job takes its fields here: the service's lanes
(:meth:`~evaluator_host.store.jobs.repository.JobStore.finish`),
a worker host's last commit (``JobResults.commit_shared``, in its transaction) and the queue dispatcher.
A job of zero rows has no row that errored: it succeeds (an empty dataset is refused at upload).
"""

from __future__ import annotations

from typing import Any

import msgspec
from sqlalchemy import Table, select
from sqlalchemy.engine import Connection

from evaluator_host.evaluation.outcomes.error_summary import ErrorTally
from evaluator_host.store.db import JobResultRow, utcnow

__all__ = ["ALL_ROWS_ERRORED", "SCANNED", "finished_fields"]

ALL_ROWS_ERRORED = "AllRowsErrored"
SCANNED = 100_000  # stored rows read at most to find the most common error
_RESULTS: Table = JobResultRow.__table__  # type: ignore[assignment]


class _Error(msgspec.Struct):
    type: str = ""
    message: str = ""
    line: int | None = None


class _Stored(msgspec.Struct):
    status: str = ""
    error: _Error | None = None


_decode = msgspec.json.Decoder(_Stored).decode


def _all_errored(conn: Connection, job_id: str, rows: int) -> dict[str, Any]:
    """The ``AllRowsErrored`` error of a job of ``rows`` rows, every one an error."""
    tally = ErrorTally()
    query = (
        select(_RESULTS.c.idx, _RESULTS.c.status, _RESULTS.c.result)
        .where(_RESULTS.c.job_id == job_id)
        .order_by(_RESULTS.c.idx)
        .limit(SCANNED)
    )
    for idx, status, text in conn.execute(query):
        try:
            stored = _decode(text)
        except (msgspec.DecodeError, msgspec.ValidationError):
            stored = _Stored(status=status)
        found = stored.error or _Error(type=status)
        tally.add(int(idx), found.type or status, found.message, found.line)
    summary = tally.summary()
    counted = "" if rows <= SCANNED else f" (counted over the first {SCANNED:,} rows)"
    said = f": {summary.sentence()}{counted}" if summary is not None else ""
    error: dict[str, Any] = {
        "type": ALL_ROWS_ERRORED,
        "code": "all_rows_errored",
        "message": f"every one of the job's {rows} rows errored, so it checked nothing{said}",
        "rows": rows,
    }
    if summary is not None:
        error |= summary.fields()
    return error


def finished_fields(conn: Connection, job_id: str, done: int, failed: int, total: int) -> dict[str, Any]:
    """The fields of a job whose ``total`` rows are stored (``done`` of them, ``failed`` errors): ``succeeded``,
    or ``failed`` with ``AllRowsErrored`` when every row is an error (read in ``conn``'s transaction)."""
    fields: dict[str, Any] = {"status": "succeeded", "finished_at": utcnow()}
    if total > 0 and done >= total and failed >= done:
        fields |= {"status": "failed", "error": _all_errored(conn, job_id, total)}
    return fields
