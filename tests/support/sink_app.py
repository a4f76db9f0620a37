"""A chat app instrumented with the real OpenTelemetry SDK, and the waits of the score-sink tests
(tests/online/test_sinks_*.py)."""

from __future__ import annotations

from typing import Any

import httpx
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from tests.support.wait import wait_until

__all__ = ["App", "evaluator", "forwarding_env", "job_delivered", "scores", "settled", "trace_and_span_rules"]


class App:
    """A chat app instrumented with the OpenTelemetry SDK (OTLP/HTTP, a span exported as it ends)."""

    def __init__(self, base: str) -> None:
        self.provider = TracerProvider(resource=Resource.create({"service.name": "chat-api"}))
        self.provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces")))
        self.tracer = self.provider.get_tracer("tests.sinks")

    def request(self, answer: str, session: str | None = None) -> tuple[str, str, str]:
        """One trace: a SERVER root with ag.data (and ``session.id``, given a ``session``) and an LLM child;
        (trace id, root span id, llm span id)."""
        attributes = {"ag.data.inputs.question": "2+2?", "ag.data.outputs": answer}
        if session is not None:
            attributes["session.id"] = session
        with self.tracer.start_as_current_span("chat", kind=SpanKind.SERVER, attributes=attributes) as root:
            with self.tracer.start_as_current_span("llm", kind=SpanKind.CLIENT) as llm:
                llm.set_attribute("gen_ai.operation.name", "chat")
            ids = root.get_span_context(), llm.get_span_context()
        return format(ids[0].trace_id, "032x"), format(ids[0].span_id, "016x"), format(ids[1].span_id, "016x")


def evaluator(client: httpx.Client, code: str) -> str:
    made = client.post("/v1/evaluators", json={"name": "facts", "language": "python", "code": code})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def scores(client: httpx.Client, rule: str) -> list[dict[str, Any]]:
    return list(client.get(f"/v1/online-rules/{rule}/scores").json()["data"])


def settled(client: httpx.Client, rule: str, n: int) -> list[dict[str, Any]]:
    def done() -> list[dict[str, Any]] | None:
        listed = scores(client, rule)
        finished = [s for s in listed if s["sinks"] and all(x["state"] in ("delivered", "failed") for x in s["sinks"])]
        return listed if len(finished) == n else None

    return wait_until(done, 120, 0.2, what=f"{n} scores of {rule} delivered")


def forwarding_env(endpoint: str, host: str, **extra: str) -> dict[str, str]:
    """A service's environment for a sink test: fast online passes, its spans forwarded to ``endpoint``
    (the tool's OTLP receiver), and the sink's name ``host`` pinned to loopback."""
    return {
        "EVALUATOR_HOST_ONLINE_QUIET_PERIOD_S": "0.2",
        "EVALUATOR_HOST_ONLINE_ASSEMBLY_S": "0.05",
        "EVALUATOR_HOST_ONLINE_POLL_S": "0.05",
        "EVALUATOR_HOST_OTLP_FORWARD_ENDPOINT": endpoint,
        "EVALUATOR_HOST_EGRESS_HOSTS": f'{{"{host}": "127.0.0.1"}}',
        **extra,
    }


def trace_and_span_rules(
    client: httpx.Client, sink: dict[str, Any], trace_code: str, span_code: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two rules writing into ``sink``: ``facts`` scoring each trace, and ``llm-ok`` each span named ``llm``."""
    trace_rule = client.post(
        "/v1/online-rules", json={"evaluator_id": evaluator(client, trace_code), "name": "facts", "sinks": [sink]}
    ).json()
    span_rule = client.post(
        "/v1/online-rules",
        json={
            "evaluator_id": evaluator(client, span_code),
            "target": {"level": "span"},
            "filter": {"span_name": "llm"},
            "sinks": [{**sink, "name": "llm-ok"}],
        },
    ).json()
    return trace_rule, span_rule


def job_delivered(client: httpx.Client, job_id: str, delivered: int) -> dict[str, Any]:
    """The job once it finished and its sinks hold no pending row (``delivered`` of them delivered)."""

    def done() -> dict[str, Any] | None:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in ("queued", "running") or any(s["pending"] for s in job["sinks"]):
            return None
        assert job["sinks"][0]["delivered"] == delivered, job["sinks"]
        return dict(job)

    return wait_until(done, 120, 0.2, what=f"job {job_id}'s rows delivered")
