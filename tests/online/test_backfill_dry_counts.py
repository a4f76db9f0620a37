"""A backfill's dry count made by the database (``store/online/dry_counts.py``): for a trace-level rule without
filter it answers what the pages answer — every trace's spans read, page by page (``backfills.count``, the path of
every other rule) — without reading a span into the service: new rules, sampled ones, rules whose rows score some
traces already (every state, every revision, a revision's own row beside the trace's), with and without a limit
(within a page of the pages'). SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from sqlalchemy import Engine, insert, select

from evaluator_host.online.backfill.runs import DRY_RUN_PAGE, dry_run
from evaluator_host.online.deciding.router import decide, join_sessions, sampled
from evaluator_host.store.db import utcnow
from evaluator_host.store.online import backfills as online_backfills
from evaluator_host.store.online.dry_counts import counted, fresh_count
from evaluator_host.store.online.rows import OnlineScoreRow, OnlineTraceRow
from evaluator_host.store.online.rules import RuleRecord, RuleStore
from evaluator_host.store.online.scores import ScoreQueue
from tests.support.case_hashes import EVERYTHING, make_rule, spans_of
from tests.support.online import WS, chat_trace, put_trace, span

OWN = {"evaluator_host.evaluation": True}


def by_pages(engine: Engine, rule: RuleRecord, revision: int | None, limit: int) -> tuple[int, int, int]:
    """What the pages count: the dry run's loop over ``backfills.count`` (every trace's spans read)."""
    traces = targets = scored = 0
    after = None
    with engine.connect() as conn:
        while True:
            room = max(limit - (targets - scored), 0)
            got = online_backfills.count(
                conn, rule, revision, EVERYTHING, after, DRY_RUN_PAGE, room, decide, spans_of, joins=join_sessions
            )
            traces, targets, scored = traces + got.traces, targets + got.targets, scored + got.already_scored
            if got.last is None or got.cut or got.traces < DRY_RUN_PAGE or targets - scored >= limit:
                return traces, targets, scored
            after = got.last


def no_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the dry run reads the pages."""
    monkeypatch.setattr(online_backfills, "count", lambda *a, **k: pytest.fail("the pages were read"))


def stored(engine: Engine, n: int) -> list[str]:
    """``n`` routed chat traces, then one of the service's own telemetry only and one still open; the routed ones'
    ids in the window's order."""
    for _ in range(n):
        chat_trace(engine, state="routed")
    put_trace(engine, [span("0" * 32, "judge", attributes=OWN)], state="routed")  # never a target
    chat_trace(engine, state="open")  # not assembled yet: not in any count
    with engine.connect() as conn:
        order = select(OnlineTraceRow.trace_id).where(
            OnlineTraceRow.state == "routed", OnlineTraceRow.trace_id != "0" * 32
        )
        return list(conn.execute(order.order_by(OnlineTraceRow.first_seen_at, OnlineTraceRow.trace_id)).scalars())


def rows_of(engine: Engine, rule: RuleRecord, rows: list[tuple[str, str, int | None]]) -> None:
    """Score rows of ``rule``: (target id, state, revision)."""
    with engine.begin() as conn:
        conn.execute(
            insert(OnlineScoreRow),
            [{"rule_id": rule.id, "target_id": target, "trace_id": target.split("@")[0], "workspace_id": WS,
              "state": state, "status": "ok" if state == "done" else None, "attempts": 1, "enqueued_at": utcnow(),
              "evaluator_id": "ev_1", "revision": revision} for target, state, revision in rows],
        )  # fmt: skip


def test_a_new_rules_dry_count_by_the_database_equals_the_pages_count(engine: Engine) -> None:
    rules = RuleStore(engine)
    stored(engine, 5)
    rule = make_rule(rules)
    assert by_pages(engine, rule, 1, 100) == (6, 5, 0)
    with engine.connect() as conn:
        assert fresh_count(conn, rule, EVERYTHING, 100) == (6, 5)
        assert fresh_count(conn, rule, EVERYTHING, 2) == (2, 2)  # up to the limit's targets
        assert fresh_count(conn, make_rule(rules, sampling_rate=0.5), EVERYTHING, 100) is None  # a sample: counted()
    with engine.connect() as conn:
        for limit in range(1, 7):
            assert fresh_count(conn, rule, EVERYTHING, limit) == by_pages(engine, rule, 1, limit)[:2]


def test_a_sampled_rules_dry_run_reads_no_span_and_counts_what_the_pages_count(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = RuleStore(engine)
    ordered = stored(engine, 40)
    rule = make_rule(rules, sampling_rate=0.5)
    expected = {limit: by_pages(engine, rule, 1, limit) for limit in (1, 3, 100)}
    traces, targets, _ = expected[100]
    assert traces == 41 and 5 < targets < 35  # a sample of the 40 traces that are not its own telemetry
    kept = [i for i, trace_id in enumerate(ordered) if sampled(rule.id, trace_id, 0.5)]
    assert len(kept) == targets and expected[3] == (kept[3], 3, 0)  # the traces before the 4th target
    no_pages(monkeypatch)
    queue = ScoreQueue(engine)
    for limit, answer in expected.items():
        assert dry_run(queue, rule, 1, EVERYTHING, limit) == answer
    assert dry_run(queue, make_rule(rules, sampling_rate=0.0), 1, EVERYTHING, 100) == (41, 0, 0)


@pytest.mark.parametrize("rate", [1.0, 0.5])
def test_a_rule_whose_rows_score_some_traces_is_counted_as_its_pages_count_it(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, rate: float
) -> None:
    rules = RuleStore(engine)
    t = stored(engine, 16)
    rule = make_rule(rules, sampling_rate=rate)
    rows_of(engine, rule, [
        (t[0], "done", 1), (t[1], "done", 2), (t[2], "queued", None), (t[3], "running", 1), (t[4], "dropped", 1),
        (t[5], "done", 1), (f"{t[5]}@r2", "done", 2), (t[6], "dropped", 1), (f"{t[6]}@r2", "queued", 2),
        (t[7], "done", 1), (f"{t[7]}@r2", "dropped", 2), (t[8], "done", None), (t[9], "done", 3),
        (t[10], "done", 1), (f"{t[10]}@r2", "done", None), (t[11], "dropped", 1), (f"{t[11]}@r1", "done", 2),
        (t[12], "done", 2), (f"{t[12]}@rNone", "queued", None),
    ])  # fmt: skip
    cases: list[Any] = list(itertools.product([1, 2, 3, None], [1, 2, 4, 7, 100]))
    expected = {(revision, limit): by_pages(engine, rule, revision, limit) for revision, limit in cases}
    assert expected[(1, 100)][2] > 0 and expected[(2, 100)][2] > 0  # some are skipped, at either revision
    no_pages(monkeypatch)
    queue = ScoreQueue(engine)
    for (revision, limit), answer in expected.items():
        assert dry_run(queue, rule, revision, EVERYTHING, limit) == answer, (revision, limit)
    with engine.connect() as conn:  # a filtered rule is not the database's to count: its pages count it
        assert counted(conn, make_rule(rules, filter={"span_name": "chat"}), 1, EVERYTHING, 10, bool) is None
