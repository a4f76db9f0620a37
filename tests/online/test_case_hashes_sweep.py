"""Retention sweeps the backfills' case keys (issue 50, migration ``0026_case_hashes_sweep``), on SQLite and
PostgreSQL: the span retention sweep (``OnlineSpanStore.sweep``) deletes the ``online_case_hashes`` rows of the
traces it deletes, in its transaction, so no row outlives its trace; a re-run backfill afterwards answers from the
cache only what is still stored, and a trace sent again under a swept trace's id (a new trace: its own spans,
the same span count) is read and scored fresh by the pages, never answered with the swept trace's result; a case
key of a trace gone before its page stored it is not written."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, select

from evaluator_host.online.deciding.router import decide
from evaluator_host.store.online import spans as online_spans
from evaluator_host.store.online.backfill_pages import read_page
from evaluator_host.store.online.backfills import BackfillStore
from evaluator_host.store.online.case_hashes import CaseHashRow, remember, resolve_cached
from evaluator_host.store.online.rows import OnlineTraceRow
from evaluator_host.store.online.rules import RuleStore
from evaluator_host.store.online.spans import OnlineSpanStore
from tests.support.case_hashes import (
    CAP,
    EVERYTHING,
    RETENTION,
    SCOPE,
    age,
    make_rule,
    orphans,
    scored_before,
    spans_of,
)  # fmt: skip
from tests.support.online import WS, chat_trace, put_trace, score_rows, span

H, T = CaseHashRow, OnlineTraceRow


def hashed(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return {str(t) for t in conn.execute(select(H.target_id)).scalars()}


def test_the_retention_sweep_deletes_the_case_hash_rows_of_the_traces_it_deletes_and_no_other(engine: Engine) -> None:
    old = [chat_trace(engine, state="routed") for _ in range(3)]
    kept = [chat_trace(engine, state="routed") for _ in range(2)]
    scored_before(engine, old + kept)
    for trace_id in old:
        age(engine, trace_id)
    assert hashed(engine) == set(old + kept)

    spans, traces = OnlineSpanStore(engine).sweep(datetime.now(UTC) - RETENTION)

    assert (spans, traces) == (6, 3)
    assert hashed(engine) == set(kept)  # the swept traces' rows went with them, the others stay
    assert orphans(engine) == 0


def test_the_sweep_deletes_expired_traces_a_chunk_a_transaction_and_their_case_keys_with_each_chunk(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(online_spans, "SWEEP_CHUNK", 2)  # 5 expired traces: chunks of 2, 2 and 1
    old = [chat_trace(engine, state="routed") for _ in range(5)]
    kept = [chat_trace(engine, state="routed")]
    scored_before(engine, old + kept)
    for trace_id in old:
        age(engine, trace_id)

    spans, traces = OnlineSpanStore(engine).sweep(datetime.now(UTC) - RETENTION)

    assert (spans, traces) == (10, 5)
    assert hashed(engine) == set(kept) and orphans(engine) == 0
    assert OnlineSpanStore(engine).sweep(datetime.now(UTC) - RETENTION) == (0, 0)  # nothing left: one empty chunk


def test_a_rerun_after_the_sweep_scores_a_trace_sent_again_under_a_swept_id_fresh(engine: Engine) -> None:
    swept = chat_trace(engine, "2+2?", "4", state="routed")
    kept = chat_trace(engine, state="routed")
    scored_before(engine, [swept, kept])  # both scored by an earlier backfill: case keys, answers in the cache
    age(engine, swept)
    OnlineSpanStore(engine).sweep(datetime.now(UTC) - RETENTION)
    assert orphans(engine) == 0
    # the same trace id sent again: a new trace with other content and the same span count (2)
    root = span(swept, "chat", attributes={"ag.data.inputs": {"q": "3+3?"}, "ag.data.outputs": "7"})
    put_trace(engine, [root, span(swept, "llm", parent=root.span_id)], state="routed")

    rule = make_rule(RuleStore(engine))  # a new rule of the same evaluator revision and mapping: the same scope
    store = BackfillStore(engine)
    backfill = store.create(rule, EVERYTHING, 1000, 1, 2, 0)
    claimed = store.claim("svc", 30)
    assert claimed is not None
    assert resolve_cached(engine, "svc", claimed, rule, SCOPE, CAP, time.time()) == 1
    assert {r.target_id for r in score_rows(engine)} == {kept}  # only the kept trace answered from the cache
    got = store.get(WS, rule.id, backfill.id)
    assert (got.cached, got.skipped) == (1, 0)
    page = read_page(engine, "svc", got, rule, 100, decide, spans_of, 10_000)
    assert page is not None
    assert [r["target_id"] for r in page.got.rows] == [swept]  # read, assembled and run: scored fresh
    assert (page.got.targets, page.got.already_scored) == (1, 0)  # nothing skipped that should not be


def test_a_case_key_of_a_trace_swept_before_its_page_was_stored_is_not_written(engine: Engine) -> None:
    gone = chat_trace(engine, state="routed")
    stored = chat_trace(engine, state="routed")
    age(engine, gone)
    with engine.connect() as conn:  # the page read them (each trace's generation with its span count)
        seen = dict(conn.execute(select(OnlineTraceRow.trace_id, OnlineTraceRow.first_seen_at)).all())
    OnlineSpanStore(engine).sweep(datetime.now(UTC) - RETENTION)  # while the page was scoring it
    row = {"workspace_id": WS, "scope": SCOPE, "span_id": None, "span_count": 2, "case_key": b"k" * 32,
           "status": "ok", "score": 1.0, "passed": True, "label": None, "runtime_id": "python",
           "duration_ms": 0.1}  # fmt: skip
    with engine.begin() as conn:
        remember(conn, [{**row, "target_id": t, "first_seen_at": seen[t]} for t in (gone, stored)])
    assert hashed(engine) == {stored}
    assert orphans(engine) == 0
