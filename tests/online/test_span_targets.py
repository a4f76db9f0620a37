"""Span-level rules in the store, on SQLite and PostgreSQL (issue 50): routing queues one row per
(rule, matching span) — target id ``<trace id>/<span id>`` — beside a trace-level rule's one row per
trace; a second row for a (rule, target) is impossible (the queue's key); a claimed span row's result
is stored on that row only; and two routers on one database queue each span once."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import Engine, insert
from sqlalchemy.exc import IntegrityError

from evaluator_host.online.deciding.router import decide
from evaluator_host.store.db import utcnow
from evaluator_host.store.online.rows import OnlineScoreRow
from evaluator_host.store.online.rules import RuleStore
from evaluator_host.store.online.scores import ScoreQueue
from tests.support.online import WS, hex_id, put_trace, score_rows, span

LLM = {"key": "openinference.span.kind", "equals": "LLM"}


def rule(store: RuleStore, **fields: Any) -> str:
    base: dict[str, Any] = {"name": None, "revision": None, "filter": {}, "sampling_rate": 1.0, "mapping": None}
    return store.create(WS, "ev_1", {**base, "enabled": True, **fields}).id


def agent_trace(engine: Engine, llm_calls: int = 3) -> tuple[str, list[str]]:
    """An agent trace: a root, ``llm_calls`` LLM spans and a tool span; (trace id, the LLM span ids)."""
    trace_id = hex_id(16)
    root = span(trace_id, "agent", attributes={"openinference.span.kind": "AGENT"})
    spans = [root]
    for i in range(llm_calls):
        attributes = {"openinference.span.kind": "LLM", "input.value": f"q{i}", "output.value": f"a{i}"}
        spans.append(span(trace_id, "llm", parent=root.span_id, attributes=attributes, start_ns=root.start_ns + i + 1))
    spans.append(span(trace_id, "tool", parent=root.span_id, attributes={"openinference.span.kind": "TOOL"}))
    put_trace(engine, spans)
    return trace_id, [s.span_id for s in spans[1 : llm_calls + 1]]


def test_a_span_level_rule_queues_each_matching_span_once_beside_a_trace_level_rule(engine: Engine) -> None:
    rules, queue = RuleStore(engine), ScoreQueue(engine)
    per_span = rule(rules, filter={"attributes": [LLM]}, target={"level": "span"})
    per_trace = rule(rules, filter={"attributes": [LLM]})  # no target: trace level, as before
    every_span = rule(rules, target={"level": "span"})  # no filter at span level: every span
    trace_id, llm_ids = agent_trace(engine)

    routed = queue.route(100, 1000, decide)
    assert routed.traces == 1 and routed.queued == 3 + 1 + 5
    rows = score_rows(engine)
    spans_of = sorted((r.span_id, r.target_id) for r in rows if r.rule_id == per_span)
    assert spans_of == sorted((s, f"{trace_id}/{s}") for s in llm_ids)
    (trace_row,) = [r for r in rows if r.rule_id == per_trace]
    assert trace_row.target_id == trace_id and trace_row.span_id == llm_ids[0]  # the first match, unchanged
    assert len([r for r in rows if r.rule_id == every_span]) == 5
    assert {r.trace_id for r in rows} == {trace_id}

    assert queue.route(100, 1000, decide).queued == 0  # routed once: never queued again
    assert len(score_rows(engine)) == 9


def test_the_queue_key_refuses_a_second_row_for_a_rule_and_span(engine: Engine) -> None:
    rules = RuleStore(engine)
    per_span = rule(rules, target={"level": "span"})
    trace_id, span_ids = hex_id(16), [hex_id(8), hex_id(8)]
    row = {
        "rule_id": per_span,
        "trace_id": trace_id,
        "workspace_id": WS,
        "state": "queued",
        "attempts": 0,
        "enqueued_at": utcnow(),
        "evaluator_id": "ev_1",
    }
    with engine.begin() as conn:  # two spans of one trace: two rows; a trace-level row (default target) too
        conn.execute(insert(OnlineScoreRow), [{**row, "span_id": s, "target_id": f"{trace_id}/{s}"} for s in span_ids])
        conn.execute(insert(OnlineScoreRow), [{**row, "span_id": span_ids[0]}])
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(
            insert(OnlineScoreRow), [{**row, "span_id": span_ids[0], "target_id": f"{trace_id}/{span_ids[0]}"}]
        )
    assert sorted(r.target_id for r in score_rows(engine)) == sorted([trace_id, *(f"{trace_id}/{s}" for s in span_ids)])


def test_a_claimed_span_row_is_finished_on_that_row_only(engine: Engine) -> None:
    rules, queue = RuleStore(engine), ScoreQueue(engine)
    rule(rules, filter={"attributes": [LLM]}, target={"level": "span"})
    trace_id, llm_ids = agent_trace(engine)
    queue.route(100, 1000, decide)
    claimed = queue.claim("svc_a", 2, 30)
    assert len(claimed) == 2 and all(c.target_id == f"{trace_id}/{c.span_id}" for c in claimed)
    first = claimed[0]
    assert queue.finish("svc_a", [(first.rule_id, first.target_id, {"status": "ok", "score": 1.0})]) == [True]
    assert queue.defer("svc_a", [(claimed[1].rule_id, claimed[1].target_id)], [0.0]) == 1
    by_span = {r.span_id: r for r in score_rows(engine)}
    assert by_span[first.span_id].state == "done" and by_span[first.span_id].score == 1.0
    assert by_span[claimed[1].span_id].state == "queued"
    assert sorted(s for s, r in by_span.items() if r.state == "queued") == sorted(
        s for s in llm_ids if s != first.span_id
    )


def test_two_routers_on_one_database_queue_each_span_once(engine: Engine) -> None:
    rules = RuleStore(engine)
    rule(rules, filter={"attributes": [LLM]}, target={"level": "span"})
    expected = set()
    for _ in range(40):
        trace_id, llm_ids = agent_trace(engine)
        expected |= {f"{trace_id}/{s}" for s in llm_ids}
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
        t.join(120)
    assert not errors
    targets = [r.target_id for r in score_rows(engine)]
    assert len(targets) == len(expected) == 120 and set(targets) == expected
