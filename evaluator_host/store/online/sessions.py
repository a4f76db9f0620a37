"""Sessions in the store (migration ``0014``): who belongs to which session, when a session is ready,
its scores' queue rows and their supersession.

Contract (docs/online.md, "Session level"):

* :func:`record` — in the routing transaction (:meth:`ScoreQueue.route`): each routed trace joins the
  sessions routing names for it (``online_session_traces``); each session's ``num_traces`` (its
  *generation*) grows by the traces joined and its ``last_span_at`` becomes the latest of theirs; each
  session-level rule that one of them matched targets the session (``online_session_rules``). A trace is
  routed by one service only, so it joins a session once; every write is an insert-if-absent, an
  increment or a re-arming (``ready_at``) of every rule targeting a grown session, in (workspace,
  session) order (concurrent routers lock rows in the same order).
* :func:`queue_ready` — a session is *ready* for a rule when no span of it came for the rule's
  ``quiet_s`` (``online_session_rules.ready_at``, set by :func:`record` to the last span of the traces
  joined + ``quiet_s``, is past; the ready rows are read by that index, soonest first, whatever other
  rules wait longer) and its generation is past the one last queued for that rule: one score row is
  inserted, target id ``<session id>#<generation>`` (the queue's primary key makes a second row for a
  (rule, session, generation) impossible: several services, a SIGKILL between two passes), ``queued``
  or ``dropped`` past the backlog bound like a trace's; its ``trace_id`` is the session's latest trace.
  The rule is disarmed (``ready_at`` null) only if ``ready_at`` is still what was read: a session that
  grew meanwhile stays armed for its next generation.
* :func:`supersede` — in the transaction that stores session scores (:meth:`ScoreQueue.finish`): the
  (rule, session)'s done scores of an earlier generation get ``superseded_by`` the new one; a new score
  of an earlier generation than one already done is itself superseded. ``superseded_by`` null: current.
* :func:`sweep` — retention: sessions whose last span is older than the cutoff, with their rows.

Portable SQL (SQLite and PostgreSQL). Blocking: call from a thread.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, bindparam, case, delete, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from evaluator_host.store.db import as_utc
from evaluator_host.store.online import superseding
from evaluator_host.store.online.refs import keyed
from evaluator_host.store.online.rows import (
    OnlineRuleRow,
    OnlineScoreRow,
    OnlineSessionRow,
    OnlineSessionRuleRow,
    OnlineSessionTraceRow,
)
from evaluator_host.store.online.rules import rule_record

__all__ = ["Joined", "SessionHead", "queue_ready", "record", "session_target", "supersede", "sweep"]

S, SS, ST, SR = OnlineScoreRow, OnlineSessionRow, OnlineSessionTraceRow, OnlineSessionRuleRow
READY_BATCH = 500  # sessions looked at per pass
_SUPERSEDE_KEYS = 500  # stored scores :func:`supersede` reads a statement
_MEMBERS_SESSIONS = 500  # sessions :func:`members` reads a statement


@dataclass(frozen=True)
class Joined:
    """One routed trace joining one session, and the session-level rules it matched for it (id, quiet_s)."""

    workspace_id: str
    session_id: str
    trace_id: str
    start_ns: int
    last_span_at: datetime
    rules: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class SessionHead:
    """A session row's facts."""

    session_id: str
    num_traces: int
    first_seen_at: datetime
    last_span_at: datetime


def session_target(session_id: str, generation: int) -> str:
    """The queue's target id of a (rule, session, generation)."""
    return f"{session_id}#{generation}"


def _insert_ignore(conn: Connection, table: Any, rows: list[dict[str, Any]], keys: list[str]) -> None:
    if not rows:
        return
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    conn.execute(dialect.insert(table).on_conflict_do_nothing(index_elements=keys), rows)


def record(conn: Connection, joined: Sequence[Joined], now: datetime) -> None:
    """Store ``joined`` (see the module docstring) on ``conn``, in its transaction."""
    if not joined:
        return
    grown: dict[tuple[str, str], list[Joined]] = {}
    for j in joined:
        grown.setdefault((j.workspace_id, j.session_id), []).append(j)
    order = sorted(grown)
    _insert_ignore(
        conn,
        SS,
        [
            {"workspace_id": w, "session_id": s, "first_seen_at": now, "last_span_at": now, "num_traces": 0}
            for w, s in order
        ],
        ["workspace_id", "session_id"],
    )
    last: Any = bindparam("v_last")
    conn.execute(
        update(SS)
        .where(SS.workspace_id == bindparam("k_ws"), SS.session_id == bindparam("k_sid"))
        .values(
            num_traces=SS.num_traces + bindparam("v_n"),
            last_span_at=case((SS.num_traces == 0, last), (SS.last_span_at < last, last), else_=SS.last_span_at),
        ),
        [
            {"k_ws": w, "k_sid": s, "v_n": len(grown[(w, s)]), "v_last": max(j.last_span_at for j in grown[(w, s)])}
            for w, s in order
        ],
    )
    members = {(j.workspace_id, j.session_id, j.trace_id): j.start_ns for j in joined}
    # a row a routed trace: driver SQL (SQLAlchemy's per-row parameter processing cost more than the insert)
    mark = "?" if conn.dialect.name == "sqlite" else "%s"
    conn.exec_driver_sql(
        f"INSERT INTO {ST.__tablename__} (workspace_id, session_id, trace_id, start_ns) "
        f"VALUES ({mark}, {mark}, {mark}, {mark}) ON CONFLICT (workspace_id, session_id, trace_id) DO NOTHING",
        [(w, s, t, n) for (w, s, t), n in sorted(members.items())],
    )
    targets = sorted({(r, q, j.session_id, j.workspace_id) for j in joined for r, q in j.rules})
    _insert_ignore(
        conn,
        SR,
        [
            {"rule_id": r, "session_id": s, "workspace_id": w, "queued_generation": 0, "quiet_s": q, "ready_at": None}
            for r, q, s, w in targets
        ],
        ["rule_id", "session_id"],
    )
    _rearm(conn, {k: max(j.last_span_at for j in js) for k, js in grown.items()})


def _rearm(conn: Connection, last: dict[tuple[str, str], datetime]) -> None:
    """Every rule targeting a grown session is ready again ``quiet_s`` after the session's last span."""
    found: list[tuple[str, str, str, datetime]] = []
    by_workspace: dict[str, list[str]] = {}
    for ws, sid in sorted(last):
        by_workspace.setdefault(ws, []).append(sid)
    for ws, sids in by_workspace.items():  # a few hundred sessions a statement, not one a session
        for start in range(0, len(sids), _MEMBERS_SESSIONS):
            of = (SR.workspace_id == ws, SR.session_id.in_(sids[start : start + _MEMBERS_SESSIONS]))
            for sid, rule_id, quiet_s in conn.execute(select(SR.session_id, SR.rule_id, SR.quiet_s).where(*of)):
                found.append((ws, str(sid), str(rule_id), last[(ws, str(sid))] + timedelta(seconds=int(quiet_s))))
    # updated in (workspace, session, rule) order, as the sessions were: concurrent routers lock rows in one order
    due = [{"k_rule": rule_id, "k_sid": sid, "v_ready": ready} for _, sid, rule_id, ready in sorted(found)]
    if due:
        conn.execute(
            update(SR)
            .where(SR.rule_id == bindparam("k_rule"), SR.session_id == bindparam("k_sid"))
            .values(ready_at=bindparam("v_ready")),
            due,
        )


def queue_ready(
    engine: Engine, now: datetime, backlog: int, backlog_max: int, upcoming: list[datetime] | None = None
) -> tuple[int, dict[str, int]]:
    """Queue one score row per (rule, session) ready now (see the module docstring); (rows queued,
    rule id -> rows stored dropped). ``backlog``: rows queued or running before this pass. A rule deleted
    or paused meanwhile is disarmed (a paused rule does not score sessions that went quiet while paused).
    ``upcoming``: when none is ready now, the earliest time one will be is appended to it (none pending:
    nothing), in the same transaction (the router sleeps no later than that: ``shared/idle.py``)."""
    pending = (
        select(SR.rule_id, SR.session_id, SR.workspace_id, SR.ready_at, SR.queued_generation, SS.num_traces)
        .join(SS, and_(SS.workspace_id == SR.workspace_id, SS.session_id == SR.session_id), isouter=True)
        .where(SR.ready_at.is_not(None), SR.ready_at <= now)
        .order_by(SR.ready_at, SR.rule_id, SR.session_id)
        .limit(READY_BATCH)
    )
    queued, dropped = 0, dict[str, int]()
    with engine.begin() as conn:
        found = conn.execute(pending).all()
        if not found:
            if upcoming is not None:
                later = conn.execute(select(func.min(SR.ready_at)).where(SR.ready_at > now)).scalar()
                if later is not None:
                    upcoming.append(as_utc(later))
            return 0, {}
        rules = {
            r.id: rule_record(r)
            for r in Session(bind=conn).scalars(
                select(OnlineRuleRow).where(OnlineRuleRow.id.in_({f[0] for f in found}))
            )
        }
        due, disarm = [], []
        for rule_id, session_id, ws, ready_at, queued_generation, generation in found:
            rule = rules.get(rule_id)
            live = rule is not None and rule.deleted_at is None and rule.enabled
            if rule is None or not live or generation is None or int(generation) <= int(queued_generation):
                disarm.append({"k_rule": rule_id, "k_sid": session_id, "k_ready": ready_at, "v_gen": queued_generation})
            else:
                due.append((rule, session_id, ws, int(generation), ready_at))
        latest = _latest_traces(conn, {(ws, sid) for _, sid, ws, _, _ in due})
        rows = []
        for rule, session_id, ws, generation, _ in due:
            state = "queued" if backlog < backlog_max else "dropped"
            if state == "queued":
                backlog, queued = backlog + 1, queued + 1
            else:
                dropped[rule.id] = dropped.get(rule.id, 0) + 1
            rows.append(
                {
                    "rule_id": rule.id,
                    "target_id": session_target(session_id, generation),
                    "trace_id": latest.get((ws, session_id), ""),
                    "workspace_id": ws,
                    "span_id": None,
                    "state": state,
                    "attempts": 0,
                    "enqueued_at": now,
                    "evaluator_id": rule.evaluator_id,
                    "revision": rule.revision,
                    "session_id": session_id,
                    "generation": generation,
                }
            )
        _insert_ignore(conn, S, rows, ["rule_id", "target_id"])
        done = [{"k_rule": r.id, "k_sid": sid, "k_ready": at, "v_gen": g} for r, sid, _, g, at in due]
        # conditional on ready_at: a session that grew meanwhile stays armed for its next generation
        conn.execute(
            update(SR)
            .where(
                SR.rule_id == bindparam("k_rule"),
                SR.session_id == bindparam("k_sid"),
                SR.ready_at == bindparam("k_ready"),
            )
            .values(queued_generation=bindparam("v_gen"), ready_at=None),
            done + disarm,
        )
    return queued, dropped


def _latest_traces(conn: Connection, sessions: set[tuple[str, str]]) -> dict[tuple[str, str], str]:
    return {key: traces[-1] for key, (traces, _) in members(conn, sessions, 1).items()}


def supersede(conn: Connection, me: str, keys: Sequence[tuple[str, str]]) -> None:
    """Mark what the scores ``keys`` (rule id, target id) that ``me`` just stored replace (see the module
    docstring): a session score the (rule, session)'s earlier generations (and, scored again with another
    revision by a backfill, its own generation's earlier scores); a backfill's score of a target
    scored again with another revision (``<target>@r<revision>``) the target's earlier scores."""
    rows: list[Any] = []
    for start in range(0, len(keys), _SUPERSEDE_KEYS):  # a page's keys (a direct backfill's: 1,000) a few at a time
        rows += conn.execute(
            select(S.rule_id, S.target_id, S.session_id, S.generation, S.workspace_id).where(
                keyed(S.rule_id, S.target_id, keys[start : start + _SUPERSEDE_KEYS]),  # = rule AND IN (…): no OR tree
                S.state == "done",
                S.claimed_by == me,
            )
        ).all()
    given = {(str(r), str(t)): i for i, (r, t) in enumerate(keys)}
    rows.sort(key=lambda row: given.get((str(row[0]), str(row[1])), 0))  # in the order given: of one family, the last
    # a slice of scores a statement, each found in its family's key range or by its session
    superseding.families(conn, [(r, t) for r, t, sid, _, _ in rows if sid is None])
    superseding.sessions(conn, [(r, t, ws, sid, int(g or 0)) for r, t, sid, g, ws in rows if sid is not None])


def sweep(conn: Connection, cutoff: datetime) -> int:
    """Delete the sessions whose last span came before ``cutoff``, their traces' and rules' rows; how many."""
    old = select(SS.workspace_id, SS.session_id).where(SS.last_span_at < cutoff).limit(10_000)
    gone = [(str(w), str(s)) for w, s in conn.execute(old)]
    for ws, sid in gone:
        for table in (ST, SR):
            conn.execute(delete(table).where(table.workspace_id == ws, table.session_id == sid))
        conn.execute(delete(SS).where(SS.workspace_id == ws, SS.session_id == sid))
    return len(gone)


def heads(
    engine: Engine, workspace_id: str, *, limit: int | None, before: tuple[datetime, str] | None
) -> list[SessionHead]:
    """The workspace's sessions, first seen newest first (ties: greater session id first)."""
    query = select(SS.session_id, SS.num_traces, SS.first_seen_at, SS.last_span_at).where(
        SS.workspace_id == workspace_id
    )
    if before is not None:
        at, last = before
        query = query.where(or_(SS.first_seen_at < at, and_(SS.first_seen_at == at, SS.session_id < last)))
    query = query.order_by(SS.first_seen_at.desc(), SS.session_id.desc())
    if limit is not None:
        query = query.limit(limit)
    with engine.connect() as conn:
        return [SessionHead(str(s), int(n), as_utc(f), as_utc(la)) for s, n, f, la in conn.execute(query)]


def head(conn: Connection, workspace_id: str, session_id: str) -> SessionHead | None:
    """One session row of the workspace, or None."""
    query = select(SS.session_id, SS.num_traces, SS.first_seen_at, SS.last_span_at).where(
        SS.workspace_id == workspace_id, SS.session_id == session_id
    )
    r = conn.execute(query).one_or_none()
    return None if r is None else SessionHead(str(r[0]), int(r[1]), as_utc(r[2]), as_utc(r[3]))


def members(
    conn: Connection, keys: Collection[tuple[str, str]], most: int, latest: bool = True
) -> dict[tuple[str, str], tuple[list[str], int]]:
    """Each session of ``keys`` (workspace, session id): its latest (``latest``, else first) ``most`` trace ids in
    start order (ties: trace id), and how many traces it has; a session with none is absent. A few hundred sessions
    of a workspace a statement (a window over each one's rows), not two statements a session."""
    by_workspace: dict[str, set[str]] = {}
    for ws, sid in keys:
        by_workspace.setdefault(ws, set()).add(sid)
    order = (ST.start_ns.desc(), ST.trace_id.desc()) if latest else (ST.start_ns, ST.trace_id)
    out: dict[tuple[str, str], tuple[list[str], int]] = {}
    for ws, sids in by_workspace.items():
        ids = sorted(sids)
        for start in range(0, len(ids), _MEMBERS_SESSIONS):
            ranked = select(
                ST.session_id,
                ST.trace_id,
                func.row_number().over(partition_by=ST.session_id, order_by=order).label("k"),
                func.count().over(partition_by=ST.session_id).label("n"),
            ).where(ST.workspace_id == ws, ST.session_id.in_(ids[start : start + _MEMBERS_SESSIONS]))
            inner = ranked.subquery()
            query = (
                select(inner.c.session_id, inner.c.trace_id, inner.c.n)
                .where(inner.c.k <= most)
                .order_by(inner.c.session_id, inner.c.k)
            )
            for sid, trace_id, n in conn.execute(query):
                traces, _ = out.setdefault((ws, str(sid)), ([], int(n)))
                traces.append(str(trace_id))
    if latest:
        for traces, _ in out.values():
            traces.reverse()  # read latest first: start order
    return out
