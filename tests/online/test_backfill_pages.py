"""A backfill's page scored by its planner (the fast path), in the store, on SQLite and PostgreSQL (issue 50): a
page read and scored is stored in one transaction pinned on the backfill's cursor — so a page two holders read
is stored once, a page read before a cancel is stored never, a target routing queued meanwhile keeps routing's
row (each target once), a page read ahead is stored only after the page before it and within the limit — and
what the planner did not score now is queued for the scorer with its delay."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import Engine, insert

from evaluator_host.online.deciding.router import decide
from evaluator_host.store.db import utcnow
from evaluator_host.store.online.backfill_pages import commit_page, read_page
from evaluator_host.store.online.backfills import BackfillStore
from evaluator_host.store.online.routing import spans_of as routed_spans
from evaluator_host.store.online.rows import OnlineScoreRow
from evaluator_host.store.online.rules import RuleRecord, RuleStore
from tests.support.online import WS, chat_trace, score_rows

EVERYTHING = (None, None)


def make_rule(store: RuleStore, **fields: Any) -> RuleRecord:
    base: dict[str, Any] = {"name": None, "revision": None, "filter": {}, "sampling_rate": 1.0, "mapping": None}
    return store.create(WS, "ev_1", {**base, "enabled": True, **fields})


def spans_of(conn: Any, page: Any) -> Any:
    return routed_spans(conn, page, bodies=True)


def scored(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every new row of a page scored ``ok`` 1.0 by revision 1."""
    return {r["target_id"]: {"status": "ok", "score": 1.0, "revision": 1, "scored_at": utcnow()} for r in rows}


def test_a_page_two_holders_read_is_stored_once_and_the_next_page_follows_the_cursor(engine: Engine) -> None:
    rules, store = RuleStore(engine), BackfillStore(engine)
    traces = [chat_trace(engine, state="routed") for _ in range(5)]
    rule = make_rule(rules)
    backfill = store.create(rule, EVERYTHING, 1000, 1, 5, 0)
    held = store.claim("svc", 30)
    assert held is not None
    first = read_page(engine, "svc", held, rule, 3, decide, spans_of, 10_000)
    twice = read_page(engine, "svc", held, rule, 3, decide, spans_of, 10_000)  # a second holder's read
    assert first is not None and twice is not None and len(first.got.rows) == 3
    stored = commit_page(engine, "svc", held, rule, first, scored(first.got.rows), {}, 30)
    assert stored is not None and len(stored[0]) == 3 and stored[1] is False  # more to plan
    assert commit_page(engine, "svc", held, rule, twice, scored(twice.got.rows), {}, 30) is None  # cursor moved
    assert len(score_rows(engine)) == 3

    rest = read_page(engine, "svc", held, rule, 3, decide, spans_of, 10_000)
    assert rest is not None and len(rest.got.rows) == 2
    stored = commit_page(engine, "svc", held, rule, rest, scored(rest.got.rows), {}, 30)
    assert stored is not None and stored[1] is True  # planning ended
    rows = score_rows(engine)
    assert sorted(r.target_id for r in rows) == sorted(traces)  # each target once
    assert {(r.state, r.status, r.claimed_by, r.backfill_id) for r in rows} == {("done", "ok", "svc", backfill.id)}
    done = store.get(WS, rule.id, backfill.id)
    assert (done.status, done.queued, done.total, done.skipped) == ("planned", 5, 5, 0)
    assert store.progress(backfill.id) == {"done": 5}


def test_a_page_read_before_a_cancel_or_by_a_holder_that_lost_its_claim_is_never_stored(engine: Engine) -> None:
    rules, store = RuleStore(engine), BackfillStore(engine)
    for _ in range(3):
        chat_trace(engine, state="routed")
    rule = make_rule(rules)
    backfill = store.create(rule, EVERYTHING, 1000, 1, 3, 0)
    held = store.claim("svc_a", 30)
    assert held is not None
    page = read_page(engine, "svc_a", held, rule, 10, decide, spans_of, 10_000)
    assert page is not None
    store.release_own("svc_a")  # its claim gone (a restart): another service may hold it now
    assert commit_page(engine, "svc_a", held, rule, page, scored(page.got.rows), {}, 30) is None
    again = store.claim("svc_a", 30)
    assert again is not None
    page = read_page(engine, "svc_a", again, rule, 10, decide, spans_of, 10_000)
    assert page is not None
    store.cancel(WS, rule.id, backfill.id)
    assert commit_page(engine, "svc_a", again, rule, page, scored(page.got.rows), {}, 30) is None
    assert read_page(engine, "svc_a", again, rule, 10, decide, spans_of, 10_000) is None
    assert score_rows(engine) == [] and store.get(WS, rule.id, backfill.id).status == "cancelled"


def test_routings_row_for_a_target_wins_and_unscored_targets_are_queued_with_their_delay(engine: Engine) -> None:
    rules, store = RuleStore(engine), BackfillStore(engine)
    routed, paced, plain = (chat_trace(engine, state="routed") for _ in range(3))
    rule = make_rule(rules)
    backfill = store.create(rule, EVERYTHING, 1000, 1, 3, 0)
    held = store.claim("svc", 30)
    assert held is not None
    page = read_page(engine, "svc", held, rule, 10, decide, spans_of, 10_000)
    assert page is not None and len(page.got.rows) == 3
    with engine.begin() as conn:  # routing queued one of them meanwhile (its trace was ready)
        conn.execute(
            insert(OnlineScoreRow),
            [{"rule_id": rule.id, "target_id": routed, "trace_id": routed, "workspace_id": WS, "state": "queued",
              "attempts": 0, "enqueued_at": utcnow(), "evaluator_id": "ev_1"}],
        )  # fmt: skip
    later = utcnow() + timedelta(seconds=30)
    waiting = {paced: {"claimed_until": later, "delayed_by": "max_evaluations_per_s"}}
    everything = scored([r for r in page.got.rows if r["target_id"] == routed])  # routing's row wins for it
    stored = commit_page(engine, "svc", held, rule, page, everything, waiting, 30)
    assert stored is not None and stored[0] == {paced, plain}
    rows = {r.target_id: r for r in score_rows(engine)}
    assert len(rows) == 3 and rows[routed].state == "queued" and rows[routed].backfill_id is None
    assert (rows[paced].state, rows[paced].delayed_by, rows[paced].backfill_id) == (
        "queued",
        "max_evaluations_per_s",
        backfill.id,
    )
    assert rows[plain].state == "queued" and rows[plain].claimed_until is None  # the scorer takes it now
    done = store.get(WS, rule.id, backfill.id)
    assert (done.queued, done.skipped) == (2, 1)  # routing's target counts as scored elsewhere


def test_a_page_read_ahead_is_stored_only_after_the_page_before_it_and_within_the_limit(engine: Engine) -> None:
    rules, store = RuleStore(engine), BackfillStore(engine)
    traces = [chat_trace(engine, state="routed") for _ in range(5)]
    rule = make_rule(rules)
    backfill = store.create(rule, EVERYTHING, 4, 1, 4, 0)  # a limit of 4 targets
    held = store.claim("svc", 30)
    assert held is not None
    first = read_page(engine, "svc", held, rule, 3, decide, spans_of, 10_000)
    assert first is not None
    ahead = read_page(engine, "svc", held, rule, 3, decide, spans_of, 10_000, first, first.got.queued)
    assert ahead is not None and len(ahead.got.rows) == 1  # the limit counts the page not stored yet
    assert commit_page(engine, "svc", held, rule, ahead, scored(ahead.got.rows), {}, 30) is None  # not before it
    assert commit_page(engine, "svc", held, rule, first, scored(first.got.rows), {}, 30) is not None
    stored = commit_page(engine, "svc", held, rule, ahead, scored(ahead.got.rows), {}, 30)
    assert stored is not None and stored[1] is True  # the limit reached: planning ended
    assert sorted(r.target_id for r in score_rows(engine)) == sorted(traces[:4])
    done = store.get(WS, rule.id, backfill.id)
    assert (done.status, done.queued, done.total) == ("planned", 4, 4)
