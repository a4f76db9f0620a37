"""What a stored score supersedes, one statement a slice of scores (issue 50), on SQLite and PostgreSQL.

A target scored again with another revision: only ``done`` rows of the same rule, of the target itself and its
revisions, not superseded yet; never a neighbour in the key range (a span target, another trace); target ids
that are patterns to ``LIKE`` are plain text; the last of one family given supersedes; PostgreSQL's ``jit`` is
as it was after. A session score: the (rule, session)'s earlier generations (its own too for a revision's), never
another session's (one whose id extends it with ``#``) or rule's; itself when a later generation is scored; several
of one session at once; the rows found by the primary key, not by reading every done row."""

from __future__ import annotations

from typing import Any

import psycopg
from sqlalchemy import Engine, insert

from evaluator_host.store.db import make_engine, utcnow
from evaluator_host.store.online import superseding
from evaluator_host.store.online.rows import OnlineScoreRow
from tests.support.backends import postgres_only
from tests.support.online import WS, hex_id, score_rows
from tests.support.pg import Cluster


def _row(rule: str, target: str, state: str = "done", superseded_by: str | None = None) -> dict[str, Any]:
    return {"rule_id": rule, "target_id": target, "trace_id": target[:32], "workspace_id": WS, "state": state,
            "status": "ok", "attempts": 1, "enqueued_at": utcnow(), "evaluator_id": "ev_1", "revision": 1,
            "superseded_by": superseded_by, "session_id": None, "generation": None}  # fmt: skip


def _session_row(
    rule: str, session: str, generation: int, revision: int | None = None, **fields: Any
) -> dict[str, Any]:
    target = f"{session}#{generation}" + ("" if revision is None else f"@r{revision}")
    return {**_row(rule, target, **fields), "session_id": session, "generation": generation}


def _superseded(engine: Engine, rule: str) -> dict[str, str | None]:
    return {r.target_id: r.superseded_by for r in score_rows(engine) if r.rule_id == rule}


def test_a_revisions_score_supersedes_only_its_own_familys_done_rows_not_yet_superseded(engine: Engine) -> None:
    t = hex_id(16)
    beside = t[:-1] + ("1" if t[-1] == "0" else "0")
    rows = [
        _row("r1", t),  # the first score: superseded
        _row("r1", f"{t}@r2"),  # an earlier revision's: superseded
        _row("r1", f"{t}@r3", state="queued"),  # not done: as it is
        _row("r1", f"{t}@r5", superseded_by="elsewhere"),  # superseded already: by what it was
        _row("r1", f"{t}/00000000000000aa"),  # a span target in the family's key range: not of it
        _row("r1", beside),  # the next trace: not of it
        _row("r2", t),  # another rule's: not of it
        _row("r1", f"{t}@r4"),  # the score stored now: current
    ]
    with engine.begin() as conn:
        conn.execute(insert(OnlineScoreRow), rows)
        assert superseding.families(conn, [("r1", f"{t}@r4")]) == 2
    assert _superseded(engine, "r1") == {
        t: f"{t}@r4",
        f"{t}@r2": f"{t}@r4",
        f"{t}@r3": None,
        f"{t}@r5": "elsewhere",
        f"{t}/00000000000000aa": None,
        beside: None,
        f"{t}@r4": None,
    }
    assert _superseded(engine, "r2") == {t: None}


def test_target_ids_holding_like_patterns_are_matched_as_plain_text(engine: Engine) -> None:
    """``%`` and ``_`` are wildcards to ``LIKE``: a family is told by its prefix, as text."""
    rows = [_row("r1", "a_%"), _row("r1", "a_%@r2"), _row("r1", "aX%@r1"), _row("r1", "a_Z@r1"), _row("r1", "a_%@r3")]
    with engine.begin() as conn:
        conn.execute(insert(OnlineScoreRow), rows)
        assert superseding.families(conn, [("r1", "a_%@r3")]) == 2
    assert _superseded(engine, "r1") == {"a_%": "a_%@r3", "a_%@r2": "a_%@r3", "aX%@r1": None, "a_Z@r1": None,
                                         "a_%@r3": None}  # fmt: skip


def test_of_two_targets_of_one_family_given_together_the_last_supersedes_the_other(engine: Engine) -> None:
    t = hex_id(16)
    with engine.begin() as conn:
        conn.execute(insert(OnlineScoreRow), [_row("r1", t), _row("r1", f"{t}@r2"), _row("r1", f"{t}@r3")])
        superseding.families(conn, [("r1", f"{t}@r2"), ("r1", f"{t}@r3")])
    assert _superseded(engine, "r1") == {t: f"{t}@r3", f"{t}@r2": f"{t}@r3", f"{t}@r3": None}


def test_many_rules_and_more_targets_than_a_slice_are_all_marked_and_jit_is_left_as_it_was(engine: Engine) -> None:
    ids = [hex_id(16) for _ in range(superseding.SLICE + 77)]  # a slice, then 64 + 8 + 4 + 1
    rows = [_row(rule, t) for rule in ("r1", "r2") for t in ids]
    rows += [_row(rule, f"{t}@r2") for rule in ("r1", "r2") for t in ids]
    with engine.begin() as conn:
        conn.execute(insert(OnlineScoreRow), rows)
        before = conn.exec_driver_sql("SHOW jit").scalar() if engine.dialect.name == "postgresql" else None
        keys = [(rule, f"{t}@r2") for t in ids for rule in ("r1", "r2")]  # the rules interleaved
        assert superseding.families(conn, keys) == 2 * len(ids)
        if before is not None:
            assert conn.exec_driver_sql("SHOW jit").scalar() == before
    for rule in ("r1", "r2"):
        marks = _superseded(engine, rule)
        assert all(marks[t] == f"{t}@r2" and marks[f"{t}@r2"] is None for t in ids)


def test_no_keys_is_no_statement(engine: Engine) -> None:
    with engine.begin() as conn:
        assert superseding.families(conn, []) == 0


def test_a_session_score_supersedes_its_sessions_earlier_generations_and_no_other_sessions(engine: Engine) -> None:
    rows = [
        _session_row("r1", "s", 1),
        _session_row("r1", "s", 2),
        _session_row("r1", "s", 0, state="queued"),  # not done: as it is
        _session_row("r1", "s#x", 1),  # a session whose id extends "s" with "#": not of it
        _session_row("r1", "t", 1),  # another session
        _session_row("r2", "s", 1),  # another rule's
        _session_row("r1", "s", 3),  # the score stored now
    ]
    with engine.begin() as conn:
        conn.execute(insert(OnlineScoreRow), rows)
        assert superseding.sessions(conn, [("r1", "s#3", WS, "s", 3)]) == 2
    assert _superseded(engine, "r1") == {
        "s#1": "s#3",
        "s#2": "s#3",
        "s#0": None,
        "s#x#1": None,
        "t#1": None,
        "s#3": None,
    }
    assert _superseded(engine, "r2") == {"s#1": None}


def test_a_revisions_session_score_supersedes_its_own_generations_and_a_later_generation_supersedes_it(
    engine: Engine,
) -> None:
    rows = [_session_row("r1", "s", 3), _session_row("r1", "s", 3, revision=2), _session_row("r1", "u", 4),
            _session_row("r1", "u", 5), _session_row("r1", "u", 6, state="queued")]  # fmt: skip
    with engine.begin() as conn:
        conn.execute(insert(OnlineScoreRow), rows)
        # s: a backfill's revision of generation 3; u: generation 4 stored after 5 (5 is done: it supersedes 4)
        superseding.sessions(conn, [("r1", "s#3@r2", WS, "s", 3), ("r1", "u#4", WS, "u", 4)])
    assert _superseded(engine, "r1") == {"s#3": "s#3@r2", "s#3@r2": None, "u#4": "u#5", "u#5": None, "u#6": None}


def test_several_scores_of_one_session_stored_together_leave_the_latest_current(engine: Engine) -> None:
    rows = [_session_row("r1", "s", g) for g in (1, 2, 3)]
    with engine.begin() as conn:
        conn.execute(insert(OnlineScoreRow), rows)
        superseding.sessions(conn, [("r1", "s#3", WS, "s", 3), ("r1", "s#2", WS, "s", 2)])  # in any order
    assert _superseded(engine, "r1") == {"s#1": "s#3", "s#2": "s#3", "s#3": None}


def test_more_sessions_than_a_slice_are_found_by_the_primary_key(engine: Engine) -> None:
    """Each statement reads the sessions' rows by the (workspace, session) index: it had no usable index but the
    queue's ``state``, and read every done row of every rule for each session score (the plan is SQLite's; both
    databases mark every row)."""
    n = superseding.SLICE + 3
    rows = [_session_row("r1", f"s{i}", g) for i in range(n) for g in (1, 2)]
    with engine.begin() as conn:
        conn.execute(insert(OnlineScoreRow), rows)
        assert superseding.sessions(conn, [("r1", f"s{i}#2", WS, f"s{i}", 2) for i in range(n)]) == n
        if engine.dialect.name == "sqlite":
            for sql, params in ((superseding._earlier_sql(1, "?"), ("s0#2", WS, "s0", 2, 0, "r1")),
                                (superseding._later_sql(1, "?"), ("s0#2", "r1"))):  # fmt: skip
                plan = " | ".join(str(r[3]) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", params))
                assert "SCAN online_scores" not in plan and "USING INDEX ix_online_scores_session" in plan
    marks = _superseded(engine, "r1")
    assert all(marks[f"s{i}#1"] == f"s{i}#2" and marks[f"s{i}#2"] is None for i in range(n))


def test_a_session_id_holding_at_r_and_another_workspaces_session_of_the_same_id_are_told_apart(
    engine: Engine,
) -> None:
    """``bob@realm#2`` is generation 2 of ``bob@realm``, not a revision's score: it does not supersede the other
    score of its own generation stored with it; a session of the same id in another workspace is its own."""
    rows = [_session_row("r1", "bob@realm", 1), _session_row("r1", "bob@realm", 2, revision=3),
            _session_row("r1", "bob@realm", 2), {**_session_row("r1", "x", 1), "workspace_id": "ws_other",
            "target_id": "x#1", "session_id": "bob@realm"}]  # fmt: skip
    with engine.begin() as conn:
        conn.execute(insert(OnlineScoreRow), rows)
        scores = [("r1", "bob@realm#2@r3", WS, "bob@realm", 2), ("r1", "bob@realm#2", WS, "bob@realm", 2)]
        superseding.sessions(conn, scores)  # the revision's wins whatever the order
    assert _superseded(engine, "r1") == {"bob@realm#1": "bob@realm#2@r3", "bob@realm#2": "bob@realm#2@r3",
                                         "bob@realm#2@r3": None, "x#1": None}  # fmt: skip
    assert superseding.is_revision("bob@realm#2@r3") and not superseding.is_revision("bob@realm#2")


@postgres_only
def test_on_a_database_whose_collation_ignores_punctuation_session_scores_are_still_superseded(
    postgres: Cluster,
) -> None:
    """PostgreSQL orders text by the database's collation: under one that ignores punctuation (a glibc locale such
    as en_US.UTF-8, or ICU's ``ka-shifted``, used here as it needs no system locale) ``s#3`` sorts past ``s$``, so
    the key range ``[s#, s$)`` the first version read held no session score, and nothing was superseded. Sessions
    are matched by equality; a family's range (``[t, t@s)``) holds under that collation too."""
    name = f"shifted_{hex_id(4)}"
    with psycopg.connect(postgres.dsn("postgres"), autocommit=True) as conn:
        conn.execute(
            f"CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' LOCALE_PROVIDER icu "
            "ICU_LOCALE 'en-US-u-ka-shifted' LOCALE 'C.UTF-8'"
        )
    engine = make_engine(postgres.url(name))
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT 's#3' >= 's$'").scalar()  # the premise: past the range
        t = hex_id(16)
        rows = [_session_row("r1", "s", 1), _session_row("r1", "s", 2), _session_row("r1", "u", 4),
                _session_row("r1", "u", 5), _row("r1", t), _row("r1", f"{t}@r2")]  # fmt: skip
        with engine.begin() as conn:
            conn.execute(insert(OnlineScoreRow), rows)
            assert superseding.sessions(conn, [("r1", "s#2", WS, "s", 2), ("r1", "u#4", WS, "u", 4)]) == 2
            assert superseding.families(conn, [("r1", f"{t}@r2")]) == 1
        assert _superseded(engine, "r1") == {"s#1": "s#2", "s#2": None, "u#4": "u#5", "u#5": None, t: f"{t}@r2",
                                             f"{t}@r2": None}  # fmt: skip
    finally:
        engine.dispose()
