"""The review tables (issue 53) on SQLite and PostgreSQL: verdicts given at once on one item leave exactly one
current and every one in the history; fills running at once never put a queue past its limit nor an item in
twice; the scorer's hook never raises into scoring; migration 0018_review_queues goes down and up again."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Engine, insert, select

from evaluator_host.store import schema
from evaluator_host.store.db import make_engine, utcnow
from evaluator_host.store.online.rows import OnlineScoreRow
from evaluator_host.store.review import fill as review_fill
from evaluator_host.store.review.items import ReviewItemStore
from evaluator_host.store.review.queues import ReviewQueueStore
from evaluator_host.store.review.rows import ReviewItemRow, ReviewVerdictRow

WS = "ws_default"


def _scores(engine: Engine, rule_id: str, n: int) -> None:
    now = utcnow()
    rows = [
        {
            "rule_id": rule_id, "target_id": f"{i:032x}", "trace_id": f"{i:032x}", "workspace_id": WS,
            "state": "done", "attempts": 1, "enqueued_at": now, "scored_at": now + timedelta(milliseconds=i),
            "evaluator_id": "ev_1", "revision": 1, "status": "ok", "score": i / n, "passed": i % 3 == 0,
            "result": '{"reason": "because"}',
        }
        for i in range(n)
    ]  # fmt: skip
    with engine.begin() as conn:
        conn.execute(insert(OnlineScoreRow), rows)


def _run_together(n: int, work: Any) -> list[BaseException]:
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def one(k: int) -> None:
        start.wait()
        try:
            work(k)
        except BaseException as exc:  # noqa: BLE001 - collected, asserted below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_verdicts_at_once_leave_one_current_and_keep_every_one(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        _scores(engine, "rule_a", 5)
        queue = ReviewQueueStore(engine).create(
            WS, name="q", evaluator_id="ev_1", rule_id="rule_a", job_id=None, selection=None, sample=1.0, max_items=5
        )
        assert review_fill.from_rule(engine, queue) == 5
        items = ReviewItemStore(engine)
        item = items.items(WS, queue.id)[0]
        assert item.reason == "because" and item.score == 0.0

        def give(k: int) -> None:
            items.give(
                WS, queue.id, item.id, passed=k % 2 == 0, score=None, label=None, note=f"n{k}", reviewer=None,
                snapshot={"inputs": {"k": k}, "outputs": None, "trace": None},
            )  # fmt: skip

        assert _run_together(6, give) == []
        history = items.history(WS, queue.id, item.id)
        assert len(history) == 6 and sum(v.current for v in history) == 1
        with engine.connect() as conn:
            current = conn.execute(
                select(ReviewVerdictRow.id).where(
                    ReviewVerdictRow.item_id == item.id, ReviewVerdictRow.replaced_at.is_(None)
                )
            ).all()
        assert len(current) == 1 and items.item(WS, queue.id, item.id).verdict is not None
        assert items.item(WS, queue.id, item.id).snapshot is not None  # the first verdict's case is kept
    finally:
        engine.dispose()


def test_fills_at_once_never_pass_the_limit_nor_take_an_item_twice(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        _scores(engine, "rule_b", 60)
        queue = ReviewQueueStore(engine).create(
            WS, name="q", evaluator_id="ev_1", rule_id="rule_b", job_id=None, selection=None, sample=1.0, max_items=25
        )
        keys = [("rule_b", f"{i:032x}") for i in range(60)]
        halves = [keys[:40], keys[20:]]
        errors = _run_together(4, lambda k: review_fill.admit_scores(engine, halves[k % 2]))
        errors += _run_together(2, lambda k: review_fill.from_rule(engine, queue))
        assert errors == []
        with engine.connect() as conn:
            held = conn.execute(select(ReviewItemRow.source_key).where(ReviewItemRow.queue_id == queue.id)).all()
        assert len(held) == 25 and len({k for (k,) in held}) == 25
    finally:
        engine.dispose()


def test_hooks_at_once_on_a_rule_with_two_queues_fill_both_and_fail_none(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(database_url)
    try:
        _scores(engine, "rule_e", 60)
        store = ReviewQueueStore(engine)
        made = [
            store.create(WS, name=n, evaluator_id="ev_1", rule_id="rule_e", job_id=None, selection=None, sample=1.0,
                         max_items=100)
            for n in ("one", "two")
        ]  # fmt: skip
        keys = [("rule_e", f"{i:032x}") for i in range(60)]
        with caplog.at_level(logging.ERROR, logger="evaluator_host.store.review.fill"):
            assert _run_together(6, lambda k: review_fill.admit_scores(engine, keys[::-1] if k % 2 else keys)) == []
        assert [r.getMessage() for r in caplog.records] == []  # no hook failed (a deadlock would be logged here)
        assert [store.get(WS, q.id).items for q in made] == [60, 60]
    finally:
        engine.dispose()


def test_the_scorers_hook_never_raises_into_scoring(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        ReviewQueueStore(engine).create(
            WS, name="q", evaluator_id="ev_1", rule_id="rule_c", job_id=None, selection=None, sample=1.0, max_items=5
        )
        engine.dispose()
        broken = make_engine(database_url)
        with broken.begin() as conn:
            conn.exec_driver_sql("DROP TABLE review_items")  # the hook's insert fails
        assert review_fill.admit_scores(broken, [("rule_c", "a" * 32)]) == 0
        assert review_fill.admit_scores(broken, []) == 0
        broken.dispose()
    finally:
        engine.dispose()


def test_migration_0018_goes_down_and_up_again(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        ReviewQueueStore(engine).create(
            WS, name="q", evaluator_id="ev_1", rule_id="rule_d", job_id=None, selection=None, sample=1.0, max_items=5
        )
        with engine.begin() as conn:
            below = schema._scripts().get_revision("0018_review_queues").down_revision  # whatever it follows
            command.downgrade(schema._config(conn), str(below))
            assert not conn.dialect.has_table(conn, "review_queues")
            command.upgrade(schema._config(conn), "head")
            assert conn.dialect.has_table(conn, "review_verdicts")
        assert ReviewQueueStore(engine).list_all(WS) == []
    finally:
        engine.dispose()
