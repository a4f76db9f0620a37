"""Filling review queues (issue 53): which answers a queue takes, and putting them in it.

Contract:

* :func:`takes` — whether a queue takes one answer: its ``selection`` holds (``score_below``: a finite
  score < x; ``score_above``: > x; ``passed``: that value; ``label_in``; ``status_in``; none: any answer)
  AND the item's draw is under ``sample``. The draw is a hash of the item's id (itself a hash of the
  queue id and the source key), so it is the same on every fill: a refill, or the scorer's hook and the
  fill at creation, always take the same items, and a queue never takes an item it once left.
* :func:`fill` — candidates into a queue, in order, insert-or-ignore on (queue, source key), never past
  its ``max_items``: concurrent fills take turns (PostgreSQL: the queue's row is locked; SQLite: the one
  service's threads hold a lock through the commit).
* :func:`from_rule` — a rule's stored scores (``done`` and current), oldest first, a page at a time,
  until the queue is full or the scores end.
* :func:`job_page` — a job's stored results from an index on (what the review domain turns into items,
  with the row's case, then :func:`insert`).
* :func:`admit_scores` — the online scorer's hook (``ScoreQueue.finish``): scores just stored go into the
  live queues of their rules. Its own transaction, after the scores' own; a failure is logged and never
  reaches the scorer (a refill, ``POST /v1/review-queues/{id}/refill``, takes what it missed).

Portable SQL; blocking: call from a thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, and_, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine

from evaluator_host.store.db import JobResultRow, utcnow
from evaluator_host.store.online.refs import keyed
from evaluator_host.store.online.rows import OnlineScoreRow
from evaluator_host.store.review.rows import ReviewItemRow, ReviewQueueRow

__all__ = ["Candidate", "admit_scores", "fill", "from_rule", "insert", "item_id", "job_page", "takes"]

log = logging.getLogger(__name__)

S, Q, It = OnlineScoreRow, ReviewQueueRow, ReviewItemRow
_PAGE = 500  # scores or results read at once while filling
_SQLITE_FILLS = threading.Lock()


def item_id(queue_id: str, source_key: str) -> str:
    """The id of a queue's item for ``source_key`` (the same on every fill)."""
    return "ri_" + hashlib.sha256(f"{queue_id}/{source_key}".encode()).hexdigest()[:24]


def _draw(queue_id: str, source_key: str) -> float:
    """The item's draw in [0, 1), seeded by its id: stable across fills."""
    digest = hashlib.sha256(item_id(queue_id, source_key).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass(frozen=True)
class Candidate:
    """An answer a queue may take: where it comes from and what the evaluator said."""

    source_key: str
    revision: int | None
    status: str | None
    score: float | None
    passed: bool | None
    label: str | None
    reason: str | None = None
    trace_id: str | None = None
    span_id: str | None = None
    job_index: int | None = None
    snapshot: dict[str, Any] | None = None


def takes(queue: Any, c: Candidate) -> bool:
    """Whether ``queue`` (a row or record with ``id``, ``selection``, ``sample``) takes ``c`` (see the module)."""
    chosen = queue.selection or {}
    score = c.score if c.score is not None and math.isfinite(c.score) else None
    if "score_below" in chosen and (score is None or not score < chosen["score_below"]):
        return False
    if "score_above" in chosen and (score is None or not score > chosen["score_above"]):
        return False
    if "passed" in chosen and c.passed is not chosen["passed"]:
        return False
    if "label_in" in chosen and c.label not in chosen["label_in"]:
        return False
    if "status_in" in chosen and c.status not in chosen["status_in"]:
        return False
    return float(queue.sample) >= 1.0 or _draw(queue.id, c.source_key) < float(queue.sample)


def _reason(result: str | None) -> str | None:
    """The ``reason`` of a stored result's JSON (None when it has none or is not JSON)."""
    try:
        found = json.loads(result) if result else None
    except ValueError:
        return None
    reason = found.get("reason") if isinstance(found, dict) else None
    return reason if isinstance(reason, str) else None


@contextlib.contextmanager
def _transaction(engine: Engine) -> Iterator[Connection]:
    """A transaction to fill in. SQLite: one service per data dir (its lock), whose threads take turns here
    until commit (pysqlite begins at the first write, so a count read before it would be stale)."""
    with _SQLITE_FILLS if engine.dialect.name == "sqlite" else contextlib.nullcontext(), engine.begin() as conn:
        yield conn


def fill(engine: Engine, queue: Any, candidates: Sequence[Candidate]) -> int:
    """:func:`insert` in a transaction of its own."""
    with _transaction(engine) as conn:
        return insert(conn, queue, candidates)


def insert(conn: Connection, queue: Any, candidates: Sequence[Candidate]) -> int:
    """Put ``candidates`` the queue takes into it, in order, up to its ``max_items``; how many were added.
    On PostgreSQL the queue's row is locked first (concurrent fills take turns); on SQLite, call it in
    :func:`_transaction` (:func:`fill` does)."""
    if conn.dialect.name == "postgresql":
        conn.execute(select(Q.id).where(Q.id == queue.id).with_for_update())
    return _insert(conn, queue, candidates)


def _insert(conn: Connection, queue: Any, candidates: Sequence[Candidate]) -> int:
    held = conn.execute(select(func.count()).select_from(It).where(It.queue_id == queue.id)).scalar_one()
    room = int(queue.max_items) - int(held)
    taken = [c for c in candidates if takes(queue, c)]
    if room <= 0 or not taken:
        return 0
    known = {
        k
        for (k,) in conn.execute(
            select(It.source_key).where(It.queue_id == queue.id, It.source_key.in_([c.source_key for c in taken]))
        )
    }
    now = utcnow()
    rows = [
        {
            "id": item_id(queue.id, c.source_key),
            "queue_id": queue.id,
            "workspace_id": queue.workspace_id,
            "evaluator_id": queue.evaluator_id,
            "source_key": c.source_key,
            "trace_id": c.trace_id,
            "span_id": c.span_id,
            "job_index": c.job_index,
            "revision": c.revision,
            "status": c.status,
            "score": c.score if c.score is None or math.isfinite(c.score) else None,
            "passed": c.passed,
            "label": c.label,
            "reason": c.reason,
            "snapshot": c.snapshot,
            "added_at": now + timedelta(microseconds=n),  # one batch keeps its source order (list order: added_at)
            "reviewed_at": None,
        }
        for n, c in enumerate(c for c in taken if c.source_key not in known)
    ][:room]
    if not rows:
        return 0
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    conn.execute(dialect.insert(It.__table__).on_conflict_do_nothing(), rows)
    now_held = conn.execute(select(func.count()).select_from(It).where(It.queue_id == queue.id)).scalar_one()
    return int(now_held) - int(held)  # (an executemany's rowcount is not every driver's sum)


def _score_candidate(row: Any) -> Candidate:
    return Candidate(
        source_key=row.target_id,
        revision=row.revision,
        status=row.status,
        score=row.score,
        passed=row.passed,
        label=row.label,
        reason=_reason(row.result),
        trace_id=row.trace_id,
        span_id=row.span_id,
    )


_SCORE_COLUMNS = (S.target_id, S.trace_id, S.span_id, S.revision, S.status, S.score, S.passed, S.label, S.result)


def from_rule(engine: Engine, queue: Any) -> int:
    """Fill ``queue`` from its rule's stored scores (``done``, current), oldest first; how many were added."""
    added, after = 0, None
    while True:
        query = select(*_SCORE_COLUMNS, S.scored_at).where(
            S.rule_id == queue.rule_id, S.state == "done", S.superseded_by.is_(None)
        )
        if after is not None:
            at, target = after
            query = query.where((S.scored_at > at) | and_(S.scored_at == at, S.target_id > target))
        with _transaction(engine) as conn:
            page = conn.execute(query.order_by(S.scored_at, S.target_id).limit(_PAGE)).all()
            if not page:
                return added
            added += insert(conn, queue, [_score_candidate(r) for r in page])
            full = conn.execute(select(func.count()).select_from(It).where(It.queue_id == queue.id)).scalar_one()
        if full >= queue.max_items or len(page) < _PAGE:
            return added
        after = (page[-1].scored_at, page[-1].target_id)


def job_page(engine: Engine, job_id: str, start: int, n: int = _PAGE) -> list[Candidate]:
    """Up to ``n`` of a job's stored results with index ``>= start``, in index order, as candidates
    (without the row's case: the caller adds it)."""
    r = JobResultRow
    query = select(r.idx, r.status, r.revision, r.result).where(r.job_id == job_id, r.idx >= start)
    with engine.connect() as conn:
        rows = conn.execute(query.order_by(r.idx).limit(n)).all()
    found = []
    for idx, status, revision, text in rows:
        try:
            result = json.loads(text)
        except ValueError:
            result = {}
        score = result.get("score")
        found.append(
            Candidate(
                source_key=str(idx),
                revision=revision,
                status=status,
                score=float(score) if isinstance(score, int | float) and not isinstance(score, bool) else None,
                passed=result.get("passed") if isinstance(result.get("passed"), bool) else None,
                label=result.get("label") if isinstance(result.get("label"), str) else None,
                reason=result.get("reason") if isinstance(result.get("reason"), str) else None,
                job_index=int(idx),
            )
        )
    return found


def admit_scores(engine: Engine, keys: Sequence[tuple[str, str]]) -> int:
    """The scorer's hook: the scores ``keys`` (rule id, target id) just stored, into their rules' live
    queues; how many items were added. Never raises (see the module docstring)."""
    if not keys:
        return 0
    try:
        with _transaction(engine) as conn:
            rules = {r for r, _ in keys}
            live = select(Q).where(Q.rule_id.in_(rules), Q.deleted_at.is_(None))
            queues = conn.execute(live.order_by(Q.id)).all()  # locked in one order by every filler: no deadlock
            if not queues:
                return 0
            scores = conn.execute(select(S.rule_id, *_SCORE_COLUMNS).where(keyed(S.rule_id, S.target_id, keys))).all()
            added = 0
            for queue in queues:
                mine = [_score_candidate(s) for s in scores if s.rule_id == queue.rule_id]
                added += insert(conn, queue, mine)
            return added
    except Exception:  # the scores are stored: a queue missing them is refilled, scoring goes on
        log.exception("adding %d new scores to their review queues failed", len(keys))
        return 0
