"""A backfill re-run from the result cache in ONE statement (issue 50, migration ``0025_backfill_case_hashes``).

Contract (docs/online.md, "Backfill"):

* ``online_case_hashes`` holds, per (workspace, *scope*, target), the result-cache key of the target's case as
  it was last scored and the trace's ``span_count`` then (read before its spans were: a case never claims a
  newer trace than the one it was built from), with the result's columns. The *scope* is what decides a case
  and its answer besides the trace: the evaluator revision's cache prefix (code, runtime, settings, limits,
  version: :mod:`evaluator_host.evaluation.caching.cache`), the rule's mapping and the spans read a trace
  (:func:`~evaluator_host.evaluation.caching.cached_calls.case_scope`). Rows are written (:func:`remember`) with the
  page that scored the targets, in its transaction; a later score of the same target replaces its row.
* :func:`resolve_cached` answers, at a backfill's start, every target among the first ``max_targets`` traces of
  its window whose scope, ``span_count`` and generation (below) match a row here AND whose key is still in
  ``result_cache`` (an evicted entry is no answer) with one ``INSERT … SELECT`` into ``online_scores`` — ``done``,
  the entry's stored text with ``"cached":true``, ``backfill_id`` the backfill's — and moves the backfill's
  ``queued`` and ``cached`` counters in the same transaction, pinned on its holder and on nothing being planned
  yet (one statement and transaction a slice of :data:`SLICE` traces: a writer waits on it for one slice at most).
  A trace whose spans changed since (new spans: a larger ``span_count``) matches no row and is assembled and run; a
  target the rule has any row of (scored, queued, dropped, another revision's) is left to the pages, which
  decide skip or re-score as before; an entry over ``max_stored_result_bytes`` too. Only a trace-level rule
  without filter and sampling (its targets are its traces: :func:`eligible`) is resolved so.
* :func:`forget`: retention's (:meth:`~evaluator_host.store.online.spans.OnlineSpanStore.sweep`) — the rows of
  the traces it deletes (their ids returned by its ``DELETE``: no second scan of the traces) go in its
  transaction, by the index ``(workspace_id, target_id)`` (migration ``0026_case_hashes_sweep``): a trace id sent
  again after its trace was swept is a new trace, never answered with the swept one's result.
* Each row carries its trace's *generation* (migration ``0027_case_hashes_generation``): the trace's
  ``first_seen_at`` as the page read it with ``span_count``. A trace row's ``first_seen_at`` is its first
  receipt, set when the row is inserted and never updated; a trace id sent again after its trace was deleted is
  a new row, received after the deletion — after retention's cutoff, which the deleted trace's last span (and so
  its first) was before: services sharing a database would have to disagree on the time by the retention period
  for the two to meet — so no two traces stored under one id share a generation. :func:`resolve_cached` answers a
  trace only from a row of its own generation; :func:`remember` writes no row of a trace deleted since the page
  read it (the generation is not compared there: a row of a trace sent again meanwhile is written, and answers
  nothing).
* **The race with retention, and why it is harmless.** Retention deletes a chunk of traces and forgets their rows
  in one transaction; a page remembers its rows in another. On PostgreSQL (READ COMMITTED) they write no common
  row and neither sees the other's uncommitted writes: the page's check reads a trace retention has deleted but
  not committed, and retention's ``DELETE`` of keys ran before, or does not see, the page's uncommitted insert —
  so a page that commits after retention's delete can leave a row whose trace is gone (an ``INSERT … SELECT …
  WHERE EXISTS`` has the same snapshot and the same outcome). Locking the trace (``SELECT … FOR KEY SHARE``, or a
  foreign key, which takes that lock) would close it at the price of pages and retention waiting on each other's
  rows taken in different orders (a deadlock between a chunk of 20,000 deletes and a page of 1,000 keys, one
  side rolled back). Instead such a row answers nothing: it keeps the deleted trace's generation, which no trace
  stored under that id later has, so a trace sent again is read and scored fresh; the row is replaced (same
  primary key) when that trace is scored under its scope, and deleted when that trace is swept; an id never sent
  again keeps it, one dead row a page caught in the race. On SQLite a page's transaction writes first (its pin)
  and so holds the one writer before its check: it never interleaves with retention's; the generation still
  matters there, for a trace swept and sent again between the page's read and its commit.

Portable SQL. Blocking: call from a thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    DateTime,
    Float,
    Index,
    Integer,
    LargeBinary,
    Select,
    String,
    and_,
    bindparam,
    delete,
    exists,
    func,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Mapped, mapped_column

from evaluator_host.store import pg_bulk, pg_statistics, sqlite_bulk
from evaluator_host.store.db import Base, utcnow
from evaluator_host.store.online.refs import targets_of
from evaluator_host.store.online.rows import OnlineBackfillRow, OnlineScoreRow, OnlineTraceRow
from evaluator_host.store.online.rules import RuleRecord
from evaluator_host.store.result_cache import CACHE, TOUCH_AFTER_S

__all__ = ["CaseHashRow", "eligible", "forget", "hashable", "remember", "resolve_cached", "traces_in"]

CACHED_MARK = ',"cached":true}'  # as evaluation/caching/cache.py marks a cached row's stored text
_BATCH = 500  # rows a statement
SLICE = 20_000  # traces a resolving statement (and transaction) reads at most
RESOLVE_TABLES = ("online_traces", "online_case_hashes", "result_cache", "online_scores")  # what it joins


class CaseHashRow(Base):
    """A target's case key under a scope (see the module docstring)."""

    __tablename__ = "online_case_hashes"
    __table_args__ = (
        Index("ix_online_case_hashes_target", "workspace_id", "target_id"),  # 0026: the sweep's
        {"sqlite_with_rowid": False},
    )

    workspace_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    scope: Mapped[bytes] = mapped_column(LargeBinary(32), primary_key=True)
    target_id: Mapped[str] = mapped_column(String(200), primary_key=True)  # the base target (no @r<revision>)
    span_id: Mapped[str | None] = mapped_column(String(16), nullable=True)
    span_count: Mapped[int] = mapped_column(Integer)  # the trace's when its case was built
    # 0027: the trace's generation; NULL (a key stored before 0027, or by a service of the release before) answers
    # nothing: NULL equals no trace's
    first_seen_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    case_key: Mapped[bytes] = mapped_column(LargeBinary(32))  # result_cache.key
    status: Mapped[str] = mapped_column(String(20))
    score: Mapped[float | None] = mapped_column(Float, nullable=True)
    passed: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    label: Mapped[str | None] = mapped_column(String(200), nullable=True)
    runtime_id: Mapped[str | None] = mapped_column(String(80), nullable=True)
    duration_ms: Mapped[float | None] = mapped_column(Float, nullable=True)


H, S, T, B = CaseHashRow, OnlineScoreRow, OnlineTraceRow, OnlineBackfillRow
_UPDATED = (
    "span_id", "span_count", "first_seen_at", "case_key", "status", "score", "passed", "label", "runtime_id",
    "duration_ms",
)  # fmt: skip
_COLUMNS = ("workspace_id", "scope", "target_id", *_UPDATED)
_UPSERT = "ON CONFLICT (workspace_id, scope, target_id) DO UPDATE SET " + ", ".join(
    f"{c} = excluded.{c}" for c in _UPDATED
)
# the rows whose trace is still stored (``{v}``: the rows' name in the statement)
_STORED = (
    "EXISTS (SELECT 1 FROM online_traces t WHERE t.workspace_id = {v}.workspace_id AND t.trace_id = {v}.target_id)"
)
_SQLITE_STORED = _STORED.format(v="v")  # store/sqlite_bulk.py's name of the rows
# PostgreSQL: each column one array (store/pg_bulk.py)
_PG_REMEMBER = pg_bulk.insert_sql(CaseHashRow.__table__, _COLUMNS, _UPSERT, _STORED.format(v="u"))  # type: ignore[arg-type]


def hashable(rule: RuleRecord) -> bool:
    """Whether the rule's case of a trace is decided by the trace, its mapping and the evaluator alone: trace level
    without filter (the evaluated span is the root; a filter picks another) — its case keys are stored."""
    return rule.level == "trace" and not rule.filter


def eligible(rule: RuleRecord) -> bool:
    """Whether the rule's targets are its traces, one each (trace level, no filter, no sampling, no budgets)."""
    return hashable(rule) and rule.sampling_rate >= 1.0 and not rule.limits


def remember(conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
    """Write case-hash rows (every column of :class:`CaseHashRow`; ``first_seen_at``: the trace's as the page read
    it, as read), replacing a target's earlier one; a row whose trace (``target_id``: hashed targets are traces)
    retention deleted meanwhile is not written (the race this check cannot close, and why it is harmless: the
    module docstring). A row of a trace sent again under its id meanwhile is written with the generation its page
    read, which the new trace's is not: it answers nothing, and the new trace's own key replaces it."""
    if not rows:
        return
    if conn.dialect.name == "sqlite":  # multi-row statements, the trace's presence checked in them
        ordered = sorted(sqlite_bulk.params(rows, _COLUMNS), key=lambda row: (row[0], row[1], row[2]))  # the key's
        sqlite_bulk.insert(conn, CaseHashRow.__tablename__, _COLUMNS, ordered, _UPSERT, _SQLITE_STORED)
        return
    last = {(r["workspace_id"], r["scope"], r["target_id"]): r for r in rows}  # a key once a statement: its last row
    keyed = [last[key] for key in sorted(last)]  # the key's order
    for start in range(0, len(keyed), _BATCH):  # one statement over arrays a batch: no SQLAlchemy work a row
        part = keyed[start : start + _BATCH]
        conn.exec_driver_sql(_PG_REMEMBER, pg_bulk.params(part, _COLUMNS))


def forget(conn: Connection, traces: Sequence[tuple[str, str]]) -> int:
    """Delete the rows of ``traces`` ((workspace, trace id) pairs: those retention deletes, in its transaction) by
    the index ``(workspace_id, target_id)``; how many rows."""
    gone = 0
    for ws in {w for w, _ in traces}:
        ids = sorted({t for w, t in traces if w == ws})
        for start in range(0, len(ids), _BATCH):
            part = ids[start : start + _BATCH]
            gone += int(conn.execute(delete(H).where(H.workspace_id == ws, H.target_id.in_(part))).rowcount or 0)
    return gone


def traces_in(rule: RuleRecord, window: tuple[datetime | None, datetime | None]) -> Select[str, int, datetime]:
    """The rule's workspace's traces first seen in ``window`` (``[since, until)``, either end open), not ``open``."""
    since, until = window
    query = select(T.trace_id, T.span_count, T.first_seen_at).where(
        T.workspace_id == rule.workspace_id, T.state != "open"
    )
    if since is not None:
        query = query.where(T.first_seen_at >= since)
    if until is not None:
        query = query.where(T.first_seen_at < until)
    return query


def resolve_cached(
    engine: Engine, me: str, backfill: Any, rule: RuleRecord, scope: bytes, cap: int, now_s: float
) -> int | None:
    """Answer the backfill's cached targets set-based (see the module docstring): how many; None when the
    backfill is not ``planning``, not held by ``me`` or already planned a page, or the rule is not
    :func:`eligible` (nothing done). One statement a slice of :data:`SLICE` traces, each slice its own
    transaction (SQLite's one writer is never held for long), pinned on the counters the slice before left. On
    PostgreSQL the tables it joins are analyzed first when their statistics are stale (a first backfill's case keys
    and scores, written a moment before: :func:`~evaluator_host.store.pg_statistics.refresh`), and ``online_scores``
    after each slice that added :data:`~evaluator_host.store.pg_statistics.STALE_MIN_ROWS` rows or more: the next
    slice reads the rule's rows, and the pages the backfill's, by ids no statistics knew before (a plan that took
    the rule for empty read all of its rows for each trace of the next slice)."""
    if not eligible(rule):
        return None
    pg_statistics.refresh(engine, RESOLVE_TABLES)
    answered, read, after, refused = 0, 0, None, False
    limit = int(backfill.max_targets)
    while read < limit:
        size = min(SLICE, limit - read)
        got = _resolve_slice(engine, me, backfill, rule, scope, cap, now_s, after, size, answered)
        if got is None:
            refused = read == 0  # nothing done: not planning, not held, or a page planned
            break
        added = got[0] - answered
        answered, in_slice, after = got
        read += in_slice
        if added >= pg_statistics.STALE_MIN_ROWS:  # the next slice and the pages read these rows by the rule's
            pg_statistics.analyze(engine, ["online_scores"])  # and the backfill's new ids: statistics that know them
        if in_slice < size or answered >= limit:
            break
    return None if refused else answered


def _resolve_slice(
    engine: Engine, me: str, backfill: Any, rule: RuleRecord, scope: bytes, cap: int, now_s: float,
    after: tuple[Any, str] | None, size: int, answered: int,
) -> tuple[int, int, tuple[Any, str] | None] | None:  # fmt: skip
    """One slice of :func:`resolve_cached`: (answered so far, traces in the slice, its last trace) or None."""
    ws = rule.workspace_id
    window = traces_in(rule, (backfill.since, backfill.until))
    if after is not None:
        window = window.where(or_(T.first_seen_at > after[0], and_(T.first_seen_at == after[0], T.trace_id > after[1])))
    first = window.order_by(T.first_seen_at, T.trace_id).limit(size).subquery()
    c = CACHE.c
    now = utcnow()
    # any row of the rule for the trace: its id, or the id with a suffix ("@r<revision>"); a range the key answers
    of_trace = targets_of(S.target_id, first.c.trace_id)
    scored = exists().where(S.rule_id == rule.id, of_trace)
    text = func.substr(c.result, 1, func.length(c.result) - 1) + literal(CACHED_MARK)
    answers = (
        select(
            literal(rule.id),
            first.c.trace_id,
            first.c.trace_id,
            literal(ws),
            H.span_id,
            literal("done"),
            literal(me),
            literal(1),
            literal(now),
            literal(now),
            literal(rule.evaluator_id),
            literal(backfill.revision, Integer),
            H.runtime_id,
            c.status,
            H.score,
            H.passed,
            H.label,
            H.duration_ms,
            text,
            literal(backfill.id),
        )  # fmt: skip
        .select_from(first)
        .join(H, and_(H.workspace_id == ws, H.scope == scope, H.target_id == first.c.trace_id))
        .join(CACHE, and_(c.workspace_id == ws, c.key == H.case_key))
        .where(H.span_count == first.c.span_count, H.first_seen_at == first.c.first_seen_at, c.bytes - 32 <= cap)
    )
    columns = [
        "rule_id", "target_id", "trace_id", "workspace_id", "span_id", "state", "claimed_by", "attempts",
        "enqueued_at", "scored_at", "evaluator_id", "revision", "runtime_id", "status", "score", "passed", "label",
        "duration_ms", "result", "backfill_id",
    ]  # fmt: skip
    dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
    with engine.begin() as conn:
        pin = and_(
            B.id == backfill.id, B.claimed_by == me, B.status == "planning", B.cursor_at.is_(None),
            B.queued == answered,
        )  # fmt: skip
        if not conn.execute(update(B).where(pin).values(updated_at=now)).rowcount:
            return None
        in_slice = int(conn.scalar(select(func.count()).select_from(first)) or 0)
        last = None  # the slice's last trace: the window's in_slice-th, walked in its index's order (no sort)
        if in_slice:
            at = window.with_only_columns(T.first_seen_at, T.trace_id).order_by(T.first_seen_at, T.trace_id)
            last = conn.execute(at.offset(in_slice - 1).limit(1)).first()
        if dialect is sqlite:
            answers = answers.where(~scored)
        else:  # the traces the rule has a row of, read first: a plan that probes the rule's rows by another index than
            # its key would read, for each trace, the rows this INSERT adds (quadratic; its statistics know no such
            # rule yet — pg_statistics.py)
            held = list(conn.execute(select(first.c.trace_id).where(scored)).scalars())
            if held:  # NOT IN a subquery: looked up in a hash of them, not compared with each (as `<> ALL` may be)
                ids = select(func.unnest(bindparam("held", held, type_=ARRAY(String))))
                answers = answers.where(first.c.trace_id.not_in(ids))
        conn.execute(dialect.insert(S).from_select(columns, answers).on_conflict_do_nothing())
        n = int(conn.scalar(select(func.count()).where(S.backfill_id == backfill.id)) or 0)  # nothing else has any
        if n > answered:
            used = select(H.case_key).where(H.workspace_id == ws, H.scope == scope)
            conn.execute(
                update(CACHE)
                .where(c.workspace_id == ws, c.used_at < now_s - TOUCH_AFTER_S, c.key.in_(used))
                .values(used_at=now_s)
            )  # the entries answered stay the last evicted (least recently used first)
            values: dict[str, Any] = {"queued": n, "cached": n, "total": max(int(backfill.total), n)}
            if n >= int(backfill.max_targets):
                values.update(status="planned", total=n, claimed_by=None, claimed_until=None)
            conn.execute(update(B).where(B.id == backfill.id).values(**values))
    return n, in_slice, None if last is None else (last[0], str(last[1]))
