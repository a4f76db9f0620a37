"""The planner's statistics brought up to date before a backfill's set-based statements (``store/pg_statistics.py``),
on a real PostgreSQL server: a table grown past what its statistics know is analyzed, a trickle of changes is not;
a table another session is analyzing is skipped without an error; nothing is done on SQLite. And the statements
that relied on fresh statistics do bounded work whatever the statistics say: a re-run of cached targets reads the
rule's score rows a bounded number of times (its INSERT once read, for each trace, every row it had added: 25
million rows rejected for 5,000 targets, docs/benchmarks.md, issue 50)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, insert, text

from evaluator_host.store import pg_statistics
from evaluator_host.store.db import make_engine, utcnow
from evaluator_host.store.online.backfills import BackfillStore
from evaluator_host.store.online.case_hashes import resolve_cached
from evaluator_host.store.online.rows import OnlineScoreRow
from evaluator_host.store.online.rules import RuleStore
from evaluator_host.store.result_cache import ResultCacheStore
from tests.support.backends import postgres_only
from tests.support.case_hashes import CAP, EVERYTHING, SCOPE, make_rule, scored_before
from tests.support.online import WS, chat_spans, put_traces, score_rows
from tests.support.pg import Cluster
from tests.support.wait import wait_until

pytestmark = postgres_only


@pytest.fixture
def url(postgres: Cluster) -> str:
    return postgres.database()


@pytest.fixture
def engine(url: str) -> Iterator[Engine]:
    made = _engine(url, "evh-stats-setup")
    yield made
    made.dispose()


@pytest.fixture
def observer(url: str) -> Iterator[Engine]:
    """Another engine, that reads the server's statistics and who is connected."""
    made = _engine(url, "evh-stats-observer")
    yield made
    made.dispose()


def _engine(url: str, name: str) -> Engine:
    """An engine whose sessions are named ``name`` (``pg_stat_activity.application_name``)."""
    return make_engine(f"{url}&application_name={name}")


def _flushed(engine: Engine) -> None:
    """This engine's sessions' table statistics written to the server's (the next transaction end flushes them)."""
    engine.dispose()  # a session's pending statistics are flushed when it ends


def _gone(engine: Engine, name: str) -> None:
    """Wait until no session named ``name`` is left (their statistics flushed as they ended)."""

    def none_left() -> bool:
        with engine.connect() as conn:
            query = text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :n")
            return not conn.scalar(query, {"n": name})

    wait_until(none_left, 30, what=f"the sessions named {name} to end")


def _cache_rows(engine: Engine, n: int, tag: str) -> None:
    entries = [(hashlib.sha256(f"{tag} {i}".encode()).digest(), "ok", '{"status":"ok"}') for i in range(n)]
    ResultCacheStore(engine).put(WS, entries, 10_000_000)


def _analyzed(engine: Engine, table: str) -> int:
    with engine.connect() as conn:
        query = "SELECT analyze_count + autoanalyze_count FROM pg_stat_user_tables WHERE relid = to_regclass(:t)"
        return int(conn.scalar(text(query), {"t": table}) or 0)


def test_a_table_grown_past_what_its_statistics_know_is_analyzed_and_a_trickle_is_not(url: str, engine: Engine) -> None:
    writer = _engine(url, "evh-stats-writer")
    _cache_rows(writer, 1500, "first")
    _flushed(writer)
    _gone(engine, "evh-stats-writer")
    wait_until(lambda: pg_statistics.stale(engine, ["result_cache", "online_scores"]) == ["result_cache"], 30)
    before = _analyzed(engine, "result_cache")
    assert pg_statistics.refresh(engine, ["result_cache", "online_scores"]) == ["result_cache"]  # the empty one: not
    assert _analyzed(engine, "result_cache") == before + 1
    with engine.connect() as conn:
        assert conn.scalar(text("SELECT reltuples FROM pg_class WHERE oid = to_regclass('result_cache')")) == 1500
    assert pg_statistics.stale(engine, ["result_cache"]) == []

    writer = _engine(url, "evh-stats-writer")
    _cache_rows(writer, 900, "trickle")  # fewer than STALE_MIN_ROWS changes: left to autovacuum
    _flushed(writer)
    _gone(engine, "evh-stats-writer")
    time.sleep(0.2)  # (nothing to wait for: the statistics must stay unrefreshed)
    assert pg_statistics.refresh(engine, ["result_cache"]) == []


def test_a_table_another_session_is_analyzing_is_skipped_without_an_error(url: str, engine: Engine) -> None:
    with engine.connect() as other:
        other.execute(text("LOCK TABLE result_cache IN SHARE UPDATE EXCLUSIVE MODE"))  # what ANALYZE takes
        assert pg_statistics.analyze(engine, ["result_cache"]) == []  # after the lock timeout, not an error
        other.rollback()
    assert pg_statistics.analyze(engine, ["result_cache"]) == ["result_cache"]


def test_nothing_is_done_on_sqlite(tmp_path: Path) -> None:
    lite = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    _cache_rows(lite, 1500, "lite")
    assert pg_statistics.stale(lite, ["result_cache"]) == []
    assert pg_statistics.analyze(lite, ["result_cache"]) == []
    lite.dispose()


def _score_index_reads(engine: Engine) -> int:
    """Index entries read from ``online_scores``'s indexes so far (the server's statistics)."""
    query = "SELECT coalesce(sum(idx_tup_read), 0) FROM pg_stat_user_indexes WHERE relid = to_regclass('online_scores')"
    with engine.connect() as conn:
        return int(conn.scalar(text(query)) or 0)


def _settled(engine: Engine) -> int:
    """:func:`_score_index_reads` once two reads agree (a session's statistics arrive as it ends)."""
    seen: list[int] = []

    def same() -> Any:
        seen.append(_score_index_reads(engine))
        return len(seen) > 2 and seen[-1] == seen[-2] and seen[-1]

    wait_until(lambda: same() is not False, 30, 0.1)
    return seen[-1]


def _done(rule_id: str, trace_id: str) -> dict[str, Any]:
    return {"rule_id": rule_id, "target_id": trace_id, "trace_id": trace_id, "workspace_id": WS, "state": "done",
            "status": "ok", "attempts": 1, "enqueued_at": utcnow(), "evaluator_id": "ev_1", "revision": 1}  # fmt: skip


def test_a_rerun_of_many_cached_targets_reads_the_rules_score_rows_a_bounded_number_of_times(
    url: str, engine: Engine, observer: Engine
) -> None:
    n = 1200
    traces = put_traces(engine, [chat_spans(f"q{i}", "4") for i in range(n)], state="routed")
    scored_before(engine, traces)
    earlier = make_rule(RuleStore(engine))  # the rule of the backfill that left the case keys: its scores stored,
    with engine.begin() as conn:  # and the statistics of the table taken then (autovacuum's, or a refresh's)
        conn.execute(insert(OnlineScoreRow), [_done(earlier.id, t) for t in traces])
    assert pg_statistics.analyze(engine, ["online_scores"]) == ["online_scores"]
    rule = make_rule(RuleStore(engine))  # a new rule on the same evaluator: the statistics know none of its rows
    store = BackfillStore(engine)
    store.create(rule, EVERYTHING, 10 * n, 1, n, 0)
    claimed = store.claim("svc", 30)
    assert claimed is not None
    _flushed(engine)
    _gone(observer, "evh-stats-setup")
    before = _settled(observer)

    resolver = _engine(url, "evh-stats-resolve")
    assert resolve_cached(resolver, "svc", claimed, rule, SCOPE, CAP, time.time()) == n
    _flushed(resolver)
    _gone(observer, "evh-stats-resolve")
    read = _settled(observer) - before
    assert len([r for r in score_rows(engine) if r.rule_id == rule.id]) == n
    assert read <= 10 * n, f"{read} index entries of online_scores read to answer {n} targets"
