"""A backfill's page scored by its planner (issue 50, the fast path of :mod:`evaluator_host.online.backfill.runs`).

Contract (docs/online.md, "Backfill"):

* :func:`read_page` reads the backfill's next page as
  :meth:`~evaluator_host.store.online.backfills.BackfillStore.plan_page` would plan it (the same targets, skips
  and limits: :func:`~evaluator_host.store.online.backfills.count`), but writes nothing: no lock is held while
  its targets are scored.
* :func:`commit_page` then stores the page in ONE transaction: first, by a write, the pin — the backfill still
  ``planning``, still held by ``me``, its cursor still where the page was read — so a page is committed by one
  holder once (a claim taken over, a cancel or another holder's page in between: nothing is stored and
  ``False``); its scores inserted ``done`` (``claimed_by`` ``me``: a re-scored target's earlier scores are
  superseded in the same transaction), the targets it did not score now (paced, refused for a rate, a sandbox
  failure) inserted ``queued`` for the scorer, the cursor and the counters moved. The queue's key (rule,
  target) makes a second row for a target impossible (a row routing added meanwhile wins: the insert skips
  it). A SIGKILL before the commit leaves nothing: the page is read and scored again.

Portable SQL. Blocking: call from a thread.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Table, select, update
from sqlalchemy.engine import Connection, Engine

from evaluator_host.store import pg_bulk, pg_statistics, sqlite_bulk
from evaluator_host.store.db import as_utc, utcnow
from evaluator_host.store.online import case_hashes as online_case_hashes
from evaluator_host.store.online import sessions as online_sessions
from evaluator_host.store.online.backfills import Backfill, Counted, Decide, SpansOf, advance, count, page_room
from evaluator_host.store.online.rows import OnlineBackfillRow, OnlineRuleRow, OnlineScoreRow
from evaluator_host.store.online.rules import RuleRecord

__all__ = ["Page", "commit_page", "read_page"]

S, B = OnlineScoreRow, OnlineBackfillRow
_BATCH = 500  # rows a statement
_SKIP_STORED = "ON CONFLICT (rule_id, target_id) DO NOTHING"
_SCORES: Table = OnlineScoreRow.__table__  # type: ignore[assignment]
PAGE_TABLES = ("online_scores", "online_traces")  # what a page's read joins (their statistics refreshed first)


@dataclass(frozen=True)
class Page:
    """A page read: where the cursor was, what :func:`count` found, and how many traces were asked for."""

    cursor: tuple[datetime, str] | None
    got: Counted
    traces: int


def read_page(
    engine: Engine, me: str, backfill: Backfill, rule: RuleRecord, traces: int, decide: Decide, spans_of: SpansOf,
    backlog_room: int, behind: Page | None = None, pending: int = 0,
) -> Page | None:  # fmt: skip
    """The backfill's next page, read only (None: not ``planning`` and held by ``me`` any more). With ``behind``
    (a page read and not stored yet, ``pending`` rows in all with the others before it): the page after it, read
    ahead — stored only once ``behind`` is (its pin expects ``behind``'s last trace as the cursor). On PostgreSQL the
    tables it reads are analyzed first when the pages before made their statistics stale
    (:func:`~evaluator_host.store.pg_statistics.refresh`)."""
    pg_statistics.refresh(engine, PAGE_TABLES)
    with engine.connect() as conn:
        row = conn.execute(select(B).where(B.id == backfill.id)).one()
        if row.status != "planning" or row.claimed_by != me:
            return None
        after = None if row.cursor_at is None else (as_utc(row.cursor_at), str(row.cursor_id))
        if behind is not None:
            after = behind.got.last or behind.cursor
        room, strict = page_room(row, backlog_room, pending)
        window = (backfill.since, backfill.until)
        got = count(
            conn, rule, backfill.revision, window, after, traces, room, decide, spans_of, backfill.id, strict,
            own=bool(row.cached),
        )  # fmt: skip
    return Page(after, got, traces)


def commit_page(
    engine: Engine, me: str, backfill: Backfill, rule: RuleRecord, page: Page, scored: dict[str, dict[str, Any]],
    waiting: dict[str, dict[str, Any]], claim_s: float, hashes: Sequence[dict[str, Any]] = (),
    cached: Collection[str] = (), also: Callable[[Connection], None] | None = None,
) -> tuple[set[str], bool] | None:  # fmt: skip
    """Store ``page`` (see the module docstring): ``scored`` — target id → the result's columns (``done``);
    ``waiting`` — target id → ``claimed_until``/``delayed_by`` (``queued``); a new row of the page in neither
    is queued as it is; ``hashes`` — the scored targets' case-hash rows
    (:func:`~evaluator_host.store.online.case_hashes.remember`); ``cached`` — the target ids answered from the
    result cache (counted in the backfill's ``cached`` once added); ``also`` — more to write in the same transaction
    once the page is pinned (the misses' result-cache entries: ``online/backfill/direct.py``). The target ids it
    added and whether planning ended (None: nothing stored)."""
    with engine.begin() as conn:
        at = B.cursor_at.is_(None) if page.cursor is None else B.cursor_at == page.cursor[0]
        last = B.cursor_id.is_(None) if page.cursor is None else B.cursor_id == page.cursor[1]
        mine = update(B).where(B.id == backfill.id, B.claimed_by == me, B.status == "planning", at, last)
        if not conn.execute(mine.values(updated_at=utcnow())).rowcount:
            return None
        gone = conn.execute(select(OnlineRuleRow.deleted_at).where(OnlineRuleRow.id == rule.id)).first()
        if gone is None or gone[0] is not None:
            return None  # the rule was deleted meanwhile: the next planning cancels the backfill
        row = conn.execute(select(B).where(B.id == backfill.id)).one()
        now = utcnow()
        rows = [_row(r, me, now, scored.get(r["target_id"]), waiting.get(r["target_id"])) for r in page.got.rows]
        added = _insert_sqlite(conn, rule.id, rows) if engine.dialect.name == "sqlite" else _insert(conn, rows)
        if page.got.requeue:
            conn.execute(
                update(S)
                .where(S.rule_id == rule.id, S.target_id.in_(page.got.requeue), S.state == "dropped")
                .values(state="queued", status=None, attempts=0, backfill_id=backfill.id, claimed_until=None)
            )
        redone = [(rule.id, t) for t in added if "@r" in t and t in scored]
        online_sessions.supersede(conn, me, redone)
        online_case_hashes.remember(conn, hashes)
        if also is not None:
            also(conn)
        taken = len(rows) - len(added)  # a row routing added meanwhile: scored there
        queued = len(added) + len(page.got.requeue)
        hits = sum(1 for t in cached if t in added)
        ended = advance(conn, me, backfill, row, page.got, page.traces, claim_s, queued, taken, hits)
    return added, ended


def _insert(conn: Connection, rows: list[dict[str, Any]]) -> set[str]:
    """Insert the page's rows not stored yet (the others skipped by the queue's key); their target ids."""
    added: set[str] = set()
    ordered = sorted(rows, key=lambda r: str(r["target_id"]))  # the key's order
    for kind in ("done", "queued"):  # each kind's rows name the same columns: one statement over arrays each
        part = [r for r in ordered if r["state"] == kind]
        if part:
            columns = list(part[0])
            statement = pg_bulk.insert_sql(_SCORES, columns, f"{_SKIP_STORED} RETURNING target_id")
            added.update(str(t) for t in conn.exec_driver_sql(statement, pg_bulk.params(part, columns)).scalars())
    return added


def _insert_sqlite(conn: Connection, rule_id: str, rows: list[dict[str, Any]]) -> set[str]:
    """:func:`_insert` on SQLite: the rows already stored read first — under the page's write lock (SQLite has
    one writer, and the pin's update took it: nothing is added between the read and the insert) — and the others
    inserted by one prepared statement (:mod:`~evaluator_host.store.sqlite_bulk`: no SQLAlchemy work a row)."""
    ids = [str(r["target_id"]) for r in rows]
    held: set[str] = set()
    for start in range(0, len(ids), _BATCH):
        present = select(S.target_id).where(S.rule_id == rule_id, S.target_id.in_(ids[start : start + _BATCH]))
        held.update(str(t) for t in conn.execute(present).scalars())
    new = sorted((r for r in rows if r["target_id"] not in held), key=lambda r: str(r["target_id"]))  # the key's order
    for kind in ("done", "queued"):  # each kind's rows name the same columns
        part = [r for r in new if r["state"] == kind]
        if part:
            columns = list(part[0])
            values = sqlite_bulk.params(part, columns)
            if sqlite_bulk.insert(conn, S.__tablename__, columns, values, _SKIP_STORED) != len(part):
                raise RuntimeError("a backfill page's score rows were stored meanwhile: the page is not stored")
    return {str(r["target_id"]) for r in new}


def _row(
    base: dict[str, Any], me: str, now: datetime, result: dict[str, Any] | None, wait: dict[str, Any] | None
) -> dict[str, Any]:
    """One page row as inserted: every column named, so that one statement inserts them all."""
    out = {
        **base, "state": "queued", "claimed_by": None, "claimed_until": None, "delayed_by": None, "status": None,
        "score": None, "passed": None, "label": None, "runtime_id": None, "duration_ms": None, "scored_at": None,
        "result": None,
    }  # fmt: skip
    if result is not None:
        out.update(result, state="done", attempts=1, claimed_by=me)
    elif wait is not None:
        out.update(wait)
    return out
