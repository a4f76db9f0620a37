"""A backfill page's case key and retention deleting its trace at the same time (issue 50, migration
``0027_case_hashes_generation``): the key carries the trace's generation (its ``first_seen_at`` as the page read
it), so a key left by the race — written by a page whose check for its trace ran while retention's transaction,
its trace deleted and its keys forgotten, was still open (PostgreSQL's READ COMMITTED: neither statement sees the
other's uncommitted row), or built from a trace swept and sent again before the page was stored (SQLite too) —
never answers a trace sent again under that id: the trace is read and scored fresh by the pages, and its new key
replaces the dead one. The interleaving is driven, not waited for: retention is held between its delete and its
commit while the page is stored on a second connection."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, select

from evaluator_host.online.deciding.router import decide
from evaluator_host.store.db import make_engine, utcnow
from evaluator_host.store.online import case_hashes as online_case_hashes
from evaluator_host.store.online.backfill_pages import Page, commit_page, read_page
from evaluator_host.store.online.backfills import BackfillStore
from evaluator_host.store.online.case_hashes import CaseHashRow, resolve_cached
from evaluator_host.store.online.rules import RuleRecord, RuleStore
from evaluator_host.store.online.spans import OnlineSpanStore
from tests.support.backends import postgres_only
from tests.support.case_hashes import (
    CAP,
    EVERYTHING,
    RETENTION,
    SCOPE,
    age,
    cache_answers,
    make_rule,
    orphans,
    page_hashes,
    spans_of,
)
from tests.support.online import WS, chat_trace, put_trace, score_rows, span
from tests.support.pg import Cluster

WAIT_S = 60.0  # a guard on each wait for the other side (never reached when the code is right)


@pytest.fixture
def pg_engine(postgres: Cluster) -> Iterator[Engine]:
    made = make_engine(postgres.database())
    yield made
    made.dispose()


@dataclass
class Sweep:
    """What the held sweep returned (spans, traces), or raised."""

    result: tuple[int, int] | None = None
    error: BaseException | None = None


@contextmanager
def held_sweep(monkeypatch: pytest.MonkeyPatch, engine: Engine) -> Iterator[Sweep]:
    """Run retention's sweep on a thread of its own and hold it after its chunk's ``DELETE`` of the expired traces
    and the ``forget`` of their case keys, before its ``COMMIT``, for the body of the ``with``; then let it commit."""
    deleted, go, out = threading.Event(), threading.Event(), Sweep()
    forget = online_case_hashes.forget

    def hold(conn: Connection, traces: Any) -> int:
        gone = forget(conn, traces)
        if traces:
            deleted.set()
            if not go.wait(WAIT_S):
                raise TimeoutError("the test never let the sweep commit")
        return gone

    def run() -> None:
        try:
            out.result = OnlineSpanStore(engine).sweep(datetime.now(UTC) - RETENTION)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            out.error = exc
        finally:
            deleted.set()

    monkeypatch.setattr(online_case_hashes, "forget", hold)
    thread = threading.Thread(target=run, name="retention")
    thread.start()
    try:
        assert deleted.wait(WAIT_S), "the sweep never reached its delete"
        assert out.error is None and out.result is None, out.error  # held inside its transaction
        yield out
    finally:
        go.set()
        thread.join(WAIT_S)
        monkeypatch.setattr(online_case_hashes, "forget", forget)
    assert not thread.is_alive() and out.error is None, out.error


def scored(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every new row of a page scored ``ok`` 0.5 by revision 1."""
    return {r["target_id"]: {"status": "ok", "score": 0.5, "revision": 1, "scored_at": utcnow()} for r in rows}


def earlier_page(
    engine: Engine, rules: RuleStore, store: BackfillStore, traces: set[str]
) -> tuple[RuleRecord, Any, Page]:
    """An earlier rule's backfill, held by ``svc``, and its first page, read (every one of ``traces``)."""
    rule = make_rule(rules)
    store.create(rule, EVERYTHING, 1000, 1, len(traces), 0)
    held = store.claim("svc", 30)
    assert held is not None
    page = read_page(engine, "svc", held, rule, 100, decide, spans_of, 10_000)
    assert page is not None and {r["target_id"] for r in page.got.rows} == traces
    cache_answers(engine, sorted(traces))  # the page ran them: their answers in the result cache
    return rule, held, page


def send_again(engine: Engine, trace_id: str) -> None:
    """A new trace under ``trace_id``: other content, the same span count (2) as the swept one had."""
    root = span(trace_id, "chat", attributes={"ag.data.inputs": {"q": "3+3?"}, "ag.data.outputs": "7"})
    put_trace(engine, [root, span(trace_id, "llm", parent=root.span_id)], state="routed")


def backfill_again(engine: Engine, rules: RuleStore, store: BackfillStore, swept: str, kept: str) -> None:
    """A new rule of the same evaluator revision and mapping (the same scope) backfills: the kept trace is answered
    from the cache; the trace sent again under the swept id is read and scored fresh, and its key replaces the dead
    one."""
    rule = make_rule(rules)
    backfill = store.create(rule, EVERYTHING, 1000, 1, 2, 0)
    claimed = store.claim("svc", 30)
    assert claimed is not None and claimed.id == backfill.id
    assert resolve_cached(engine, "svc", claimed, rule, SCOPE, CAP, time.time()) == 1
    assert {r.target_id for r in score_rows(engine) if r.backfill_id == backfill.id} == {kept}
    got = store.get(WS, rule.id, backfill.id)
    page = read_page(engine, "svc", got, rule, 100, decide, spans_of, 10_000)
    assert page is not None
    assert [r["target_id"] for r in page.got.rows] == [swept]  # read, assembled and run: scored fresh
    assert (page.got.targets, page.got.already_scored) == (1, 0)
    assert commit_page(engine, "svc", got, rule, page, scored(page.got.rows), {}, 30, page_hashes(page)) is not None
    assert orphans(engine) == 0  # the new trace's key replaced the dead one
    with engine.connect() as conn:
        assert sorted(conn.execute(select(CaseHashRow.target_id)).scalars()) == sorted([swept, kept])


@postgres_only
def test_a_case_key_a_page_stores_while_retention_deletes_its_trace_never_answers_the_trace_sent_again(
    pg_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = pg_engine
    swept, kept = chat_trace(engine, "2+2?", "4", state="routed"), chat_trace(engine, state="routed")
    age(engine, swept)
    rules, store = RuleStore(engine), BackfillStore(engine)
    rule, held, page = earlier_page(engine, rules, store, {swept, kept})

    with held_sweep(monkeypatch, engine) as sweep:  # retention: swept's trace deleted, its keys forgotten, open
        # the page stored on another connection meanwhile: it sees swept's trace (the delete is not committed)
        stored = commit_page(engine, "svc", held, rule, page, scored(page.got.rows), {}, 30, page_hashes(page))
        assert stored is not None and stored[0] == {swept, kept}
    assert sweep.result == (2, 1)
    assert orphans(engine) == 1  # the race's row: its trace gone, written after retention looked

    send_again(engine, swept)
    backfill_again(engine, rules, store, swept, kept)


def test_a_case_key_of_a_trace_swept_and_sent_again_while_its_page_was_scored_never_answers_the_new_trace(
    engine: Engine,
) -> None:
    swept, kept = chat_trace(engine, "2+2?", "4", state="routed"), chat_trace(engine, state="routed")
    age(engine, swept)
    rules, store = RuleStore(engine), BackfillStore(engine)
    rule, held, page = earlier_page(engine, rules, store, {swept, kept})
    assert OnlineSpanStore(engine).sweep(datetime.now(UTC) - RETENTION) == (2, 1)  # while the page was scored
    send_again(engine, swept)  # and the id sent again before the page was stored: a trace is there again

    stored = commit_page(engine, "svc", held, rule, page, scored(page.got.rows), {}, 30, page_hashes(page))
    assert stored is not None

    backfill_again(engine, rules, store, swept, kept)
