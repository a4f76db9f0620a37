"""Routing ready traces into the scoring queue, on SQLite and PostgreSQL: filters on spans, the
evaluated span, deterministic sampling, paused and deleted rules, the drop policy at the backlog
bound, and two routers on one database routing each trace once."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from sqlalchemy import Engine

from evaluator_host.observability.metrics import Metrics
from evaluator_host.online.deciding.router import Router, decide, sampled
from evaluator_host.settings import Settings
from evaluator_host.store.online.rules import RuleStore
from evaluator_host.store.online.scores import ScoreQueue
from tests.support.online import WS, chat_trace, hex_id, put_trace, score_rows, span, trace_states


def rule(store: RuleStore, **fields: Any) -> str:
    base: dict[str, Any] = {
        "name": None,
        "revision": None,
        "filter": {},
        "sampling_rate": 1.0,
        "mapping": None,
        "enabled": True,
    }
    return store.create(fields.pop("workspace", WS), "ev_1", {**base, **fields}).id


def test_filters_match_spans_and_pick_the_evaluated_span(engine: Engine) -> None:
    rules, queue = RuleStore(engine), ScoreQueue(engine)
    every = rule(rules)
    on_llm = rule(rules, filter={"span_name": "llm"})
    prod = rule(rules, filter={"attributes": [{"key": "env", "equals": "prod"}]})
    staging = rule(rules, filter={"attributes": [{"key": "env", "equals": "staging"}]})
    other_service = rule(rules, filter={"service_name": "billing"})
    no_user = rule(rules, filter={"attributes": [{"key": "user.id", "exists": False}]})
    typed = rule(rules, filter={"attributes": [{"key": "n", "equals": 1}]})  # a bool true is not 1
    paused = rule(rules, enabled=False)
    deleted = rule(rules)
    rules.delete(WS, deleted)
    other_ws = rule(rules, workspace="ws_other")

    trace_id = hex_id(16)
    root = span(trace_id, "chat", attributes={"n": True})
    llm = span(trace_id, "llm", parent=root.span_id, attributes={"env": "prod"}, start_ns=root.start_ns + 10)
    put_trace(engine, [root, llm])
    open_one = chat_trace(engine)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE online_traces SET state = 'open' WHERE trace_id = '{open_one}'")

    routed = queue.route(100, 1000, decide)
    assert routed.traces == 1 and routed.queued == 4 and routed.backlog == 4
    got = {r.rule_id: r for r in score_rows(engine)}
    assert set(got) == {every, on_llm, prod, no_user}
    assert got[every].span_id == root.span_id  # no filter: the root
    assert got[on_llm].span_id == got[prod].span_id == llm.span_id
    assert got[no_user].span_id == root.span_id  # the first matching span in start order
    assert {r.state for r in got.values()} == {"queued"}
    assert not {staging, other_service, typed, paused, deleted, other_ws} & set(got)
    assert trace_states(engine) == {trace_id: "routed", open_one: "open"}
    assert queue.route(100, 1000, decide).traces == 0  # routed once


def test_sampling_is_deterministic_and_near_the_rate(engine: Engine) -> None:
    rules, queue = RuleStore(engine), ScoreQueue(engine)
    half = rule(rules, sampling_rate=0.5)
    none = rule(rules, sampling_rate=0.0)
    ids = [chat_trace(engine) for _ in range(200)]
    queue.route(500, 10_000, decide)
    picked = {r.trace_id for r in score_rows(engine) if r.rule_id == half}
    assert picked == {t for t in ids if sampled(half, t, 0.5)}  # the same decision again, anywhere
    assert 60 < len(picked) < 140
    assert not [r for r in score_rows(engine) if r.rule_id == none]


def test_a_full_backlog_drops_and_counts(engine: Engine) -> None:
    rules, queue = RuleStore(engine), ScoreQueue(engine)
    first, second = rule(rules), rule(rules)
    for _ in range(3):
        chat_trace(engine)
    routed = queue.route(100, 4, decide)  # 6 pairs, room for 4
    assert routed.queued == 4 and sum(routed.dropped.values()) == 2 and routed.backlog == 4
    states = sorted(r.state for r in score_rows(engine))
    assert states == ["dropped"] * 2 + ["queued"] * 4
    assert queue.counts() == {"queued": 4, "running": 0, "dropped": 2}
    assert set(routed.dropped) <= {first, second}
    claimed = queue.claim("svc-a", 10, 60)  # the backlog drains, then routing queues again
    assert len(claimed) == 4
    assert queue.finish("svc-a", [(c.rule_id, c.trace_id, {"status": "ok"}) for c in claimed]) == [True] * 4
    chat_trace(engine)
    assert queue.route(100, 4, decide).queued == 2


def test_claims_are_exclusive_and_only_the_holder_writes(engine: Engine) -> None:
    rules, queue = RuleStore(engine), ScoreQueue(engine)
    rule(rules)
    for _ in range(5):
        chat_trace(engine)
    queue.route(100, 100, decide)
    a = queue.claim("svc-a", 3, 60)
    b = queue.claim("svc-b", 10, 60)
    assert (
        len(a) == 3 and len(b) == 2 and not {(c.rule_id, c.trace_id) for c in a} & {(c.rule_id, c.trace_id) for c in b}
    )
    assert queue.claim("svc-c", 10, 60) == []
    key = (a[0].rule_id, a[0].trace_id)
    assert queue.finish("svc-b", [(*key, {"status": "ok"})]) == [False]  # not its claim
    assert queue.finish("svc-a", [(*key, {"status": "ok"})]) == [True]
    assert queue.finish("svc-a", [(*key, {"status": "error"})]) == [False]  # done is final
    # an expired claim (its service died) is claimed again, one attempt more
    expired = queue.claim("svc-d", 10, 60) + []
    assert expired == []
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "UPDATE online_scores SET claimed_until = '2000-01-01 00:00:00' WHERE claimed_by = 'svc-b'"
        )
    again = queue.claim("svc-d", 10, 60)
    assert len(again) == 2 and all(c.attempts == 2 for c in again)
    assert queue.release_own("svc-a") == 2  # a restarted svc-a puts back what its predecessor held
    assert len(queue.claim("svc-e", 10, 60)) == 2


def test_two_routers_route_each_trace_once(engine: Engine) -> None:
    rules = RuleStore(engine)
    rule(rules)
    rule(rules, sampling_rate=0.5)
    ids = [chat_trace(engine) for _ in range(120)]
    queues = [ScoreQueue(engine), ScoreQueue(engine)]
    errors: list[BaseException] = []

    def run(queue: ScoreQueue) -> None:
        try:
            while queue.route(7, 10_000, decide).traces:
                pass
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(q,)) for q in queues]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert set(trace_states(engine).values()) == {"routed"}
    rows = score_rows(engine)
    assert len({(r.rule_id, r.trace_id) for r in rows}) == len(rows)
    assert {r.trace_id for r in rows} == set(ids)


def test_concurrent_claimers_split_the_queue_without_overlap(engine: Engine) -> None:
    rule(RuleStore(engine))
    for _ in range(150):
        chat_trace(engine)
    ScoreQueue(engine).route(500, 10_000, decide)
    taken: dict[str, list[tuple[str, str]]] = {"svc-a": [], "svc-b": []}
    errors: list[BaseException] = []

    def claim(me: str) -> None:
        queue = ScoreQueue(engine)
        try:
            while got := queue.claim(me, 7, 60):
                taken[me] += [(c.rule_id, c.trace_id) for c in got]
                assert all(queue.finish(me, [(c.rule_id, c.trace_id, {"status": "ok"}) for c in got]))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=claim, args=(me,)) for me in taken]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    a, b = set(taken["svc-a"]), set(taken["svc-b"])
    assert not a & b and len(a | b) == 150
    assert {r.state for r in score_rows(engine)} == {"done"}


def test_a_woken_router_routes_at_once_not_at_the_end_of_its_poll_period(engine: Engine) -> None:
    """Assembly wakes the router when it made traces ready: with an hour's poll period, a trace made
    ready after the router's first pass is routed only because of the wake-up (bounded wait)."""
    rule(RuleStore(engine))
    woke_scorer: list[int] = []
    router = Router(Settings(online_poll_s=3600.0), ScoreQueue(engine), Metrics(), lambda: woke_scorer.append(1))

    async def scenario() -> str:
        router.start()
        try:
            await asyncio.sleep(0.2)  # the first pass: nothing ready yet
            trace_id = await asyncio.to_thread(chat_trace, engine)
            router.wake()
            deadline = time.monotonic() + 60  # a minute on a loaded machine: the poll period is an hour
            # routed (its commit) and the scorer told (after the pass's session step, a moment later: leaving
            # at "routed" alone closed the router in between once, on PostgreSQL in a shuffled run)
            while time.monotonic() < deadline:
                if (await asyncio.to_thread(trace_states, engine))[trace_id] == "routed" and woke_scorer:
                    break
                await asyncio.sleep(0.05)
            return trace_id
        finally:
            await router.close()

    trace_id = asyncio.run(scenario())
    assert trace_states(engine)[trace_id] == "routed"
    assert len(score_rows(engine)) == 1 and woke_scorer  # queued, and the scorer told
