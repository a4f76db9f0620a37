"""Why each (rule, trace) was or wasn't scored (issue 51), end to end: an app instrumented with the real
OpenTelemetry SDK exports OTLP/HTTP to a started service (``evaluator-host serve``) on each backend, and
``GET /v1/traces/{id}`` answers one decision per rule — ``not_ready`` while the root span is open,
then ``scored``, ``failed`` (the result's status and error), ``not_matched`` naming the first failed
filter condition, ``sampled_out``, ``dropped`` for a paused rule, per span at span level, and
``not_routed`` for a rule created afterwards (its reason names the rule's backfill, which then scores
the trace); a rule's stats count them per bucket. With a worker
memory budget no worker fits in, the sandbox's ``Overloaded`` makes the score ``retrying`` with that
error, until the last attempt stores ``failed`` (``sandbox_error``)."""

from __future__ import annotations

import contextlib
import re
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from tests.support.backends import BACKENDS, containers_gone
from tests.support.service import serving
from tests.support.wait import wait_until

ENV = {
    "EVALUATOR_HOST_ONLINE_QUIET_PERIOD_S": "0.2",
    "EVALUATOR_HOST_ONLINE_ASSEMBLY_S": "0.05",
    "EVALUATOR_HOST_ONLINE_POLL_S": "0.05",
}
GOOD = "def evaluate(inputs, outputs, trace):\n    return {'score': 1.0, 'passed': True, 'label': 'fine'}\n"
BROKEN = "def evaluate(inputs, outputs, trace):\n    raise ValueError('the judge broke')\n"
HOLD = "import time\n\ndef evaluate(inputs, outputs, trace):\n    time.sleep(90)\n    return 1.0\n"


def _call(base: str, evaluator_id: str, answers: list[str] | None = None) -> None:
    """A long call of ``evaluator_id`` (the service may stop first); its answer, if any, appended to ``answers``."""
    with contextlib.suppress(httpx.HTTPError):
        answer = httpx.post(f"{base}/v1/evaluators/{evaluator_id}/evaluate", json={"outputs": "x"}, timeout=150)
        if answers is not None:
            answers.append(f"{answer.status_code} {answer.text[:600]}")


def _workers(client: httpx.Client) -> tuple[float, float, float]:
    """The service's (busy, idle, spare) workers as ``/metrics`` counts them."""
    text = client.get("/metrics").text

    def count(state: str) -> float:
        found = re.search(rf'^evaluator_host_pool_workers\{{state="{state}"\}} (\S+)$', text, re.M)
        return float(found.group(1)) if found else 0.0

    return count("busy"), count("idle"), count("spare")


def _known(client: httpx.Client, trace_id: str) -> bool:
    return client.get(f"/v1/traces/{trace_id}").status_code == 200


def _app(base: str) -> tuple[TracerProvider, Any]:
    exporter = OTLPSpanExporter(endpoint=f"{base}/v1/traces", timeout=10)
    provider = TracerProvider(resource=Resource.create({"service.name": "chat-api"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))  # each span exported as it ends
    return provider, provider.get_tracer("tests.online.decisions")


def _evaluator(client: httpx.Client, name: str, code: str, **settings: Any) -> str:
    body: dict[str, Any] = {"name": name, "language": "python", "code": code}
    if settings:
        body["settings"] = settings
    made = client.post("/v1/evaluators", json=body)
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def _rule(client: httpx.Client, **body: Any) -> str:
    made = client.post("/v1/online-rules", json=body)
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def _decisions(client: httpx.Client, trace_id: str) -> list[dict[str, Any]]:
    got = client.get(f"/v1/traces/{trace_id}")
    assert got.status_code == 200, got.text
    return list(got.json()["decisions"])


def _of(decisions: list[dict[str, Any]], rule_id: str, target: str | None = None) -> dict[str, Any]:
    found = [d for d in decisions if d["rule_id"] == rule_id and d["target"] == target]
    assert len(found) == 1, (rule_id, target, decisions)
    return found[0]


def _settled(client: httpx.Client, trace_id: str) -> list[dict[str, Any]] | None:
    decisions = _decisions(client, trace_id)
    waiting = {"not_ready", "queued", "running", "retrying", "delayed"}
    return None if any(d["decision"] in waiting for d in decisions) else decisions


def _counted(client: httpx.Client, rule_id: str) -> dict[str, int]:
    stats = client.get(f"/v1/online-rules/{rule_id}/stats?bucket=3600").json()
    summed: dict[str, int] = {}
    for bucket in stats["buckets"]:
        for name, n in bucket["decisions"].items():
            summed[name] = summed.get(name, 0) + n
    assert summed == stats["decisions"]
    return summed


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_rule_says_why_it_did_or_did_not_score_a_trace(tmp_path: Path, backend: str) -> None:
    with serving(tmp_path, backend, env=ENV) as (client, _proc):
        good, broken = _evaluator(client, "good", GOOD), _evaluator(client, "broken", BROKEN)
        scored = _rule(client, evaluator_id=good, filter={"service_name": "chat-api"})
        failed = _rule(client, evaluator_id=broken)
        billing = _rule(client, evaluator_id=good, filter={"service_name": "billing"})
        prod = _rule(
            client,
            evaluator_id=good,
            filter={"span_name": "llm", "attributes": [{"key": "deployment.environment", "equals": "prod"}]},
        )
        sampled = _rule(client, evaluator_id=good, sampling_rate=0.0)
        paused = _rule(client, evaluator_id=good, enabled=False)
        spans = _rule(client, evaluator_id=good, target={"level": "span"}, filter={"span_name": "llm"})

        provider, tracer = _app(str(client.base_url))
        with tracer.start_as_current_span("chat", kind=SpanKind.SERVER) as root:
            trace_id = format(root.get_span_context().trace_id, "032x")
            attributes = {"deployment.environment": "dev", "gen_ai.request.model": "m1"}
            with tracer.start_as_current_span("llm", kind=SpanKind.CLIENT, attributes=attributes) as llm:
                llm_id = format(llm.get_span_context().span_id, "016x")
            root_id = format(root.get_span_context().span_id, "016x")
            # the llm span is stored, the root still open: every rule waits, saying until when at the latest
            wait_until(lambda: client.get(f"/v1/traces/{trace_id}").status_code == 200, 60, 0.05, what="the span")
            waiting = _decisions(client, trace_id)
            assert {d["decision"] for d in waiting} == {"not_ready"} and len(waiting) == 7
            assert all("waiting for the root span to end" in d["reason"] and d["until"] for d in waiting)
        provider.shutdown()

        decisions = wait_until(lambda: _settled(client, trace_id), 300, 0.1, what="every decision final")
        assert _of(decisions, scored)["decision"] == "scored"
        assert _of(decisions, scored)["reason"] == "score 1.0, passed True, label 'fine'"
        assert _of(decisions, scored)["attempts"] == 1
        gone = _of(decisions, failed)
        assert gone["decision"] == "failed" and gone["reason"].startswith("status error: ValueError: the judge broke")
        miss = _of(decisions, billing)
        assert miss["decision"] == "not_matched"
        assert miss["reason"].startswith('service_name is "chat-api", not "billing" (span ')
        deep = _of(decisions, prod)  # the llm span got furthest: its name held, the attribute did not
        assert deep["decision"] == "not_matched"
        assert deep["reason"] == (
            f'attribute deployment.environment is "dev", not "prod" (span "llm" {llm_id}, the closest of 2 spans)'
        )
        out = _of(decisions, sampled)
        assert out["decision"] == "sampled_out" and out["reason"].startswith("sampling_rate 0:")
        off = _of(decisions, paused)
        assert (off["decision"], off["reason"]) == ("dropped", "the rule was paused when the trace was routed")
        assert _of(decisions, spans, llm_id)["decision"] == "scored"
        other = _of(decisions, spans, root_id)
        assert (other["decision"], other["reason"]) == ("not_matched", 'span_name is "chat", not "llm"')
        assert len(decisions) == 8

        late = _rule(client, evaluator_id=good)
        after = _of(_decisions(client, trace_id), late)
        assert after["decision"] == "not_routed"
        assert f"POST /v1/online-rules/{late}/backfill" in after["reason"]  # the advice, followed: it scores the trace
        started = client.post(f"/v1/online-rules/{late}/backfill", json={})
        assert started.status_code == 202, started.text

        def backfilled() -> bool:
            return bool(_of(_decisions(client, trace_id), late)["decision"] == "scored")

        wait_until(backfilled, 300, 0.1, what="the late rule's backfill to score the trace")

        assert _counted(client, scored) == {"scored": 1}
        assert _counted(client, failed) == {"failed": 1}
        assert _counted(client, billing) == {"not_matched": 1}
        assert _counted(client, sampled) == {"sampled_out": 1}
        assert _counted(client, paused) == {"dropped": 1}
        assert _counted(client, spans) == {"scored": 1}
        pending = client.get(f"/v1/online-rules/{scored}/stats").json()["pending"]
        assert pending == {"queued": 0, "running": 0, "retrying": 0, "delayed": 0}


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_an_infrastructure_error_says_retrying_with_the_error_until_the_last_attempt_fails(
    tmp_path: Path, backend: str
) -> None:
    # room for one worker (memory_mb 256), held by a long call of another evaluator: the rule's worker
    # cannot start — the sandbox answers Overloaded, an infrastructure error the scorer retries
    env = {**ENV, "EVALUATOR_HOST_MAX_WORKER_MEMORY_MB": "256", "EVALUATOR_HOST_ONLINE_MAX_ATTEMPTS": "2"}
    with serving(tmp_path, backend, env=env) as (client, proc):
        hold = _evaluator(client, "hold", HOLD, timeout_s=30)
        # its pre-warm first (a saved revision's first worker, started in the background): while it starts it
        # counts busy too, and a call arriving then found the memory held by the next pre-warm ("good"'s) —
        # the (1, 0, 0) below must be the long call's worker, not the pre-warm's (CI of stop 79)
        wait_until(lambda: _workers(client) == (0, 1, 0), 120, 0.1, what="the long call's pre-warmed worker, idle")
        held: list[str] = []  # the long call's answer: none while it holds the worker
        holder = threading.Thread(target=_call, args=(str(client.base_url), hold, held), daemon=True)
        holder.start()
        wait_until(lambda: _workers(client) == (1, 0, 0), 120, 0.1, what="the long call holding the only worker")
        rule = _rule(client, evaluator_id=_evaluator(client, "good", GOOD))
        assert not held, f"the long call ended before the trace was sent: {held}"
        provider, tracer = _app(str(client.base_url))
        with tracer.start_as_current_span("chat", kind=SpanKind.SERVER) as root:
            trace_id = format(root.get_span_context().trace_id, "032x")
        provider.shutdown()

        def retrying() -> dict[str, Any] | None:
            decision = _of(_decisions(client, trace_id), rule) if _known(client, trace_id) else None
            return decision if decision and decision["decision"] == "retrying" else None

        seen = wait_until(
            retrying,
            120,
            0.05,
            what=lambda: f"the score retrying: {_decisions(client, trace_id)}; the long call: {held}",
        )
        assert seen["reason"].startswith("attempt 1 failed: Overloaded: the workers alive hold")
        assert "max_worker_memory_mb" in seen["reason"] and seen["attempts"] == 1
        assert client.get(f"/v1/online-rules/{rule}/stats").json()["pending"]["retrying"] == 1
        final = wait_until(lambda: _settled(client, trace_id), 120, 0.1, what="the last attempt")
        last = _of(final, rule)
        assert last["decision"] == "failed" and last["attempts"] == 2
        assert last["reason"].startswith("status sandbox_error: SandboxError: gave up after 2 attempts: ")
        assert client.get("/healthz").status_code == 200
        # killed, not stopped: a stop drains the held call first, which ends only at its 30 s timeout; a killed
        # service's containers are its janitor's to remove
        proc.kill()
        proc.wait(30)
    if backend == "docker":
        containers_gone(tmp_path)
