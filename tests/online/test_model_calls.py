"""A rule's ``model_calls_per_minute`` and the judge's 429s the egress proxy sees (issue 51).

The calls are the egress proxy's count of the connections each case made (its own record, host-side:
an evaluator that returns ``details.egress`` of its own changes nothing), stored per rule; over the
budget the rule's traces are ``delayed`` naming ``model_calls_per_minute`` and when they resume, and
every one is scored in the end, never more than the budget of calls in any minute at the judge. A
judge answering 429 to half its calls, to an evaluator that neither retries nor raises ``RateLimited``:
the proxy sees the 429s, the rule slows down, the rows it failed go back to the queue, and every trace
ends scored, none failed. Real services (both backends), the real OpenTelemetry SDK, a loopback
OpenAI-compatible judge (the only stand-in: a third-party API); the services count a budget minute of
``MINUTE_S`` (the ``online_budget_minute_s`` setting: a minute's cycle, in seconds). The service tests of
both backends run at once (tests/support/at_once.py), each its own services and judge: their minutes pass
together."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from evaluator_host.evaluation.models import ErrorInfo, EvaluationResult
from evaluator_host.online.deciding.budgets import Windows, plan
from evaluator_host.online.deciding.model_calls import rate_refused, rounds
from evaluator_host.sandbox.process.isolation import probe
from evaluator_host.store.online.budgets import Use
from tests.support.at_once import Cases, at_once
from tests.support.backends import BACKENDS
from tests.support.llm_server import llm_server
from tests.support.otlp import CheckedExporter
from tests.support.service import serving
from tests.support.wait import wait_until

ENV = {
    "EVALUATOR_HOST_ONLINE_QUIET_PERIOD_S": "0.2",
    "EVALUATOR_HOST_ONLINE_ASSEMBLY_S": "0.05",
    "EVALUATOR_HOST_ONLINE_POLL_S": "0.05",
}
MINUTE_S = 15  # the budgets' minute in the started services (online_budget_minute_s: a minute's cycle, shorter)
NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)

# one judge call per case, no retry, no RateLimited: a 429 is an HTTPError, an error result; and a forged
# record of its own connections in details.egress (the budget is the proxy's count, not this)
JUDGE = """import json, os, urllib.request


def evaluate(inputs, outputs, trace):
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": outputs}]}).encode()
    request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    answer = json.loads(urllib.request.urlopen(request, timeout=20).read())
    right = answer["choices"][0]["message"]["content"] == "A: " + outputs
    return {"score": 1.0 if right else 0.0, "details": {"egress": []}}
"""


def test_plan_runs_the_rows_whose_calls_fit_and_spreads_the_others_as_the_minutes_calls_age_out() -> None:
    calls = [(NOW - timedelta(seconds=50), 2, 4), (NOW - timedelta(seconds=20), 1, 2)]  # 2 calls a row
    run, held = plan({"model_calls_per_minute": 10}, 3, Use(calls=calls, running=3), NOW)
    assert run == 2  # 6 of 10 used: room for two rows of 2 calls
    assert held == [("model_calls_per_minute", 10.0)]  # the first 4 calls are a minute old in 10 s
    run, held = plan({"model_calls_per_minute": 6}, 3, Use(calls=calls, running=3), NOW)
    assert run == 0 and [(b, round(a)) for b, a in held] == [("model_calls_per_minute", 10)] * 2 + [
        ("model_calls_per_minute", 40)
    ]
    assert plan({"model_calls_per_minute": 2}, 3, Use(running=3), NOW) == (2, [("model_calls_per_minute", 60.0)])
    # two budgets: each row waits for the later of the two
    both = plan({"model_calls_per_minute": 10, "scores_per_minute": 1}, 3, Use(calls=calls, running=3), NOW)
    assert both[0] == 1 and [b for b, _ in both[1]] == ["scores_per_minute", "scores_per_minute"]


def test_a_rules_window_halves_once_per_window_of_429s_and_widens_a_row_per_window_of_rows() -> None:
    windows = Windows(16)
    before = time.monotonic()  # a round started before the first 429 was counted
    windows.limited("r", time.monotonic())
    assert windows.size("r") == 8
    windows.limited("r", before)  # its 429s were in flight when the window was halved: counted already
    assert windows.size("r") == 8
    windows.limited("r")  # a round started after the halving: halved again
    assert windows.size("r") == 4
    windows.succeeded("r", 4)  # a window of rows without a refusal: one row more
    assert windows.size("r") == 5
    windows.succeeded("r", 2)
    assert windows.size("r") == 5  # 5.4: a part of a window adds a part of a row
    for _ in range(40):
        windows.succeeded("r", 16)
    assert windows.size("r") == 16 and windows.size("other") == 16  # back at the ceiling; other rules untouched


def _result(status: str, log: list[dict[str, Any]], error: str | None = None) -> EvaluationResult:
    result = EvaluationResult(
        status=status,  # type: ignore[arg-type]
        error=ErrorInfo(type=error, message="x") if error else None,
        interface="evaluate",
        runtime={},
        details={"egress": []},  # what the evaluator says of its connections: never read
    )
    result._proxy_log = log  # noqa: SLF001 - what the pool sets from the gate's record
    return result


def test_a_rounds_errors_go_back_when_the_proxy_saw_its_judge_answer_429_and_its_calls_are_the_proxys_count() -> None:
    judge = "llm.local:443"
    results = {
        ("A", "1"): _result("ok", [{"host": judge, "status": "ok", "http_status": 429},
                                   {"host": judge, "status": "ok", "http_status": 200}]),  # an SDK retried: scored
        ("A", "2"): _result("error", [], "RuntimeError"),  # an async neighbour's 429 may be logged on the row above
        ("B", "1"): _result("error", [{"host": judge, "status": "ok", "http_status": 200}], "KeyError"),
        ("B", "2"): _result("ok", [{"host": "other:443", "status": "refused: not in the evaluator's network"}]),
        ("C", "1"): _result("error", [], "RateLimited"),
    }  # fmt: skip
    assert rate_refused(results) == {("A", "2"), ("C", "1")}  # B's error is its own: no 429 in its round
    assert rounds(results) == [("A", 2, 2), ("B", 2, 1), ("C", 1, 0)]  # a refused connection reached no judge


def _decisions(client: httpx.Client, trace_id: str) -> list[dict[str, Any]]:
    got = client.get(f"/v1/traces/{trace_id}")
    return list(got.json()["decisions"]) if got.status_code == 200 else []


def _send(client: httpx.Client, answers: list[str]) -> list[str]:
    provider = TracerProvider(resource=Resource.create({"service.name": "chat-api"}))
    exporter = CheckedExporter(f"{client.base_url}/v1/traces")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests.online.model_calls")
    traces = []
    for answer in answers:
        with tracer.start_as_current_span("chat", attributes={"ag.data.outputs": answer}) as root:
            traces.append(format(root.get_span_context().trace_id, "032x"))
    provider.shutdown()
    assert exporter.delivered(), f"the service did not take every trace: exports {exporter.results}"
    return traces


def _judge_rule(client: httpx.Client, host: str, limits: dict[str, int] | None) -> str:
    body = {
        "name": "judge",
        "language": "python",
        "code": JUDGE,
        "network": [host],
        "settings": {"env": {"OPENAI_BASE_URL": f"http://{host}/v1"}},
    }
    made = client.post("/v1/evaluators", json=body)
    assert made.status_code == 201, made.text
    rule = client.post("/v1/online-rules", json={"evaluator_id": made.json()["id"], "limits": limits})
    assert rule.status_code == 201, rule.text
    return str(rule.json()["id"])


def _env(port: int) -> dict[str, str]:
    return {
        **ENV,
        "EVALUATOR_HOST_NETWORK_ALLOW": f"llm.local:{port}",
        "EVALUATOR_HOST_EGRESS_HOSTS": json.dumps({"llm.local": "127.0.0.1"}),
        "EVALUATOR_HOST_ONLINE_BUDGET_MINUTE_S": str(MINUTE_S),
    }


# the process backend reaches a judge only through its namespaces: without them there is no egress to test
EGRESS_BACKENDS: list[Any] = [
    pytest.param("process", marks=pytest.mark.skipif(probe().mode == "rlimits", reason="no namespaces: no egress")),
    *BACKENDS[1:],
]


def _over_the_budget(tmp_path: Path, backend: str) -> None:
    """The scenario of the budget test below (``test_over_model_calls_per_minute_...``)."""
    with llm_server() as judge, serving(tmp_path, backend, env=_env(judge.port)) as (client, _proc):
        rule = _judge_rule(client, f"llm.local:{judge.port}", {"model_calls_per_minute": 2})
        answers = [f"answer-{i}" for i in range(4)]
        traces = _send(client, answers)

        # What is decided when depends on how long each run takes (a docker worker's start with its egress gate,
        # a retried run, the machine's load): two rows scored while the other two are delayed at one instant is
        # one interleaving, not the contract (stop 67's full run never saw it in 180 s). The contract, checked
        # over the whole run: every trace held back is seen "delayed" by the budget (with when it resumes, its
        # claim not counted as an attempt), the rule's pace is the proxy's count of calls (at least one, never
        # past the budget), and the judge never gets three calls in a minute (below, from its own clock).
        now: dict[str, str] = {}
        delayed: dict[str, dict[str, Any]] = {}  # trace -> its first "delayed" decision seen
        retried: set[str] = set()  # traces seen "retrying": their later claims count attempts already spent
        paces: list[int] = []

        def held_and_paced() -> bool:
            for trace_id in traces:
                for d in _decisions(client, trace_id):
                    now[trace_id] = d["decision"]
                    if d["decision"] == "delayed":
                        delayed.setdefault(trace_id, d)
                    elif d["decision"] == "retrying":
                        retried.add(trace_id)
            paces.append(client.get(f"/v1/online-rules/{rule}/stats").json()["pace"]["model_calls_last_minute"])
            assert paces[-1] <= 2, paces  # the proxy's count of the rule's calls in the last minute
            scored = [t for t in traces if now.get(t) == "scored"]
            return len(scored) >= 2 and len(delayed) >= 2 and max(paces) >= 1

        def told() -> str:  # what a timeout says: each trace's decision now, those seen delayed, the judge's calls
            return (
                f"2 traces scored, 2 seen delayed by model_calls_per_minute, a pace of at least one call (now {now}, "
                f"delayed {sorted(delayed)}, paces seen {sorted(set(paces))}, judge calls {judge.calls()})"
            )

        wait_until(held_and_paced, 180, 0.1, what=told)
        for trace_id, d in delayed.items():
            assert d["reason"].startswith("over the budget model_calls_per_minute = 2: resumes at "), d
            assert d["until"] is not None, d
            assert trace_id in retried or d["attempts"] == 0, d  # a delayed claim is no attempt
        assert client.get(f"/v1/online-rules/{rule}/stats").json()["pace"]["limits"] == {"model_calls_per_minute": 2}

        def all_scored() -> bool:
            return all(d["decision"] == "scored" for t in traces for d in _decisions(client, t))

        wait_until(all_scored, 240, 0.5, what="every trace scored once the minute's calls aged out")
        scores = client.get(f"/v1/online-rules/{rule}/scores").json()["data"]
        assert len(scores) == 4 and {(s["status"], s["score"]) for s in scores} == {("ok", 1.0)}  # never dropped
        arrivals = sorted(t for a in answers for t in judge.arrivals[a])
        assert len(arrivals) == 4  # one call each: none refused, none lost
        assert arrivals[2] - arrivals[0] >= MINUTE_S and arrivals[3] - arrivals[1] >= MINUTE_S  # never 3 in a minute


def _a_429(tmp_path: Path, backend: str) -> None:
    """The scenario of the 429 test below (``test_a_429_the_proxy_sees_...``)."""
    with llm_server() as judge, serving(tmp_path, backend, env=_env(judge.port)) as (client, _proc):
        answers = [f"answer-{i}" for i in range(6)]
        for answer in answers:
            judge.plan(answer, [429, 200])  # half the judge's calls refused: each one's first
        rule = _judge_rule(client, f"llm.local:{judge.port}", None)
        traces = _send(client, answers)

        def all_scored() -> bool:
            return all(d["decision"] == "scored" for t in traces for d in _decisions(client, t))

        def state() -> str:  # a timeout shows: whether each trace arrived, its decisions, the scores, the judge
            seen = {t: (client.get(f"/v1/traces/{t}").status_code, _decisions(client, t)) for t in traces}
            stored = client.get(f"/v1/online-rules/{rule}/scores").json()["data"]
            got = [(s.get("trace_id"), s["status"], s.get("error")) for s in stored]
            return f"every trace scored despite the 429s: decisions {seen}; scores {got}; judge {judge.received}"

        wait_until(all_scored, 180, 0.1, what=state)
        scores = client.get(f"/v1/online-rules/{rule}/scores").json()["data"]
        assert len(scores) == 6 and {(s["status"], s["score"]) for s in scores} == {("ok", 1.0)}  # 0 failed
        assert all(judge.received[a] == 2 for a in answers)  # refused once, then answered
        stats = client.get(f"/v1/online-rules/{rule}/stats").json()
        ceiling = 64 * 4  # online_scoring_batch x online_scoring_concurrency, the defaults
        assert 1 <= stats["pace"]["concurrency"] < ceiling  # halved on the 429s the proxy saw
        assert stats["decisions"].get("failed", 0) == 0


@pytest.fixture(scope="module")
def cases(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cases]:
    """The service tests below, each backend's, run at once (tests/support/at_once.py): each waits out the
    budget's minute or its services' start, together instead of one after another."""
    scenarios = {
        "test_over_model_calls_per_minute_traces_are_delayed_then_all_scored_within_the_budget_at_the_judge": (
            _over_the_budget
        ),
        "test_a_429_the_proxy_sees_slows_the_rule_and_the_rows_it_failed_are_scored_again": _a_429,
    }
    with at_once(request, scenarios, tmp_path_factory) as started:
        yield started


@pytest.mark.slow
@pytest.mark.parametrize("backend", EGRESS_BACKENDS)
def test_over_model_calls_per_minute_traces_are_delayed_then_all_scored_within_the_budget_at_the_judge(
    cases: Cases, request: pytest.FixtureRequest, backend: str
) -> None:
    cases.outcome(request)  # _over_the_budget(tmp_path, backend), its assertions


@pytest.mark.slow
@pytest.mark.parametrize("backend", EGRESS_BACKENDS)
def test_a_429_the_proxy_sees_slows_the_rule_and_the_rows_it_failed_are_scored_again(
    cases: Cases, request: pytest.FixtureRequest, backend: str
) -> None:
    cases.outcome(request)  # _a_429(tmp_path, backend), its assertions
