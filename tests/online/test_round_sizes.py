"""A scoring round's claim and call sizes (``online/scoring/sizing.py``, issue 55 §2): a fast rule's backlog is
claimed and run in calls of up to ``online_scoring_batch_max`` rows, while a slow or new rule's calls keep
``online_scoring_batch`` rows and a large claim holds no more of its rows than a claim of the batch did; every
row is scored once, with one attempt, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, insert, select

from evaluator_host.api import create_app
from evaluator_host.evaluation.models import Case, EvaluationResult
from evaluator_host.online.deciding.budgets import UNBOUNDED, Windows
from evaluator_host.online.scoring.round_cases import error_result, gave_up
from evaluator_host.online.scoring.sizing import RoundSizes
from evaluator_host.store.db import utcnow
from evaluator_host.store.online.rows import OnlineScoreRow
from evaluator_host.store.online.scores import Claimed, ScoreQueue
from evaluator_host.tenancy.quotas import Charged
from tests.support.online import chat_spans, chat_trace, put_traces, score_rows
from tests.support.service import make_settings
from tests.support.wait import wait_until

FAST = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"
SLOW = "import time\n\ndef evaluate(inputs, outputs, trace):\n    time.sleep(0.01)\n    return 0.5\n"


@dataclass
class Row:
    rule_id: str
    n: int = 0
    revision: int | None = 1


def ran(ms: float) -> EvaluationResult:
    """A result a sandbox run gave, in ``ms``."""
    return EvaluationResult(status="ok", score=1.0, interface="evaluate", runtime={"id": "rt"}, duration_ms=ms)


FAST_R, MID, JUDGE, NEW = ("fast", 1), ("mid", 1), ("judge", 1), ("new", 1)


def test_a_new_or_slow_rule_runs_batch_rows_a_call_and_a_fast_one_what_its_pace_runs_in_a_quarter_second() -> None:
    sizes = RoundSizes(batch=64, batch_max=256)
    assert sizes.group_cap(NEW) == 64 and sizes.claim_size() == 64
    sizes.measured(FAST_R, [ran(0.05), ran(0.15)])
    assert sizes.pace_ms[FAST_R] == pytest.approx(0.1) and sizes.group_cap(FAST_R) == 256
    sizes.measured(MID, [ran(2.0)])
    assert sizes.group_cap(MID) == 125  # 250 ms / 2 ms
    sizes.measured(JUDGE, [ran(200.0)])
    assert sizes.group_cap(JUDGE) == 64  # never below the batch
    sizes.too_large(FAST_R)
    assert sizes.group_cap(FAST_R) == 64  # its results were too large together once: batch calls from then on
    assert RoundSizes(batch=64, batch_max=8).group_cap(NEW) == 64  # a max below the batch: the batch


def test_results_that_stood_for_a_run_are_no_measure_and_a_new_revision_is_measured_afresh() -> None:
    claimed = Claimed(
        rule_id="judge", trace_id="t", workspace_id="ws", span_id=None, evaluator_id="e", target_id="t",
        attempts=1, enqueued_at=utcnow(), last_span_at=None, rule=None, revision=1,
    )  # fmt: skip
    sizes = RoundSizes(batch=64, batch_max=256)
    sizes.measured(JUDGE, [ran(200.0)])
    stand_ins = [  # each takes 0 ms: counted, they would make the judge look fast
        error_result("NotFound", "evaluator 'e' does not exist", claimed),
        gave_up(claimed, "gave up after 3 attempts"),
        ran(0.0).model_copy(update={"status": "sandbox_error"}),
    ]
    assert {r.duration_ms for r in stand_ins} == {0.0}
    sizes.measured(JUDGE, stand_ins)
    assert sizes.pace_ms[JUDGE] == 200.0 and sizes.group_cap(JUDGE) == 64
    sizes.measured(FAST_R, [ran(0.1)])
    assert sizes.group_cap(FAST_R) == 256 and sizes.group_cap(("fast", 2)) == 64  # revision 2: not measured yet
    calls, back = sizes.split([[Row("fast", i, revision=2) for i in range(100)]])
    assert [len(c) for c in calls] == [64] and len(back) == 36  # a new revision's rows: as a new rule's


def test_a_claim_grows_to_its_rules_smallest_call_and_puts_back_slow_and_new_rows_past_the_batch() -> None:
    sizes = RoundSizes(batch=4, batch_max=16)
    sizes.measured(FAST_R, [ran(0.01)])
    first = [Row("fast", i) for i in range(10)]
    calls, back = sizes.split([first])
    assert [len(c) for c in calls] == [10] and back == [] and sizes.claim_size() == 16  # the next claim grows
    assert sizes.asked == 16
    fast = [Row("fast", i) for i in range(16)]
    new = [Row("new", i) for i in range(7)]
    sizes.measured(("slow", 1), [ran(100.0)])
    slow = [Row("slow", i) for i in range(3)]
    calls, back = sizes.split([fast, new, slow])
    assert [(c[0].rule_id, len(c)) for c in calls] == [("fast", 16), ("new", 4)]  # the batch's room: 4 rows in all
    assert back == new[4:] + slow  # in claim order, put back (no attempt): claimable again at once
    assert sizes.claim_size() == 4  # it met a new and a slow rule: back to the batch
    calls, back = sizes.split([[Row("fast", i) for i in range(40)]])
    assert [len(c) for c in calls] == [16, 16, 8] and back == []  # a claim larger than a call: calls of the cap
    calls, back = sizes.split([])
    assert calls == [] and back == [] and sizes.claim_size() == 16  # nothing claimed: the size stays


def test_a_rules_429_window_is_unbounded_until_a_refusal_and_again_once_it_widened_back_to_the_ceiling() -> None:
    windows = Windows(256)
    windows.started("r", 1000)  # four large calls of a fast rule in flight
    assert windows.room("r") == UNBOUNDED and windows.size("r") == 256  # /stats shows the ceiling
    windows.limited("r")
    assert windows.size("r") == 128 and windows.room("r") == 0  # halved from the ceiling: 1,000 in flight
    windows.ended("r", 1000)
    assert windows.room("r") == 128
    for _ in range(400):
        windows.succeeded("r", 256)
    assert windows.room("r") == UNBOUNDED  # back at the ceiling: no window again


def test_rows_put_back_are_claimable_again_with_their_attempts_as_they_were(engine: Engine) -> None:
    queue = ScoreQueue(engine)
    traces = put_traces(engine, [chat_spans() for _ in range(6)], state="ready")
    rows = [
        {"rule_id": "r1", "target_id": t, "trace_id": t, "workspace_id": "ws_default", "state": "queued",
         "evaluator_id": "e1", "attempts": 0, "enqueued_at": utcnow()}
        for t in traces
    ]  # fmt: skip
    with engine.begin() as conn:
        conn.execute(insert(OnlineScoreRow), rows)
    claimed = queue.claim("me", 6, 60.0)
    assert len(claimed) == 6 and {r.attempts for r in claimed} == {1}
    back = [(r.rule_id, r.target_id) for r in claimed[3:]]
    assert queue.give_back("other", back) == 0  # only the holder puts its rows back
    assert queue.give_back("me", back) == 3
    by_id = {r.target_id: r for r in score_rows(engine)}
    assert {(by_id[t].state, by_id[t].attempts, by_id[t].claimed_by) for _, t in back} == {("queued", 0, None)}
    again = queue.claim("other", 6, 60.0)
    assert sorted(r.target_id for r in again) == sorted(t for _, t in back)  # claimable at once, by anyone
    assert {r.attempts for r in again} == {1}


def _rule(client: TestClient, code: str, name: str) -> str:
    ev = client.post("/v1/evaluators", json={"name": name, "language": "python", "code": code})
    assert ev.status_code == 201, ev.text
    made = client.post("/v1/online-rules", json={"evaluator_id": ev.json()["id"], "name": name})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def _spy_calls(client: TestClient) -> list[tuple[str, int]]:
    """Each call the service's scorer makes from now on: (rule id, cases) — recorded, then run as it was."""
    scorer = client.app.state.services.online.scorer  # type: ignore[attr-defined]
    calls: list[tuple[str, int]] = []
    run = scorer._run  # noqa: SLF001 - the one place a round calls the evaluator

    async def recorded(first: Any, cases: list[Case], charged: Charged) -> list[EvaluationResult]:
        calls.append((first.rule_id, len(cases)))
        results: list[EvaluationResult] = await run(first, cases, charged)
        return results

    scorer._run = recorded  # noqa: SLF001
    return calls


def _all_done(engine: Engine, rules: Sequence[str], traces: Sequence[str]) -> list[Any]:
    """The rows of ``rules`` for ``traces`` once every one of them is done (empty until then)."""
    s, wanted = OnlineScoreRow, set(traces)
    query = select(s.rule_id, s.target_id, s.state, s.attempts, s.score).where(s.rule_id.in_(rules))
    with engine.connect() as conn:
        got = [r for r in conn.execute(query) if r.target_id in wanted]
    done = [r for r in got if r.state == "done"]
    return done if len(done) == len(rules) * len(traces) else []


@pytest.mark.databases
def test_a_fast_rules_backlog_runs_in_large_calls_and_a_slow_rules_in_batch_calls_each_row_scored_once(
    process_client: TestClient,
) -> None:
    client = process_client
    engine = client.app.state.services.store.engine  # type: ignore[attr-defined]
    scorer = client.app.state.services.online.scorer  # type: ignore[attr-defined]
    batch, most = client.app.state.settings.online_scoring_batch, client.app.state.settings.online_scoring_batch_max  # type: ignore[attr-defined]
    assert (batch, most) == (64, 256)  # the defaults this test is about
    calls = _spy_calls(client)
    fast = _rule(client, FAST, "fast")
    warm = chat_trace(engine)  # measures the fast rule's pace
    wait_until(lambda: _all_done(engine, [fast], [warm]), 60, 0.05, what="the warm-up trace's score")
    assert scorer.sizes.group_cap((fast, 1)) == most

    traces = put_traces(engine, [chat_spans() for _ in range(700)])  # one transaction: a backlog at once
    done = wait_until(lambda: _all_done(engine, [fast], [warm, *traces]), 180, 0.1, what="700 traces scored")
    assert {(r.attempts, r.score) for r in done} == {(1, 1.0)}  # each once, at the first attempt
    sizes = [n for rule, n in calls if rule == fast]
    assert sum(sizes) == 701 and max(sizes) > batch and max(sizes) <= most, sizes

    slow = _rule(client, SLOW, "slow")  # new: not measured yet, then 10 ms a row (a call of 64 takes 0.64 s)
    calls.clear()
    given: list[tuple[str, str]] = []
    give_back = scorer.queue.give_back

    def recorded_give_back(me: str, keys: Sequence[tuple[str, str]]) -> int:
        given.extend(keys)
        return int(give_back(me, keys))

    scorer.queue.give_back = recorded_give_back  # recorded, then done as it was
    more = put_traces(engine, [chat_spans() for _ in range(300)])  # 600 rows routed at once, the claim asks 256
    done = wait_until(lambda: _all_done(engine, [fast, slow], more), 300, 0.1, what="300 traces scored by both")
    assert given and {rule for rule, _ in given} == {slow}  # the new rule's rows past 64 of a large claim went back
    assert {r.attempts for r in done} == {1}  # ... and counted no attempt
    assert {(r.rule_id, r.score) for r in done} == {(slow, 0.5), (fast, 1.0)}
    by_rule = {rule: [n for r, n in calls if r == rule] for rule in (fast, slow)}
    assert sum(by_rule[slow]) == 300 and max(by_rule[slow]) <= batch, by_rule  # a slow or new rule: batch calls
    assert sum(by_rule[fast]) == 300 and max(by_rule[fast]) <= most, by_rule
    assert scorer.sizes.group_cap((slow, 1)) == batch and scorer.sizes.pace_ms[(slow, 1)] >= 10.0
    assert client.get("/healthz").status_code == 200
    for rule in (fast, slow):
        client.delete(f"/v1/online-rules/{rule}")


BIG = "def evaluate(inputs, outputs, trace):\n    return {'score': 1.0, 'details': {'pad': 'x' * 2000}}\n"


def test_a_fast_rule_whose_large_call_is_too_large_together_is_scored_once_and_keeps_batch_calls(
    tmp_path: Path,
) -> None:
    # 64 results of ~2.1 KB fit in 200 KB; 256 of them do not: the large call's results are too large together
    settings = make_settings(tmp_path, backend="process", online_poll_s=0.05, max_response_bytes=200_000)
    with TestClient(create_app(settings)) as client:
        engine = client.app.state.services.store.engine  # type: ignore[attr-defined]
        scorer = client.app.state.services.online.scorer  # type: ignore[attr-defined]
        calls = _spy_calls(client)
        big = _rule(client, BIG, "big")
        warm = chat_trace(engine)
        wait_until(lambda: _all_done(engine, [big], [warm]), 60, 0.05, what="the warm-up trace's score")
        traces = put_traces(engine, [chat_spans() for _ in range(600)])
        done = wait_until(lambda: _all_done(engine, [big], traces), 300, 0.1, what="600 traces scored")
        assert {(r.attempts, r.score) for r in done} == {(1, 1.0)}  # each once: the large call's rows ran one by one
        sizes = [n for _, n in calls]
        assert max(sizes) > 64, sizes  # a large call was tried (two, when a second was claimed before it failed)
        assert (big, 1) in scorer.sizes.large and scorer.sizes.group_cap((big, 1)) == 64
        calls.clear()
        more = put_traces(engine, [chat_spans() for _ in range(300)])
        done = wait_until(lambda: _all_done(engine, [big], more), 300, 0.1, what="300 more traces scored")
        assert {(r.attempts, r.score) for r in done} == {(1, 1.0)}
        sizes = [n for _, n in calls]
        assert sum(sizes) == 300 and max(sizes) <= 64, sizes  # batch calls from then on: none too large again
        assert client.get("/healthz").status_code == 200
