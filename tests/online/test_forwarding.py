"""Forwarding (issue 52, online/receive/forwarding.py): every span the real service receives — OTLP/HTTP protobuf,
OTLP/JSON, OTLP/gRPC — reaches a real OTLP receiver on loopback unchanged (the ResourceSpans byte for
byte), with the configured headers and their secrets filled in (never logged); a dead endpoint keeps
ingestion answering, holds at most the bound and counts what it dropped; a workspace's own endpoint is
held to its network_allow and to public addresses unless the operator pinned the name."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from evaluator_host.errors import SecretError
from evaluator_host.observability.metrics import Metrics
from evaluator_host.online.receive.forwarding import Forwarder, Target
from evaluator_host.settings import Settings
from tests.support.otlp import Collector, collector
from tests.support.service import free_port, serving
from tests.support.wait import wait_until

KEY = "forwarding-test-key-0123456789abcdef"
ADMIN = "forwarding-admin-key-0123456789abcdef"
TOKEN = "s3cr3t-phoenix-token-4f9a2c"
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _request(service: str, n: int = 2, text: str = "hello") -> ExportTraceServiceRequest:
    """A request an app instrumented with the real SDK sends: ``n`` traces of a SERVER root and an LLM child."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service, "deployment.environment": "test"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests.forwarding", "1.0")
    for i in range(n):
        with tracer.start_as_current_span("chat", kind=SpanKind.SERVER, attributes={"user.id": f"u-{i}"}):
            with tracer.start_as_current_span("llm", kind=SpanKind.CLIENT) as llm:
                llm.set_attribute("gen_ai.request.model", "gpt-4o-mini")
                llm.set_attribute("gen_ai.input.messages", json.dumps([{"role": "user", "content": text}]))
                llm.add_event("gen_ai.choice", {"index": 0})
    provider.shutdown()
    return encode_spans(memory.get_finished_spans())


def _resource_spans(bodies: list[bytes]) -> list[bytes]:
    out = []
    for body in bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        out.extend(rs.SerializeToString() for rs in request.resource_spans)
    return out


def _metric(client: httpx.Client, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} (\S+)$", client.get("/metrics").text, re.M)
    return float(found.group(1)) if found else 0.0


@pytest.fixture
def receiver() -> Iterator[Collector]:
    with collector() as got:
        yield got


def test_spans_over_http_json_and_grpc_arrive_byte_equal_with_secret_headers_never_logged(
    tmp_path: Path, receiver: Collector, capfd: pytest.CaptureFixture[str]
) -> None:
    grpc_port = free_port()
    refusing = "http://127.0.0.1:1/v1/traces"  # nothing listens: retried, and its errors logged
    env = {
        "EVALUATOR_HOST_API_KEYS": KEY,
        "EVALUATOR_HOST_OTLP_GRPC_PORT": str(grpc_port),
        "EVALUATOR_HOST_OTLP_FORWARD_ENDPOINT": f"{receiver.endpoint},{refusing}",
        "EVALUATOR_HOST_OTLP_FORWARD_HEADERS": "authorization=Bearer%20{{secret:PHX_TOKEN}},x-team=evals",
        "EVALUATOR_HOST_LOG_LEVEL": "DEBUG",
    }
    auth = {"Authorization": f"Bearer {KEY}"}
    with serving(tmp_path, "process", env=env) as (client, _proc):
        assert client.put("/v1/secrets/PHX_TOKEN", json={"value": TOKEN}, headers=auth).status_code in (200, 201, 204)
        proto = _request("chat-proto")
        sent = proto.SerializeToString()
        answer = client.post(
            "/v1/traces",
            content=gzip.compress(sent),
            headers={**auth, "Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
        )
        assert answer.status_code == 200, answer.text
        as_json = _request("chat-json", text="héllo ✓")
        body = json.dumps(MessageToDict(as_json)).encode()
        answer = client.post("/v1/traces", content=body, headers={**auth, "Content-Type": "application/json"})
        assert answer.status_code == 200, answer.text
        over_grpc = _request("chat-grpc").SerializeToString()
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            channel.unary_unary(EXPORT)(over_grpc, metadata=(("authorization", f"Bearer {KEY}"),), timeout=30)
        want = [*_resource_spans([sent]), *[rs.SerializeToString() for rs in as_json.resource_spans]]
        want += _resource_spans([over_grpc])

        def arrived() -> bool:
            with receiver.lock:
                return len(_resource_spans(list(receiver.bodies))) >= len(want)

        wait_until(arrived, 30, what="the forwarded spans")
        with receiver.lock:
            bodies, headers = list(receiver.bodies), list(receiver.headers)
        assert sorted(_resource_spans(bodies)) == sorted(want)  # every ResourceSpans, byte for byte
        assert sent in b"".join(bodies) and over_grpc in b"".join(bodies)  # protobuf requests: the very bytes
        assert all(h["authorization"] == f"Bearer {TOKEN}" and h["x-team"] == "evals" for h in headers)
        assert all(h["content-type"] == "application/x-protobuf" for h in headers)
        wait_until(lambda: _metric(client, "evaluator_host_online_forward_requests_total{outcome=\"retried\"}") > 0,
                   30, what="a retry against the dead endpoint")  # fmt: skip
        # the forwarder counts a batch sent once the receiver's answer is back, which may come after the receiver
        # recorded the body: wait for the count rather than read it once
        wait_until(lambda: _metric(client, 'evaluator_host_online_forwarded_spans_total{outcome="sent"}') >= 12,
                   30, what="the forwarded spans counted sent")  # fmt: skip
        assert client.get("/healthz").status_code == 200
    out, err = capfd.readouterr()
    assert "127.0.0.1:1/v1/traces" in out + err  # the dead endpoint's retries are logged …
    assert TOKEN not in out + err  # … and the secret never is


def test_a_dead_endpoint_keeps_ingestion_answering_holds_the_bound_and_counts_the_drop(tmp_path: Path) -> None:
    bound = 64 * 1024
    env = {
        "EVALUATOR_HOST_OTLP_FORWARD_ENDPOINT": "http://127.0.0.1:1",  # nothing listens there, ever
        "EVALUATOR_HOST_ONLINE_FORWARD_MAX_BYTES": str(bound),
    }
    with serving(tmp_path, "process", env=env) as (client, _proc):
        body = _request("busy", n=20, text="x" * 2000).SerializeToString()
        assert len(body) > 40_000
        for _ in range(30):  # ~1.4 MB offered: 20 times the bound
            answer = client.post("/v1/traces", content=body, headers={"Content-Type": "application/x-protobuf"})
            assert answer.status_code == 200, answer.text
            assert _metric(client, "evaluator_host_online_forward_queued_bytes") <= bound
        dropped = _metric(client, 'evaluator_host_online_forwarded_spans_total{outcome="dropped"}')
        assert dropped >= 28 * 40  # every request past the first (the only one that fits) dropped, its spans counted
        assert _metric(client, 'evaluator_host_online_forwarded_spans_total{outcome="sent"}') == 0
        assert client.get("/healthz").status_code == 200
        assert client.get("/v1/traces?limit=1").json()["data"]  # the spans were stored all the same


async def _no_secrets(_workspace: str, names: list[str]) -> dict[str, str]:
    if names:
        raise SecretError(f"the span forwarding's headers secret(s) this workspace does not have: {names}")
    return {}


async def _forward(receiver: Collector, target: Target, allow: list[str], pins: dict[str, str]) -> Metrics:
    """One request offered to a Forwarder of workspace ws_a sending to ``target``; its metrics once settled."""
    metrics = Metrics()
    settings = Settings(egress_hosts=pins)
    forwarder = Forwarder(
        settings, metrics, lambda ws: (target,) if ws == "ws_a" else (), _no_secrets, lambda _ws: allow, lambda: False
    )
    forwarder.start()
    try:
        forwarder.offer("ws_a", _request("ws-a").SerializeToString(), 4)
        forwarder.offer("ws_b", b"not forwarded: ws_b has no target", 1)
        for _ in range(200):
            if not forwarder.held_bytes:
                break
            await asyncio.sleep(0.05)
        assert forwarder.held_bytes == 0
    finally:
        await forwarder.close()
    return metrics


def _count(metrics: Metrics, outcome: str) -> float:
    return float(metrics.forwarded.labels(outcome)._value.get())


def test_a_workspace_endpoint_goes_only_to_a_pinned_or_public_allowed_host(receiver: Collector) -> None:
    port = receiver.port
    pinned = Target(f"http://otel.collector.test:{port}/v1/traces")
    allowed = asyncio.run(
        _forward(receiver, pinned, [f"otel.collector.test:{port}"], {"otel.collector.test": "127.0.0.1"})
    )
    assert _count(allowed, "sent") == 4 and len(receiver.bodies) == 1
    assert receiver.headers[0]["host"] == f"otel.collector.test:{port}"  # the checked address, named
    not_allowed = asyncio.run(_forward(receiver, pinned, [], {"otel.collector.test": "127.0.0.1"}))
    assert _count(not_allowed, "refused") == 4
    loopback = Target(f"http://localhost:{port}/v1/traces")  # resolves to 127.0.0.1: not public, not pinned
    private = asyncio.run(_forward(receiver, loopback, [f"localhost:{port}"], {}))
    assert _count(private, "refused") == 4
    literal = Target(f"http://127.0.0.1:{port}/v1/traces")
    assert _count(asyncio.run(_forward(receiver, literal, [f"127.0.0.1:{port}"], {})), "refused") == 4
    missing = Target(f"http://otel.collector.test:{port}/v1/traces", (("authorization", "{{secret:NOPE}}"),))
    pins = {"otel.collector.test": "127.0.0.1"}
    assert _count(asyncio.run(_forward(receiver, missing, [f"otel.collector.test:{port}"], pins)), "refused") == 4
    assert len(receiver.bodies) == 1  # nothing but the allowed request arrived


def test_the_operator_sets_a_workspace_forwarding_and_its_spans_arrive(tmp_path: Path, receiver: Collector) -> None:
    port = receiver.port
    env = {"EVALUATOR_HOST_ADMIN_KEY": ADMIN, "EVALUATOR_HOST_EGRESS_HOSTS": '{"phoenix.internal": "127.0.0.1"}'}
    op = {"Authorization": f"Bearer {ADMIN}"}
    with serving(tmp_path, "process", env=env) as (client, _proc):
        ws = client.post("/v1/workspaces", json={"name": "team"}, headers=op).json()["id"]
        key = client.post(f"/v1/workspaces/{ws}/keys", json={"name": "app"}, headers=op).json()["key"]
        auth = {"Authorization": f"Bearer {key}"}
        assert client.put("/v1/secrets/PHX", json={"value": TOKEN}, headers=auth).status_code in (200, 201, 204)
        bad = client.patch(f"/v1/workspaces/{ws}", json={"forwarding": [{"endpoint": "ftp://x/y"}]}, headers=op)
        assert bad.status_code == 422
        forwarding = [{"endpoint": f"http://phoenix.internal:{port}", "headers": {"authorization": "{{secret:PHX}}"}}]
        patch = {"network_allow": [f"phoenix.internal:{port}"], "forwarding": forwarding}
        answer = client.patch(f"/v1/workspaces/{ws}", json=patch, headers=op)
        assert answer.status_code == 200, answer.text
        assert answer.json()["forwarding"] == forwarding  # the template, never the secret's value
        assert TOKEN not in client.get(f"/v1/workspaces/{ws}", headers=op).text
        sent = _request("team-app").SerializeToString()
        answer = client.post("/v1/traces", content=sent, headers={**auth, "Content-Type": "application/x-protobuf"})
        assert answer.status_code == 200
        wait_until(lambda: len(receiver.bodies) >= 1, 30, what="the workspace's forwarded spans")
        assert receiver.bodies == [sent] and receiver.headers[0]["authorization"] == TOKEN
        off = client.patch(f"/v1/workspaces/{ws}", json={"forwarding": []}, headers=op)
        assert off.json()["forwarding"] == []
