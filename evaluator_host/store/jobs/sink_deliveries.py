"""A job's row results delivered to the job's sinks (issue 52, migration 0017): the ``source = 'job'`` rows of
``online_sink_deliveries`` — ``rule_id`` the job's id, ``target_id`` the row's index (as text), the row's
``trace_id`` / ``span_id`` / ``session_id`` kept on the row. Claiming, back-off and finishing are the online
scores' (``store/sinks/deliveries.py``); this module adds what differs.

Contract:

* :meth:`JobSinkStore.unenqueued` names, per job with sinks not yet ``sinks_enqueued``, its stored results
  that have no delivery row (at most ``limit``); a finished job found with none is marked
  ``sinks_enqueued`` and is looked at no more;
* :meth:`JobSinkStore.enqueue` inserts one row per (result, sink), insert-or-ignore on the key (two services
  never make two): ``pending``, or ``skipped`` with ``"row has no trace_id"`` when the row has none — a row
  not delivered says so;
* :func:`load_job_deliveries` gives the claimed rows what sending them needs (the stored result, the job's
  sinks, a rule-shaped record standing for the job: its evaluator's name, level ``span`` when the row names a
  span); a row whose job was deleted meanwhile is deleted;
* :meth:`JobSinkStore.states` / :meth:`JobSinkStore.summary` are what ``GET /v1/jobs/{id}/results`` and
  ``GET /v1/jobs/{id}`` show.

Each row's key is :func:`delivery_key` of (job, ``row:<index>``, revision): sent again after a crash, the
tool overwrites (Phoenix's ``identifier``, Langfuse's ``id``) or finds it (MLflow's metadata).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import String, and_, cast, delete, func, select, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine

from evaluator_host.store.db import JobResultRow, JobRow, RevisionRow
from evaluator_host.store.online.rows import SinkDeliveryRow
from evaluator_host.store.online.rules import RuleRecord
from evaluator_host.store.sinks.records import Delivery, delivery_key

__all__ = ["NO_TRACE", "JobRowIds", "JobSinkStore", "Unenqueued", "load_job_deliveries"]

NO_TRACE = "row has no trace_id"
_FINISHED = ("succeeded", "failed", "cancelled", "stopped")


@dataclass(frozen=True)
class Unenqueued:
    """A job's results with no delivery rows yet (their indexes), and what reading their rows needs."""

    job_id: str
    workspace_id: str
    dataset_id: str
    field_mapping: dict[str, Any]
    sinks: list[dict[str, Any]]
    revision: int
    indexes: list[int]


JobRowIds = tuple[str | None, str | None, str | None]  # a row's (trace id, span id, session id)


def _key(job_id: str, idx: int, revision: int | None) -> str:
    return delivery_key(job_id, f"row:{idx}", revision)


class JobSinkStore:
    """The job side of the deliveries of one database (call from a thread: the methods block)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._after: dict[str, int] = {}  # per job, the last row enqueued here: the next look starts past it

    def unenqueued(self, limit: int = 500) -> list[Unenqueued]:
        """Jobs' results with no delivery rows yet, at most ``limit`` in all (see the module docstring)."""
        j, r, d = JobRow, JobResultRow, SinkDeliveryRow
        out: list[Unenqueued] = []
        with self.engine.begin() as conn:
            jobs = conn.execute(
                select(j.id, j.workspace_id, j.dataset_id, j.field_mapping, j.sinks, j.revision, j.status).where(
                    j.sinks.is_not(None), j.sinks_enqueued.is_(False)
                )
            ).all()
            for job in jobs:
                if limit <= 0:
                    break
                missing = ~(
                    select(d.rule_id)
                    .where(d.source == "job", d.rule_id == r.job_id, d.target_id == cast(r.idx, String))
                    .exists()
                )
                stored = conn.scalar(select(func.count()).select_from(r).where(r.job_id == job.id))
                enqueued = conn.scalar(
                    select(func.count()).where(d.source == "job", d.rule_id == job.id, d.sink == 0)
                )  # two counts over primary-key ranges: the row-by-row look below only when they differ
                found: list[int] = []
                if stored != enqueued:  # past the last row enqueued first; from the start when none is there
                    after = self._after.get(job.id, -1)
                    for low in (after, -1) if after >= 0 else (-1,):
                        query = select(r.idx).where(r.job_id == job.id, r.idx > low, missing)
                        found = list(conn.scalars(query.order_by(r.idx).limit(limit)))
                        if found:
                            break
                if found:
                    self._after[job.id] = found[-1]
                if found and job.sinks:
                    out.append(
                        Unenqueued(
                            job.id,
                            job.workspace_id,
                            job.dataset_id,
                            dict(job.field_mapping or {}),
                            list(job.sinks),
                            job.revision,
                            found,
                        )  # fmt: skip
                    )
                    limit -= len(found)
                elif job.status in _FINISHED or not job.sinks:  # every result has its rows: done with it
                    conn.execute(update(j).where(j.id == job.id).values(sinks_enqueued=True))
                    self._after.pop(job.id, None)
        return out

    def enqueue(self, job: Unenqueued, ids: dict[int, JobRowIds], now: datetime) -> int:
        """One delivery row per (result, sink) of ``job``'s ``indexes`` (``ids``: each row's ids; a row
        without a trace id is ``skipped``); how many were inserted, as the driver counts them."""
        rows = []
        for idx in job.indexes:
            trace, span, session = ids.get(idx, (None, None, None))
            for index, sink in enumerate(job.sinks):
                rows.append(
                    {
                        "source": "job",
                        "rule_id": job.job_id,
                        "target_id": str(idx),
                        "sink": index,
                        "workspace_id": job.workspace_id,
                        "type": str(sink.get("type")),
                        "key": _key(job.job_id, idx, job.revision),
                        "state": "pending" if trace else "skipped",
                        "attempts": 0,
                        "error": None if trace else NO_TRACE,
                        "due_at": now,
                        "created_at": now,
                        "trace_id": trace,
                        "span_id": span,
                        "session_id": session,
                    }  # fmt: skip
                )
        if not rows:
            return 0
        dialect = postgresql if self.engine.dialect.name == "postgresql" else sqlite
        with self.engine.begin() as conn:  # one statement, its rows as parameter sets (compiled once)
            done = conn.execute(dialect.insert(SinkDeliveryRow).on_conflict_do_nothing(), rows)
        return max(0, int(done.rowcount or 0))

    def states(self, job_id: str, indexes: Sequence[int]) -> dict[int, list[dict[str, Any]]]:
        """The deliveries of ``job_id``'s rows ``indexes``, by row, each sink in order."""
        d = SinkDeliveryRow
        out: dict[int, list[dict[str, Any]]] = {}
        with self.engine.connect() as conn:
            for start in range(0, len(indexes), 400):
                part = [str(i) for i in indexes[start : start + 400]]
                query = (
                    select(d.target_id, d.type, d.state, d.attempts, d.error)
                    .where(d.source == "job", d.rule_id == job_id, d.target_id.in_(part))
                    .order_by(d.target_id, d.sink)
                )
                for row in conn.execute(query):
                    out.setdefault(int(row.target_id), []).append(
                        {"type": row.type, "state": row.state, "attempts": row.attempts, "error": row.error}
                    )
        return out

    def summary(self, job_id: str, sinks: list[dict[str, Any]], done: int) -> list[dict[str, Any]]:
        """Per sink of the job: its rows ``delivered``, ``failed``, ``skipped``, and ``pending`` — every other of
        the ``done`` rows (waiting, sending, retrying, or not yet enqueued)."""
        d = SinkDeliveryRow
        counts: dict[tuple[int, str], int] = {}
        with self.engine.connect() as conn:
            query = (
                select(d.sink, d.state, func.count())
                .where(d.source == "job", d.rule_id == job_id)
                .group_by(d.sink, d.state)
            )
            for sink, state, n in conn.execute(query):
                counts[(sink, state)] = int(n)
        out = []
        for index, spec in enumerate(sinks):
            ended = {state: counts.get((index, state), 0) for state in ("delivered", "failed", "skipped")}
            out.append(
                {
                    "type": spec.get("type"),
                    "url": spec.get("url"),
                    "name": spec.get("name"),
                    **ended,
                    "pending": max(0, done - sum(ended.values())),
                }  # fmt: skip
            )
        return out


def load_job_deliveries(engine: Engine, keys: list[tuple[str, str, int]]) -> list[Delivery]:
    """The claimed job deliveries ``keys`` (job id, row index, sink) with what sending them needs."""
    d, r, j, v = SinkDeliveryRow, JobResultRow, JobRow, RevisionRow
    query = (
        select(d, r.status, r.result, r.revision, r.runtime_id)
        .add_columns(j.workspace_id, j.evaluator_id, j.sinks, j.created_at, v.name)
        .join(j, j.id == d.rule_id)
        .join(r, and_(r.job_id == d.rule_id, cast(r.idx, String) == d.target_id))
        .outerjoin(v, and_(v.evaluator_id == j.evaluator_id, v.revision == r.revision))
        .where(d.source == "job", tuple_(d.rule_id, d.target_id, d.sink).in_(keys))
    )
    out: list[Delivery] = []
    from sqlalchemy.orm import Session

    with Session(engine) as session:
        for row, status, text, revision, runtime, workspace, evaluator, sinks, created, name in session.execute(query):
            result = json.loads(text) if text else {}
            level = "span" if row.span_id else "trace"
            standing = RuleRecord(
                id=row.rule_id, workspace_id=workspace, name=name, evaluator_id=evaluator, revision=revision,
                filter={}, sampling_rate=1.0, mapping=None, enabled=True, created_at=created, updated_at=created,
                target={"level": level}, sinks=list(sinks or []) or None,
            )  # fmt: skip
            score = result.get("score")
            out.append(
                Delivery(
                    row.rule_id,
                    row.target_id,
                    row.sink,
                    row.workspace_id,
                    row.key,
                    row.attempts,
                    standing,
                    str(row.trace_id or ""),
                    row.span_id,
                    None,
                    status,
                    float(score) if isinstance(score, int | float) and not isinstance(score, bool) else None,
                    result.get("passed") if isinstance(result.get("passed"), bool) else None,
                    None if result.get("label") is None else str(result.get("label")),
                    revision,
                    runtime,
                    evaluator,
                    result,
                    source="job",
                    session_id=row.session_id,
                )  # fmt: skip
            )
    found = {(x.rule_id, x.target_id, x.sink) for x in out}
    gone = [key for key in keys if key not in found]  # the job was deleted meanwhile: nothing to send
    if gone:
        with engine.begin() as conn:
            conn.execute(delete(d).where(d.source == "job", tuple_(d.rule_id, d.target_id, d.sink).in_(gone)))
    return out
