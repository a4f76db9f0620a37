"""A backfill page's rows written by SQLite's multi-row statements (issue 50, ``store/sqlite_bulk.py``): a row
written so reads back exactly as SQLAlchemy's insert of it (its times the same text: what SQL compares), many
rows by a few statements (a ``where``, an upsert's last row), and the result cache's ``put_in`` — SQLite's
multi-row statements in the page's transaction — stores and counts what
``put`` does (a key stored already left as it is, a key twice in one put stored once, an entry over the bound
not stored, the eviction past it), on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import Engine, event, insert, select, text

from evaluator_host.store import sqlite_bulk
from evaluator_host.store.db import make_engine
from evaluator_host.store.online.rows import OnlineScoreRow
from evaluator_host.store.online.scores import ScoreQueue
from evaluator_host.store.result_cache import CACHE, ResultCacheStore


def _score(target: str, at: datetime) -> dict[str, object]:
    return {
        "rule_id": "rule_1", "target_id": target, "trace_id": "ab" * 16, "workspace_id": "ws_default",
        "span_id": None, "state": "done", "claimed_by": "svc", "claimed_until": None, "attempts": 1,
        "enqueued_at": at, "scored_at": at + timedelta(microseconds=1), "evaluator_id": "ev_1", "revision": 2,
        "runtime_id": "python-3.11", "status": "ok", "score": 0.25, "passed": False, "label": "é ✓",
        "duration_ms": 1.5, "result": '{"status":"ok"}', "backfill_id": "bf_1",
    }  # fmt: skip


def test_a_row_written_by_one_prepared_statement_reads_back_as_sqlalchemys_insert_of_it(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/bulk.db")
    at = datetime(2026, 11, 26, 7, 30, 1, 123456, tzinfo=UTC)
    by_orm, by_bulk = _score("t_orm", at), _score("t_bulk", at)
    columns = list(by_bulk)
    with engine.begin() as conn:
        conn.execute(insert(OnlineScoreRow), [by_orm])
        statement = sqlite_bulk.insert_sql("online_scores", columns, "ON CONFLICT (rule_id, target_id) DO NOTHING")
        assert conn.exec_driver_sql(statement, sqlite_bulk.params([by_bulk], columns)).rowcount == 1
    s = OnlineScoreRow
    with engine.connect() as conn:
        rows = {r.target_id: r._asdict() for r in conn.execute(select(s.__table__))}
        times = "SELECT target_id, enqueued_at || '|' || scored_at FROM online_scores"
        stored = dict(conn.exec_driver_sql(times).all())
        later = conn.scalars(select(s.target_id).where(s.enqueued_at >= at, s.scored_at > at)).all()
    assert {k: v for k, v in rows["t_bulk"].items() if k != "target_id"} == {
        k: v for k, v in rows["t_orm"].items() if k != "target_id"
    }
    assert stored["t_bulk"] == stored["t_orm"]  # the same text: what SQL compares
    assert sorted(later) == ["t_bulk", "t_orm"]
    engine.dispose()


def _store(engine: Engine) -> ResultCacheStore:
    store = ResultCacheStore(engine)
    clock = iter(range(1_000, 10_000, 100))
    store._now = lambda: float(next(clock))
    return store


def _held(engine: Engine, workspace: str) -> dict[bytes, tuple[str, int, float]]:
    c = CACHE.c
    with engine.connect() as conn:
        query = select(c.key, c.status, c.bytes, c.used_at).where(c.workspace_id == workspace)
        return {bytes(k): (s, b, u) for k, s, b, u in conn.execute(query)}


def test_put_in_a_pages_transaction_stores_and_counts_what_put_does(engine: Engine) -> None:
    pad = '{"status":"ok","pad":"' + "x" * 900 + '"}'
    keys = [i.to_bytes(32, "big") for i in range(8)]
    first = [(keys[0], "ok", pad), (keys[1], "ok", pad), (keys[2], "error", pad)]
    # a key stored already, one twice, one over the bound alone, a marker: and past the bound, evicting
    then = [(keys[2], "ok", "{}"), (keys[3], "ok", pad), (keys[3], "ok", pad), (keys[4], "ok", "x" * 9_000),
            (keys[5], "ok", pad), (keys[6], "ok", pad), (keys[7], "marker", "{}")]  # fmt: skip
    bound = 5_000
    put, put_in = _store(engine), _store(engine)
    for entries in (first, then):
        put.put("ws_put", entries, bound)
        with engine.begin() as conn:
            conn.execute(text("UPDATE result_cache_usage SET bytes = bytes WHERE 1 = 0"))  # the page has written
            put_in.put_in(conn, "ws_in", entries, bound)
    assert _held(engine, "ws_in") == _held(engine, "ws_put")
    assert put_in.usage("ws_in") == put.usage("ws_put")
    held = _held(engine, "ws_in")
    assert keys[4] not in held and keys[7] in held and put_in.usage("ws_in").bytes <= bound
    assert put_in.usage("ws_in").entries == len(held)


def test_put_in_marks_a_stored_marker_used_after_its_pages_rows_as_put_does(engine: Engine) -> None:
    """A prefix's marker stored by an earlier page is marked used after this page's rows (its ``used_at`` past
    theirs), so least-recently-used eviction never drops it before the entries it stands for."""
    marker, a, b = (i.to_bytes(32, "big") for i in (90, 91, 92))
    put, put_in = _store(engine), _store(engine)
    for clock, entries in (
        (1000.0, [(a, "ok", "{}"), (marker, "marker", "{}")]),
        (2000.0, [(b, "ok", "{}"), (marker, "marker", "{}")]),
    ):
        put._now = put_in._now = lambda clock=clock: clock  # type: ignore[method-assign]
        put.put("ws_put", entries, 1_000_000)
        with engine.begin() as conn:
            conn.execute(text("UPDATE result_cache_usage SET bytes = bytes WHERE 1 = 0"))  # the page has written
            put_in.put_in(conn, "ws_in", entries, 1_000_000)
    for ws in ("ws_put", "ws_in"):
        with engine.connect() as conn:
            used = dict(conn.execute(select(CACHE.c.key, CACHE.c.used_at).where(CACHE.c.workspace_id == ws)).all())
        assert used[bytes(marker)] > used[bytes(b)] == 2000.0, (ws, used)


def test_many_rows_are_written_by_a_few_multi_row_statements_of_few_texts(tmp_path: Path) -> None:
    """``sqlite_bulk.insert``: 1,000 rows in statements of powers of two rows (at most ``MAX_ROWS``) — one step and
    one hand-over of the GIL each, not one a row as ``executemany`` — every row written, in order, the row count
    only the rows written (a key stored already is skipped by the tail)."""
    engine = make_engine(f"sqlite:///{tmp_path}/bulk.db")
    at = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)
    rows = [_score(f"t_{i:04d}", at + timedelta(seconds=i)) for i in range(1_000)]
    columns = list(rows[0])
    statements: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    tail = "ON CONFLICT (rule_id, target_id) DO NOTHING"
    with engine.begin() as conn:
        written = sqlite_bulk.insert(conn, "online_scores", columns, sqlite_bulk.params(rows, columns), tail)
    sizes = [s.count("), (") + 1 for s in statements]
    assert written == 1_000 and sum(sizes) == 1_000
    assert all(n & (n - 1) == 0 and n <= sqlite_bulk.MAX_ROWS for n in sizes), sizes
    assert len(statements) <= 1_000 // sqlite_bulk.MAX_ROWS + 10  # not one a row
    again = rows[:3] + [_score("t_new", at)]  # three stored already, one new
    with engine.begin() as conn:
        assert sqlite_bulk.insert(conn, "online_scores", columns, sqlite_bulk.params(again, columns), tail) == 1
    with engine.connect() as conn:
        stored = conn.execute(select(OnlineScoreRow.target_id).order_by(text("rowid"))).scalars().all()
    assert stored == [r["target_id"] for r in rows] + ["t_new"]
    engine.dispose()


def test_a_where_keeps_only_the_rows_it_holds_for_and_an_upsert_keeps_a_keys_last_row(tmp_path: Path) -> None:
    """``where`` names the rows ``v`` with the table's columns; ``DO UPDATE`` with one key twice in a call: the
    later row wins, as one statement a row did; written as a transaction's first write, it is the transaction's
    (``sqlite3`` begins one only before a statement that starts with INSERT: not WITH)."""
    engine = make_engine(f"sqlite:///{tmp_path}/bulk.db")
    at = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)
    rows = [_score(f"t_{i}", at) for i in range(5)] + [{**_score("t_1", at), "label": "later"}]
    columns = list(rows[0])
    upsert = "ON CONFLICT (rule_id, target_id) DO UPDATE SET label = excluded.label"
    with engine.begin() as conn:
        values = sqlite_bulk.params(rows, columns)
        sqlite_bulk.insert(conn, "online_scores", columns, values, upsert, "v.target_id != 't_3'")
    with engine.connect() as conn:  # a transaction's first write: rolled back with it (its INSERT begins it)
        values = sqlite_bulk.params([_score("t_rolled_back", at)], columns)
        assert sqlite_bulk.insert(conn, "online_scores", columns, values, upsert, "v.target_id != 't_3'") == 1
        conn.rollback()
    with engine.connect() as conn:
        labels = dict(conn.execute(select(OnlineScoreRow.target_id, OnlineScoreRow.label)).all())
    assert sorted(labels) == ["t_0", "t_1", "t_2", "t_4"]
    assert labels["t_1"] == "later" and labels["t_0"] == "é ✓"
    engine.dispose()


def test_an_update_sets_each_keyed_row_from_its_own_values_where_its_condition_holds(tmp_path: Path) -> None:
    """``sqlite_bulk.update`` (a round's results stored by the scorer): each row matched on its key gets its own
    values (its time as SQLAlchemy's update writes it: the text SQL compares), the extra SET, and only where the
    condition (with its own parameters) holds; the count is the rows set, a key with no row not counted."""
    engine = make_engine(f"sqlite:///{tmp_path}/bulk.db")
    at = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)
    stored = [{**_score(f"t_{i}", at), "state": "running", "claimed_by": "me" if i != 2 else "other"} for i in range(4)]
    with engine.begin() as conn:
        conn.execute(insert(OnlineScoreRow), stored)
    later = at + timedelta(seconds=5, microseconds=7)
    names = ["status", "score", "scored_at"]
    got = [{"rule_id": "rule_1", "target_id": f"t_{i}", "status": "ok", "score": i / 10, "scored_at": later}
           for i in (0, 1, 2, 9)]  # fmt: skip
    rows = sqlite_bulk.params(got, ["rule_id", "target_id", *names])
    held = "online_scores.state = 'running' AND online_scores.claimed_by = ?"
    with engine.begin() as conn:
        count = sqlite_bulk.update(
            conn, "online_scores", ("rule_id", "target_id"), names, rows, "state = 'done'", held, ("me",)
        )
    assert count == 2  # t_2 is another's, t_9 has no row
    s = OnlineScoreRow
    with engine.connect() as conn:
        after = {r.target_id: (r.state, r.score) for r in conn.execute(select(s.target_id, s.state, s.score))}
        exact = conn.scalars(select(s.target_id).where(s.scored_at == later)).all()  # SQLAlchemy's bound text
    assert after == {"t_0": ("done", 0.0), "t_1": ("done", 0.1), "t_2": ("running", 0.25), "t_3": ("running", 0.25)}
    assert sorted(exact) == ["t_0", "t_1"]
    engine.dispose()


def test_a_rounds_result_given_twice_for_one_row_stores_the_first_as_one_statement_a_row_did(
    tmp_path: Path,
) -> None:
    """``ScoreQueue._finish`` on SQLite (``sqlite_bulk.update``): a (rule, target) twice in one call stores its
    first result (``UPDATE … FROM`` would pick either), and both are answered stored, as before."""
    engine = make_engine(f"sqlite:///{tmp_path}/bulk.db")
    at = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)
    with engine.begin() as conn:
        conn.execute(insert(OnlineScoreRow), [{**_score("t_1", at), "state": "running", "claimed_by": "me"}])
    first, second = ({"status": "ok", "score": score, "scored_at": None} for score in (0.1, 0.9))
    assert ScoreQueue(engine)._finish("me", [("rule_1", "t_1", first), ("rule_1", "t_1", second)], {}) == [True, True]
    with engine.connect() as conn:
        assert conn.execute(select(OnlineScoreRow.state, OnlineScoreRow.score)).one() == ("done", 0.1)
    engine.dispose()
