"""Shadow revisions on a rule (issue 53), end to end: an app instrumented with the OpenTelemetry SDK sends a seeded
stream of traces to the real service (``evaluator-host serve``: process and docker, SQLite and PostgreSQL); the
rule's live revision and its candidate disagree on a known subset, and ``GET /v1/online-rules/{id}/shadow``
counts the flips exactly; the candidate's scores never reach the rule's scores, stats, review queues, ``rules
scores`` or the OTLP export. A promotion takes effect for the next target and no target is ever scored twice
by the live revision (counted per (rule, trace, revision) in the database)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind
from sqlalchemy import func, select

from evaluator_host.client import Client, ConflictError
from evaluator_host.store.db import make_engine
from evaluator_host.store.online.rows import OnlineScoreRow, OnlineShadowScoreRow
from tests.support import REPO, zygote
from tests.support.backends import docker_only, postgres_only
from tests.support.otlp import collector
from tests.support.service import serving
from tests.support.wait import wait_until

ENV = {
    "EVALUATOR_HOST_ONLINE_QUIET_PERIOD_S": "0.2",
    "EVALUATOR_HOST_ONLINE_ASSEMBLY_S": "0.05",
    "EVALUATOR_HOST_ONLINE_POLL_S": "0.05",
}
# revision 1 fails a question with an "x" in it, revision 2 one with a "y": "x" only flips fail -> pass,
# "y" only pass -> fail, both or neither agree
_CODE = (
    "def evaluate(inputs, outputs, trace):\n"
    "    bad = {bad!r} in str(inputs)\n"
    "    return {{'score': 0.0 if bad else 1.0, 'passed': not bad, 'label': {label!r}}}\n"
)
SETUPS = [
    pytest.param("process", "sqlite", id="process-sqlite"),
    pytest.param("docker", "sqlite", id="docker-sqlite", marks=[pytest.mark.docker, docker_only]),
    pytest.param("process", "postgres", id="process-postgres", marks=[postgres_only]),
]


def _send(base: str, questions: list[str]) -> list[str]:
    """One chat trace per question from an app instrumented with the OpenTelemetry SDK (OTLP/HTTP)."""
    provider = TracerProvider(resource=Resource.create({"service.name": "chat"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces", timeout=10)))
    tracer = provider.get_tracer("tests.online.shadow")
    sent = []
    for q in questions:
        attributes = {"ag.data.inputs.question": q, "ag.data.outputs": "an answer"}
        with tracer.start_as_current_span("chat", kind=SpanKind.SERVER, attributes=attributes) as root:
            with tracer.start_as_current_span("llm", kind=SpanKind.CLIENT):
                pass
            sent.append(format(root.get_span_context().trace_id, "032x"))
    provider.shutdown()
    return sent


def _evaluator(client: httpx.Client, first: str, second: str) -> str:
    """An evaluator with revision 1 from ``first`` and revision 2 from ``second`` (code)."""
    made = client.post("/v1/evaluators", json={"name": "shadowed", "language": "python", "code": first})
    assert made.status_code == 201, made.text
    ev = str(made.json()["id"])
    again = client.put(f"/v1/evaluators/{ev}", json={"name": "shadowed", "language": "python", "code": second})
    assert again.status_code == 200 and again.json()["revision"] == 2, again.text
    return ev


def _per_revision(url: str, rule_id: str) -> tuple[dict[tuple[str, int | None], int], dict[tuple[str, int], int]]:
    """Live rows and shadow rows of ``rule_id`` counted per (trace, revision), read from the database."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            s, x = OnlineScoreRow, OnlineShadowScoreRow
            live = conn.execute(
                select(s.trace_id, s.revision, func.count())
                .where(s.rule_id == rule_id)
                .group_by(s.trace_id, s.revision)
            ).all()
            shadow = conn.execute(
                select(x.trace_id, x.revision, func.count())
                .where(x.rule_id == rule_id)
                .group_by(x.trace_id, x.revision)
            ).all()
    finally:
        engine.dispose()
    return {(t, r): int(n) for t, r, n in live}, {(t, int(r)): int(n) for t, r, n in shadow}


def _database(request: pytest.FixtureRequest, tmp_path: Path, database: str) -> tuple[str | None, str]:
    """The service's database URL (None: its data dir's SQLite file) and the URL the test reads it by."""
    if database == "postgres":
        url = str(request.getfixturevalue("postgres").database())
        return url, url
    return None, f"sqlite:///{tmp_path / 'evaluator-host.db'}"


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "database"), SETUPS)
def test_a_candidate_revisions_flips_are_counted_exactly_and_its_scores_are_never_the_rules(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str, database: str
) -> None:
    draw = random.Random(53)
    questions = [f"q{i} " + draw.choice(["", "x", "y", "xy"]) for i in range(16)]
    want = {
        "fail_to_pass": sum(1 for q in questions if "x" in q and "y" not in q),
        "pass_to_fail": sum(1 for q in questions if "y" in q and "x" not in q),
    }
    assert want["fail_to_pass"] and want["pass_to_fail"]  # the seed gives both kinds
    mean_delta = (want["fail_to_pass"] - want["pass_to_fail"]) / len(questions)
    served_url, read_url = _database(request, tmp_path, database)
    with collector() as got:
        env = {**ENV, "EVALUATOR_HOST_ONLINE_EXPORT_ENDPOINT": got.endpoint}
        with serving(tmp_path, backend, database_url=served_url, env=env) as (client, _proc):
            ev = _evaluator(client, _CODE.format(bad="x", label="v1"), _CODE.format(bad="y", label="v2"))
            made = client.post("/v1/online-rules", json={"evaluator_id": ev, "revision": 1, "candidate_revision": 2})
            assert made.status_code == 201 and made.json()["candidate_revision"] == 2, made.text
            rule_id = made.json()["id"]
            queue = client.post(
                "/v1/review-queues", json={"name": "all", "source": {"rule_id": rule_id}, "sample": 1.0, "limit": 100}
            )
            assert queue.status_code == 201, queue.text
            sent = _send(str(client.base_url), questions)

            def compared() -> dict[str, Any] | None:
                answer = client.get(f"/v1/online-rules/{rule_id}/shadow").json()
                return answer if answer["compared"] == len(sent) else None

            shadow = wait_until(compared, 300, 0.2, what="every trace scored by both revisions")
            assert shadow["flips"] == want and shadow["candidate_revision"] == 2 and shadow["pending_candidate"]
            assert shadow["live_revision"] == 1 and shadow["mean_delta"] == pytest.approx(mean_delta)
            assert shadow["same_passed"] == len(sent) - want["fail_to_pass"] - want["pass_to_fail"]
            assert shadow["errors"] == {"live": 0, "candidate": 0} and shadow["scored"] == len(sent)
            flipped = [e for e in shadow["examples"] if e["flip"]]
            assert len(flipped) == sum(want.values())  # flips listed first
            for e in flipped:
                assert (e["live"]["revision"], e["candidate"]["revision"]) == (1, 2)
                assert e["live"]["label"] == "v1" and e["candidate"]["label"] == "v2" and e["trace_id"] in sent
            assert shadow["agreement_with_reviews"] is None and "no review verdicts" in shadow["agreement_reason"]

            # the rule's own scores, stats, review queue and `rules scores`: the live revision's only
            scores = client.get(f"/v1/online-rules/{rule_id}/scores").json()
            assert scores["count"] == len(sent) and {s["revision"] for s in scores["data"]} == {1}
            stats = client.get(f"/v1/online-rules/{rule_id}/stats?bucket=3600").json()
            assert sum(b["count"] for b in stats["buckets"]) == len(sent)
            assert stats["decisions"] == {"scored": len(sent)}
            items = client.get(f"/v1/review-queues/{queue.json()['id']}/items").json()["data"]
            assert len(items) == len(sent) and {i["revision"] for i in items} == {1}
            listed = zygote.run(
                [sys.executable, "-m", "evaluator_host.cli", "rules", "scores", rule_id, "--json", "--server",
                 str(client.base_url)],
                cwd=REPO, capture_output=True, text=True, timeout=120, check=True,
            )  # fmt: skip
            rows = [json.loads(line) for line in listed.stdout.splitlines()]
            assert len(rows) == len(sent) and {(r["revision"], r["label"]) for r in rows} == {(1, "v1")}
            live, candidate = _per_revision(read_url, rule_id)
            assert live == {(t, 1): 1 for t in sent} and candidate == {(t, 2): 1 for t in sent}
        # the service stopped: its exporter flushed what it had; every exported score is the live revision's
        exported = [s for s in got.received() if s.trace_id in set(sent)]
    assert len(exported) == len(sent)
    assert {(s.attributes["evaluator_host.revision"], s.attributes["evaluator_host.rule_id"]) for s in exported} == {
        (1, rule_id)
    }


SLOW_V1 = (
    "import time\n"
    "def evaluate(inputs, outputs, trace):\n"
    "    time.sleep(0.5)\n"
    "    return {'score': 1.0, 'passed': True, 'label': 'v1'}\n"
)
FAST_V2 = "def evaluate(inputs, outputs, trace):\n    return {'score': 0.0, 'passed': False, 'label': 'v2'}\n"


def _cli(action: str, rule_id: str, server: str, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "evaluator_host.cli", "rules", action, rule_id, "--server", server, *extra]
    return zygote.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)


def _states(client: httpx.Client, rule_id: str) -> dict[str, str]:
    data = client.get(f"/v1/online-rules/{rule_id}/scores").json()["data"]
    return {s["trace_id"]: s["state"] for s in data}


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "database"), SETUPS)
def test_a_promotion_takes_effect_for_the_next_target_and_never_scores_one_twice(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str, database: str
) -> None:
    served_url, read_url = _database(request, tmp_path, database)
    # one row at a time, each held by the slow live revision: targets wait in the queue at the promotion
    env = {**ENV, "EVALUATOR_HOST_ONLINE_SCORING_BATCH": "1", "EVALUATOR_HOST_ONLINE_SCORING_CONCURRENCY": "1"}
    with serving(tmp_path, backend, database_url=served_url, env=env) as (client, _proc):
        ev = _evaluator(client, SLOW_V1, FAST_V2)
        rule_id = client.post("/v1/online-rules", json={"evaluator_id": ev, "revision": 1}).json()["id"]
        api = Client(str(client.base_url))  # the Python client sets the candidate and promotes it
        assert api.set_candidate_revision(rule_id, 2).candidate_revision == 2
        first = _send(str(client.base_url), [f"first {i}" for i in range(6)])

        def some_done_some_queued() -> bool:
            states = _states(client, rule_id)
            return (
                len(states) == len(first) and "done" in states.values() and list(states.values()).count("queued") >= 3
            )

        wait_until(some_done_some_queued, 300, 0.05, what="a target scored and others queued")
        done_before = {t for t, s in _states(client, rule_id).items() if s == "done"}
        promoted = api.promote_rule(rule_id)
        assert (promoted.previous_revision, promoted.revision) == (1, 2)
        assert promoted.rule.revision == 2 and promoted.rule.candidate_revision is None
        queued_after = {t for t, s in _states(client, rule_id).items() if s == "queued"}
        assert queued_after, "no target was left queued at the promotion"
        with pytest.raises(ConflictError, match="no candidate revision"):
            api.promote_rule(rule_id)
        again = _cli("promote", rule_id, str(client.base_url))
        assert again.returncode == 2 and "no candidate revision" in again.stderr, again.stderr
        nxt = _send(str(client.base_url), ["next"])

        def all_done() -> bool:
            states = _states(client, rule_id)
            return len(states) == len(first) + 1 and set(states.values()) == {"done"}

        wait_until(all_done, 300, 0.1, what="every target scored")
        live, candidate = _per_revision(read_url, rule_id)
        per_trace: dict[str, int] = {}
        for (trace, _rev), n in live.items():
            per_trace[trace] = per_trace.get(trace, 0) + n
        assert per_trace == {t: 1 for t in [*first, *nxt]}  # one live score per target, whatever its revision
        assert all(n == 1 for n in candidate.values())
        assert {(t, 1) for t in done_before} <= set(live)  # scored before: by revision 1, and by the candidate
        assert {(t, 2) for t in done_before} <= set(candidate)
        assert {(t, 2) for t in queued_after} <= set(live)  # queued at the promotion: by revision 2, live, once
        assert not {t for t, _ in candidate} & queued_after
        assert (nxt[0], 2) in live and not any(t == nxt[0] for t, _ in candidate)  # no candidate any more
        shadow = api.rule_shadow(rule_id)  # the promoted one's comparison stays
        assert shadow.candidate_revision == 2 and not shadow.pending_candidate and shadow.live_revision == 2
        assert shadow.compared == len(candidate) and shadow.flips.pass_to_fail == len(candidate)
        listed = _cli("shadow", rule_id, str(client.base_url), "--json")
        assert listed.returncode == 0 and json.loads(listed.stdout) == shadow.model_dump(mode="json"), listed.stderr
        table = _cli("shadow", rule_id, str(client.base_url))
        assert table.returncode == 0 and "pass_to_fail" in table.stdout and "candidate_revision" in table.stdout
        assert "agreement with reviews: none" in table.stdout
        api.close()
