"""A backfill re-run from the result cache in one statement, in the store, on SQLite and PostgreSQL (issue 50,
``store/online/case_hashes.py``): a target whose (scope, span count) has a case key still in the result cache is
answered ``done`` from the cache's entry, marked ``cached``, counted in the backfill's ``cached`` and ``queued``
(never ``skipped``) and never read again by the pages; a trace that got new spans since, an evicted entry, another
scope (another evaluator revision or mapping) and a target the rule already has a row of are left to the pages,
which run or skip them as before; the backfill's limit holds; a second resolve does nothing. A fresh rule's dry
count made by the database equals the pages' count (evaluation traffic is no target)."""

from __future__ import annotations

import hashlib
import json
import time
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, insert

from evaluator_host.online.deciding.router import decide
from evaluator_host.online.reading.spans import encode
from evaluator_host.store.db import utcnow
from evaluator_host.store.online import case_hashes as online_case_hashes
from evaluator_host.store.online.backfill_pages import read_page
from evaluator_host.store.online.backfills import BackfillStore
from evaluator_host.store.online.case_hashes import resolve_cached
from evaluator_host.store.online.rows import OnlineScoreRow
from evaluator_host.store.online.rules import RuleStore
from evaluator_host.store.online.spans import OnlineSpanStore
from tests.support.case_hashes import CAP, EVERYTHING, SCOPE, make_rule, scored_before, spans_of
from tests.support.online import WS, chat_trace, score_rows, span


def late_span(engine: Engine, trace_id: str) -> None:
    """A span of ``trace_id`` arriving now, written as the receiver writes it (its trace's span count grows)."""
    late = span(trace_id, "tool", parent=None)
    row = {"trace_id": trace_id, "span_id": late.span_id, "parent_span_id": None, "name": "tool",
           "service_name": "chat-api", "start_ns": late.start_ns, "end_ns": late.end_ns, "body": encode(late),
           "root_ended_at": None}  # fmt: skip
    assert OnlineSpanStore(engine).write(WS, [row], datetime.now(UTC)) == 1


def test_a_reruns_cached_targets_are_answered_in_one_statement_and_the_rest_left_to_the_pages(engine: Engine) -> None:
    rules, store = RuleStore(engine), BackfillStore(engine)
    traces = [chat_trace(engine, state="routed") for _ in range(7)]
    hit, grew, evicted, held, other_scope, hit_too, new = traces
    scored_before(engine, [hit, grew, held, hit_too])
    scored_before(engine, [evicted], cache=False)
    scored_before(engine, [other_scope], scope=hashlib.sha256(b"another revision").digest())
    late_span(engine, grew)  # new spans arrived since: another case
    rule = make_rule(rules)
    with engine.begin() as conn:  # the rule scored this one already with the revision: skipped by the pages
        conn.execute(
            insert(OnlineScoreRow),
            [{"rule_id": rule.id, "target_id": held, "trace_id": held, "workspace_id": WS, "state": "done",
              "status": "ok", "attempts": 1, "enqueued_at": utcnow(), "evaluator_id": "ev_1", "revision": 1}],
        )  # fmt: skip
    backfill = store.create(rule, EVERYTHING, 1000, 1, 6, 0)
    claimed = store.claim("svc", 30)
    assert claimed is not None

    assert resolve_cached(engine, "svc", claimed, rule, SCOPE, CAP, time.time()) == 2
    rows = {r.target_id: r for r in score_rows(engine) if r.backfill_id == backfill.id}
    assert set(rows) == {hit, hit_too}
    for trace_id, row in rows.items():
        assert (row.state, row.status, row.score, row.label, row.revision) == ("done", "ok", 0.5, trace_id[:8], 1)
        assert json.loads(row.result) == {"status": "ok", "score": 0.5, "label": trace_id[:8], "cached": True}
    got = store.get(WS, rule.id, backfill.id)
    assert (got.queued, got.cached, got.skipped, got.status) == (2, 2, 0, "planning")
    assert resolve_cached(engine, "svc", claimed, rule, SCOPE, CAP, time.time()) is None  # once per backfill

    page = read_page(engine, "svc", claimed, rule, 100, decide, spans_of, 10_000)
    assert page is not None
    assert sorted(r["target_id"] for r in page.got.rows) == sorted([grew, evicted, other_scope, new])  # run
    assert (page.got.targets, page.got.already_scored) == (5, 1)  # the answered are not read again
    assert page.got.span_counts[grew] == 3


def test_a_resolve_keeps_the_backfills_limit_and_entries_over_the_stored_result_cap(engine: Engine) -> None:
    rules, store = RuleStore(engine), BackfillStore(engine)
    traces = [chat_trace(engine, state="routed") for _ in range(5)]
    scored_before(engine, traces)
    rule = make_rule(rules)
    backfill = store.create(rule, EVERYTHING, 3, 1, 3, 0)  # a limit of 3 targets
    claimed = store.claim("svc", 30)
    assert claimed is not None
    assert resolve_cached(engine, "svc", claimed, rule, SCOPE, 10, time.time()) == 0  # every entry over 10 bytes
    assert resolve_cached(engine, "svc", claimed, rule, SCOPE, CAP, time.time()) == 3
    assert sorted(r.target_id for r in score_rows(engine)) == sorted(traces[:3])  # the first 3, in order
    done = store.get(WS, rule.id, backfill.id)
    assert (done.status, done.queued, done.cached, done.total) == ("planned", 3, 3, 3)  # planning ended


def test_a_resolve_in_slices_answers_every_cached_target_once_within_the_limit(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(online_case_hashes, "SLICE", 2)  # a transaction a slice of 2 traces
    rules, store = RuleStore(engine), BackfillStore(engine)
    traces = [chat_trace(engine, state="routed") for _ in range(7)]
    scored_before(engine, [t for i, t in enumerate(traces) if i != 1])  # the second has no case key yet
    rule = make_rule(rules)
    backfill = store.create(rule, EVERYTHING, 6, 1, 6, 0)
    claimed = store.claim("svc", 30)
    assert claimed is not None
    assert resolve_cached(engine, "svc", claimed, rule, SCOPE, CAP, time.time()) == 5  # of the first 6 traces
    assert sorted(r.target_id for r in score_rows(engine)) == sorted(traces[:1] + traces[2:6])
    got = store.get(WS, rule.id, backfill.id)
    assert (got.status, got.queued, got.cached) == ("planning", 5, 5)
    page = read_page(engine, "svc", got, rule, 100, decide, spans_of, 10_000)
    assert page is not None and [r["target_id"] for r in page.got.rows] == [traces[1]]  # the limit's last one


def test_a_resolve_by_a_service_that_does_not_hold_the_backfill_or_of_a_filtered_rule_does_nothing(
    engine: Engine,
) -> None:
    rules, store = RuleStore(engine), BackfillStore(engine)
    traces = [chat_trace(engine, state="routed") for _ in range(2)]
    scored_before(engine, traces)
    rule = make_rule(rules)
    store.create(rule, EVERYTHING, 1000, 1, 2, 0)
    claimed = store.claim("svc_a", 30)
    assert claimed is not None
    assert resolve_cached(engine, "svc_b", claimed, rule, SCOPE, CAP, time.time()) is None
    filtered = make_rule(rules, filter={"span_name": "llm"})
    store.create(filtered, EVERYTHING, 1000, 1, 2, 0)
    assert resolve_cached(engine, "svc_a", claimed, filtered, SCOPE, CAP, time.time()) is None
    assert score_rows(engine) == []
