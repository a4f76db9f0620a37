"""Backfills in the store, on SQLite and PostgreSQL (issue 50): a dry run counts the traces of a range, the
rule's targets and those already scored; planning queues only what the rule missed, page by page with its
cursor, at most ``limit``; a backfill with a new revision scores every target again (``<target>@r<rev>``)
and the new score supersedes the old; a cancel drops what is still queued, and a later backfill queues
those again; two services planning one backfill queue each target once; a session-level rule's backfill
scores the stored sessions, each once at its current generation."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, insert

from evaluator_host.online.backfill.runs import dry_run, estimate_s
from evaluator_host.online.deciding.router import decide, join_sessions
from evaluator_host.store.db import utcnow
from evaluator_host.store.online import sessions as online_sessions
from evaluator_host.store.online.backfills import BackfillStore
from evaluator_host.store.online.routing import spans_of as routed_spans
from evaluator_host.store.online.rows import OnlineScoreRow
from evaluator_host.store.online.rules import RuleRecord, RuleStore
from evaluator_host.store.online.scores import ScoreQueue
from tests.support.online import WS, chat_trace, hex_id, put_trace, score_rows, span

EVERYTHING = (None, None)


def make_rule(store: RuleStore, **fields: Any) -> RuleRecord:
    base: dict[str, Any] = {"name": None, "revision": None, "filter": {}, "sampling_rate": 1.0, "mapping": None}
    return store.create(WS, "ev_1", {**base, "enabled": True, **fields})


def spans_of(queue: ScoreQueue) -> Any:
    return lambda conn, page: routed_spans(conn, page, bodies=True)


def plan(store: BackfillStore, queue: ScoreQueue, rule: RuleRecord, bf_id: str, me: str = "svc", page: int = 3) -> None:
    while True:
        held = store.claim(me, 30)
        if held is None or held.id != bf_id:
            return
        while store.plan_page(me, held, rule, page, decide, spans_of(queue), 10_000, joins=join_sessions):
            pass


def finish_all(queue: ScoreQueue, revision: int) -> None:
    while claimed := queue.claim("svc", 100, 30):
        queue.finish("svc", [(c.rule_id, c.target_id, {"status": "ok", "revision": revision}) for c in claimed])


def test_a_backfill_queues_what_the_rule_missed_and_a_new_revision_scores_everything_again(engine: Engine) -> None:
    rules, queue, store = RuleStore(engine), ScoreQueue(engine), BackfillStore(engine)
    before = [chat_trace(engine, state="routed") for _ in range(3)]  # routed before the rule existed
    rule = make_rule(rules)
    live = [chat_trace(engine) for _ in range(5)]
    queue.route(100, 10_000, decide)  # the rule scores these as they come
    chat_trace(engine, state="open")  # an open trace is not backfilled
    assert dry_run(queue, rule, 1, EVERYTHING, 1000) == (8, 8, 5)  # the 5 queued count as scored
    assert dry_run(queue, rule, 1, EVERYTHING, 2) == (2, 2, 0)  # oldest first, read up to 2 targets to score

    first = store.create(rule, EVERYTHING, 1000, 1, 3, 0)
    plan(store, queue, rule, first.id)
    done = store.get(WS, rule.id, first.id)
    assert (done.status, done.queued, done.total, done.skipped) == ("planned", 3, 3, 5)
    rows = score_rows(engine)
    assert sorted(r.target_id for r in rows if r.backfill_id == first.id) == sorted(before)
    finish_all(queue, 1)
    assert dry_run(queue, rule, 1, EVERYTHING, 1000) == (8, 8, 8)  # nothing left to score with revision 1
    again = store.create(rule, EVERYTHING, 1000, 1, 0, 0)
    plan(store, queue, rule, again.id)
    assert store.get(WS, rule.id, again.id).queued == 0

    newer = store.create(rule, EVERYTHING, 1000, 2, 8, 0)  # a new revision: every target again
    plan(store, queue, rule, newer.id)
    assert store.get(WS, rule.id, newer.id).queued == 8
    variants = sorted(r.target_id for r in score_rows(engine) if r.backfill_id == newer.id)
    assert variants == sorted(f"{t}@r2" for t in before + live)
    finish_all(queue, 2)
    by_target = {r.target_id: r.superseded_by for r in score_rows(engine)}
    assert all(by_target[t] == f"{t}@r2" and by_target[f"{t}@r2"] is None for t in before + live)
    assert dry_run(queue, rule, 2, EVERYTHING, 1000) == (8, 8, 8)


def test_a_backfills_limit_is_exact_even_inside_a_traces_spans(engine: Engine) -> None:
    rules, queue, store = RuleStore(engine), ScoreQueue(engine), BackfillStore(engine)
    for _ in range(4):
        chat_trace(engine, state="routed")  # 2 spans each
    rule = make_rule(rules, target={"level": "span"})
    assert dry_run(queue, rule, 1, EVERYTHING, 1000) == (4, 8, 0)
    bounded = store.create(rule, EVERYTHING, 3, 1, 3, 0)
    plan(store, queue, rule, bounded.id)
    assert len(score_rows(engine)) == 3 and store.get(WS, rule.id, bounded.id).status == "planned"
    assert all("/" in r.target_id for r in score_rows(engine))


def test_a_cancel_drops_the_queued_rows_and_a_later_backfill_queues_them_again(engine: Engine) -> None:
    rules, queue, store = RuleStore(engine), ScoreQueue(engine), BackfillStore(engine)
    traces = [chat_trace(engine, state="routed") for _ in range(4)]
    rule = make_rule(rules)
    first = store.create(rule, EVERYTHING, 1000, 1, 4, 0)
    plan(store, queue, rule, first.id)
    (held,) = queue.claim("svc", 1, 30)  # one is being scored when the cancel comes
    cancelled = store.cancel(WS, rule.id, first.id)
    assert cancelled.status == "cancelled" and store.progress(first.id) == {"dropped": 3, "running": 1}
    assert {r.status for r in score_rows(engine) if r.state == "dropped"} == {"cancelled"}
    assert store.claim("svc", 30) is None  # nothing more is planned
    queue.finish("svc", [(held.rule_id, held.target_id, {"status": "ok", "revision": 1})])
    later = store.create(rule, EVERYTHING, 1000, 1, 3, 0)
    plan(store, queue, rule, later.id)
    assert store.progress(later.id) == {"queued": 3} and store.get(WS, rule.id, later.id).skipped == 1
    assert sorted(r.target_id for r in score_rows(engine)) == sorted(traces)  # the same rows, queued again


def test_two_services_planning_one_backfill_queue_each_target_once(engine: Engine) -> None:
    rules, store = RuleStore(engine), BackfillStore(engine)
    traces = [chat_trace(engine, state="routed") for _ in range(60)]
    rule = make_rule(rules)
    backfill = store.create(rule, EVERYTHING, 1000, 1, 60, 0)
    errors: list[BaseException] = []

    def run(me: str) -> None:
        try:
            queue = ScoreQueue(engine)
            for _ in range(100):
                held = store.claim(me, 0.05)  # short claims: the two take the backfill over from each other
                if held is not None:
                    store.plan_page(me, held, rule, 2, decide, spans_of(queue), 10_000, 0.05)
                if store.get(WS, rule.id, backfill.id).status == "planned":
                    return
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(me,)) for me in ("svc_a", "svc_b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    assert store.get(WS, rule.id, backfill.id).status == "planned"
    targets = [r.target_id for r in score_rows(engine)]
    assert len(targets) == 60 and set(targets) == set(traces)


def test_a_session_level_backfill_scores_the_stored_sessions_once_and_a_new_revision_supersedes(
    engine: Engine,
) -> None:
    rules, queue, store = RuleStore(engine), ScoreQueue(engine), BackfillStore(engine)
    for attributes in ({"session.id": "conv-a"}, {"session.id": "conv-a"}, {"session.id": "conv-b"}, {}):
        root = span(hex_id(16), "turn")
        put_trace(engine, [root, span(root.trace_id, "llm", parent=root.span_id, attributes=attributes)])
    while queue.route(100, 10_000, decide, sessions=join_sessions).traces:  # routed before any session rule
        pass
    rule = make_rule(rules, target={"level": "session", "quiet_s": 5})
    assert dry_run(queue, rule, 1, EVERYTHING, 1000) == (2, 2, 0)  # two sessions read, both targets

    first = store.create(rule, EVERYTHING, 1000, 1, 2, 0)
    plan(store, queue, rule, first.id)
    rows = {r.target_id: r for r in score_rows(engine) if r.backfill_id == first.id}
    assert set(rows) == {"conv-a#2", "conv-b#1"}
    assert {(r.session_id, r.generation) for r in rows.values()} == {("conv-a", 2), ("conv-b", 1)}
    finish_all(queue, 1)
    assert dry_run(queue, rule, 1, EVERYTHING, 1000) == (2, 2, 2)  # scored with revision 1: skipped
    again = store.create(rule, EVERYTHING, 1000, 1, 0, 0)
    plan(store, queue, rule, again.id)
    assert store.get(WS, rule.id, again.id).queued == 0 and store.get(WS, rule.id, again.id).skipped == 2

    newer = store.create(rule, EVERYTHING, 1000, 2, 2, 0)  # a new revision: every session again
    plan(store, queue, rule, newer.id)
    assert sorted(r.target_id for r in score_rows(engine) if r.backfill_id == newer.id) == [
        "conv-a#2@r2",
        "conv-b#1@r2",
    ]
    finish_all(queue, 2)
    by_target = {r.target_id: r.superseded_by for r in score_rows(engine)}
    assert by_target == {
        "conv-a#2": "conv-a#2@r2",
        "conv-b#1": "conv-b#1@r2",
        "conv-a#2@r2": None,
        "conv-b#1@r2": None,
    }

    keyed_rule = make_rule(rules, target={"level": "session", "session_key": "app.thread", "quiet_s": 5})
    assert dry_run(queue, keyed_rule, 1, EVERYTHING, 1000) == (2, 0, 0)  # no stored session under its own key


def test_the_scores_of_a_pages_thousand_targets_rescored_with_a_new_revision_supersede_their_earlier_ones(
    engine: Engine,
) -> None:
    """A direct backfill's page stores 1,000 scores at once: what they replace is found a few keys a statement (an OR
    of every key was a statement SQLite refused past ~500), each family in its primary key's range."""
    rule = make_rule(RuleStore(engine))
    ids = [hex_id(16) for _ in range(1_200)]
    now = utcnow()

    def row(target: str, revision: int, me: str) -> dict[str, Any]:
        return {"rule_id": rule.id, "target_id": target, "trace_id": target[:32], "workspace_id": WS, "state": "done",
                "status": "ok", "attempts": 1, "enqueued_at": now, "evaluator_id": "ev_1", "revision": revision,
                "claimed_by": me}  # fmt: skip

    first = ids[0]
    neighbour = first[:-1] + ("1" if first[-1] == "0" else "0")  # another trace's id, next to the first's
    others = [f"{first}/00000000000000aa", neighbour]  # in the first family's key range, or beside it: not its own
    with engine.begin() as conn:
        conn.execute(insert(OnlineScoreRow), [row(t, 1, "old") for t in ids] + [row(t, 1, "old") for t in others])
        conn.execute(insert(OnlineScoreRow), [row(f"{t}@r2", 2, "svc") for t in ids])
        online_sessions.supersede(conn, "svc", [(rule.id, f"{t}@r2") for t in ids])
    rows = {r.target_id: r for r in score_rows(engine)}
    assert all(rows[t].superseded_by == f"{t}@r2" and rows[f"{t}@r2"].superseded_by is None for t in ids)
    assert [rows[t].superseded_by for t in others] == [None, None]


def test_a_dry_runs_estimate_is_at_least_the_pace_of_the_rules_latest_backfill(engine: Engine) -> None:
    """A fast evaluator's duration leaves out the service's work around each target: once the rule's latest backfill
    scored 100 targets, its pace to its 90th percentile score bounds the estimate (5,000 sessions were estimated
    0.014 s and took 14 s); a stalled tail does not."""
    rule = make_rule(RuleStore(engine))
    store = BackfillStore(engine)
    assert estimate_s(engine, rule, 1_000, 4, None) == 2.5  # nothing scored yet: 10 ms a target, 4 at once
    backfill = store.create(rule, EVERYTHING, 10_000, 1, 200, 0)
    created = store.get(WS, rule.id, backfill.id).created_at

    def rows(n: int, first: int) -> list[dict[str, Any]]:
        return [{"rule_id": rule.id, "target_id": hex_id(16), "trace_id": hex_id(16), "workspace_id": WS,
                 "state": "done", "status": "ok", "attempts": 1, "enqueued_at": created, "evaluator_id": "ev_1",
                 "revision": 1, "duration_ms": 1.0, "backfill_id": backfill.id,
                 "scored_at": created + timedelta(seconds=(first + i + 1) / 10)} for i in range(n)]  # fmt: skip

    with engine.begin() as conn:
        conn.execute(insert(OnlineScoreRow), rows(99, 0))  # 10 targets a second, but too few to tell
    assert estimate_s(engine, rule, 1_000, 4, None) == 0.25  # 1 ms each, 4 at once
    with engine.begin() as conn:
        conn.execute(insert(OnlineScoreRow), rows(101, 99))  # 200 done in 20 s
    assert estimate_s(engine, rule, 1_000, 4, None) == pytest.approx(100.0)
    assert estimate_s(engine, rule, 1_000, 4, 1.0) == pytest.approx(1_000.0)  # the workspace's rate: slower still
    stalled = rows(10, 36_000)  # a tail retried an hour later: not the pace (it is measured to the 90th percentile)
    with engine.begin() as conn:
        conn.execute(insert(OnlineScoreRow), stalled)
    assert estimate_s(engine, rule, 1_000, 4, None) == pytest.approx(100.0)
