"""OTLP/gRPC in (issue 51): the OpenTelemetry Python SDK's real gRPC exporter sends to the real
service (``evaluator-host serve`` with ``EVALUATOR_HOST_OTLP_GRPC_PORT``); its spans land in the
workspace of the ``authorization`` metadata's key and a rule there scores them. Without a key, with an
unknown one, over a decode bound or past the span store's share, the refusal is the gRPC status the
OTLP specification names (RetryInfo only on the retryable one), and the service keeps serving."""

from __future__ import annotations

import datetime
import functools
import ipaddress
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from fastapi.testclient import TestClient
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from evaluator_host.api import create_app
from tests.support.service import free_port, make_settings, serving
from tests.support.wait import wait_until

ADMIN = "admin-key-for-otlp-grpc-tests-0123456789"
ENV = {
    "EVALUATOR_HOST_ADMIN_KEY": ADMIN,
    "EVALUATOR_HOST_ONLINE_QUIET_PERIOD_S": "0.2",
    "EVALUATOR_HOST_ONLINE_ASSEMBLY_S": "0.05",
    "EVALUATOR_HOST_ONLINE_POLL_S": "0.05",
}
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
RIGHT = "def evaluate(inputs, outputs, trace):\n    return {'score': 1.0 if outputs == '4' else 0.0}\n"


def _spans(n: int = 2, service: str = "chat-api", answer: str = "4") -> tuple[str, list[ReadableSpan]]:
    """One trace of ``n`` spans (a SERVER root with ag.data, CLIENT children), recorded in memory."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests.online.grpc")
    attributes = {"ag.data.inputs.question": "2+2?", "ag.data.outputs": answer}
    with tracer.start_as_current_span("chat", kind=SpanKind.SERVER, attributes=attributes) as root:
        for _ in range(n - 1):
            with tracer.start_as_current_span("llm", kind=SpanKind.CLIENT):
                pass
        trace_id = format(root.get_span_context().trace_id, "032x")
    provider.shutdown()
    return trace_id, list(memory.get_finished_spans())


def _send(endpoint: str, key: str | None, spans: list[ReadableSpan], **tls: object) -> SpanExportResult:
    """The SDK's real OTLP/gRPC exporter, once (its own retries of retryable refusals bounded by its timeout)."""
    headers = (("authorization", f"Bearer {key}"),) if key is not None else None
    exporter: SpanExporter = OTLPSpanExporter(
        endpoint=endpoint,
        insecure=not tls,
        headers=headers,
        timeout=10,
        **tls,  # type: ignore[arg-type]
    )
    try:
        return exporter.export(spans)
    finally:
        exporter.shutdown()


def _request(spans: list[ReadableSpan]) -> bytes:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return bytes(encode_spans(spans).SerializeToString())


def _call(port: int, key: str | None, body: bytes) -> tuple[grpc.StatusCode, str, bytes | None, bytes]:
    """A raw ``Export`` call: its status code, details, ``grpc-status-details-bin`` and response bytes."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        export = channel.unary_unary(EXPORT)
        metadata = (("authorization", f"Bearer {key}"),) if key is not None else None
        try:
            response, call = export.with_call(body, metadata=metadata, timeout=30)
        except grpc.RpcError as exc:
            trailers = dict(exc.trailing_metadata() or ())  # type: ignore[attr-defined]
            return exc.code(), exc.details(), trailers.get("grpc-status-details-bin"), b""  # type: ignore[attr-defined]
        return call.code(), "", None, response


@contextmanager
def _service(tmp_path: Path, **env: str) -> Iterator[tuple[httpx.Client, int, list[str], list[str]]]:
    """The real service with gRPC on a free port and two workspaces: its client (operator), the port, keys, ids."""
    port = free_port()
    with serving(tmp_path, "process", env={**ENV, "EVALUATOR_HOST_OTLP_GRPC_PORT": str(port), **env}) as (client, _):
        op = {"Authorization": f"Bearer {ADMIN}"}
        keys, ids = [], []
        for name in ("team-a", "team-b"):
            ws = client.post("/v1/workspaces", json={"name": name}, headers=op).json()
            keys.append(client.post(f"/v1/workspaces/{ws['id']}/keys", json={"name": "otel"}, headers=op).json()["key"])
            ids.append(ws["id"])
        yield client, port, keys, ids


def _scored(client: httpx.Client, key: str, trace_id: str) -> dict[str, object] | None:
    found = client.get(f"/v1/traces/{trace_id}", headers={"Authorization": f"Bearer {key}"})
    if found.status_code != 200:
        return None
    scores = [s for s in found.json()["scores"] if s["state"] == "done"]
    return scores[0] if scores else None


@pytest.mark.slow
def test_the_sdk_grpc_exporter_s_spans_land_in_the_key_s_workspace_and_are_scored(tmp_path: Path) -> None:
    with _service(tmp_path) as (client, port, keys, _ids):
        a = {"Authorization": f"Bearer {keys[0]}"}
        made = client.post("/v1/evaluators", json={"name": "right", "language": "python", "code": RIGHT}, headers=a)
        assert made.status_code == 201, made.text
        rule = client.post("/v1/online-rules", json={"evaluator_id": made.json()["id"]}, headers=a)
        assert rule.status_code == 201, rule.text
        trace_id, spans = _spans(3)
        assert _send(f"127.0.0.1:{port}", keys[0], spans) == SpanExportResult.SUCCESS
        score = wait_until(
            functools.partial(_scored, client, keys[0], trace_id), 120, 0.1, what="the gRPC trace scored"
        )
        assert score["rule_id"] == rule.json()["id"] and score["score"] == 1.0 and score["status"] == "ok"
        found = client.get(f"/v1/traces/{trace_id}", headers=a).json()
        (root,) = found["trace"]["spans"].values()
        assert root["name"] == "chat" and len(root["children"]) == 2 and found["outputs"] == "4"
        other = client.get(f"/v1/traces/{trace_id}", headers={"Authorization": f"Bearer {keys[1]}"})
        assert other.status_code == 404  # another workspace's key does not see it


@pytest.mark.slow
def test_grpc_refuses_a_missing_or_unknown_key_and_the_operator_key(tmp_path: Path) -> None:
    with _service(tmp_path) as (client, port, keys, _ids):
        trace_id, spans = _spans()
        assert _send(f"127.0.0.1:{port}", None, spans) == SpanExportResult.FAILURE  # not retried
        body = _request(spans)
        code, details, _, _ = _call(port, None, body)
        assert code == grpc.StatusCode.UNAUTHENTICATED and "Authorization" in details
        code, details, _, _ = _call(port, "not-a-key", body)
        assert code == grpc.StatusCode.UNAUTHENTICATED and "unknown" in details
        code, _, _, _ = _call(port, ADMIN, body)
        assert code == grpc.StatusCode.PERMISSION_DENIED
        for key in keys:  # nothing was stored anywhere
            assert client.get(f"/v1/traces/{trace_id}", headers={"Authorization": f"Bearer {key}"}).status_code == 404
        code, _, _, answer = _call(port, keys[0], body)  # the service still takes a keyed export
        assert code == grpc.StatusCode.OK and not ExportTraceServiceResponse.FromString(answer).HasField(
            "partial_success"
        )


@pytest.mark.slow
def test_grpc_bounds_refuse_with_the_otlp_status_codes_and_the_service_stays_healthy(tmp_path: Path) -> None:
    env = {
        "EVALUATOR_HOST_ONLINE_MAX_SPANS": "4",
        "EVALUATOR_HOST_ONLINE_MAX_ATTRIBUTE_BYTES": "64",
        "EVALUATOR_HOST_ONLINE_MAX_STORED_SPANS": "20",  # two workspaces and the default: 6 spans each
        "EVALUATOR_HOST_ONLINE_MAX_BODY_BYTES": "4096",
    }
    with _service(tmp_path, **env) as (client, port, keys, _ids):
        _, many = _spans(5)
        assert _send(f"127.0.0.1:{port}", keys[0], many) == SpanExportResult.FAILURE
        code, details, retry, _ = _call(port, keys[0], _request(many))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "online_max_spans" in details and retry is None
        _, big = _spans(1, answer="x" * 100)  # one attribute over its bound: partial success, the others kept
        _, fine = _spans(2)
        code, _, _, answer = _call(port, keys[0], _request([*big, *fine]))
        partial = ExportTraceServiceResponse.FromString(answer).partial_success
        assert code == grpc.StatusCode.OK and partial.rejected_spans == 1 and "64" in partial.error_message
        oversized = ExportTraceServiceRequest()
        oversized.resource_spans.add().resource.attributes.add(key="pad").value.string_value = "p" * 5000
        code, _, retry, _ = _call(port, keys[0], oversized.SerializeToString())
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and retry is None  # over the body bound: not retried
        for _ in range(12):  # fill team-a's share (20 spans, or 6 once the workspaces are counted) ...
            code, details, retry, _ = _call(port, keys[0], _request(_spans(2)[1]))
            if code != grpc.StatusCode.OK:
                break
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "share of the span store" in details
        assert retry is not None
        (detail,) = Status.FromString(retry).details
        info = RetryInfo()
        assert detail.Unpack(info) and info.retry_delay.seconds == 30  # ... the retryable refusal
        code, _, _, _ = _call(port, keys[1], _request(_spans(2)[1]))
        assert code == grpc.StatusCode.OK  # another workspace is not refused for it
        assert client.get("/healthz").status_code == 200


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "grpc.crt", tmp_path / "grpc.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@pytest.mark.slow
def test_grpc_serves_tls_when_a_certificate_is_configured(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    env = {"EVALUATOR_HOST_OTLP_GRPC_TLS_CERT": str(cert), "EVALUATOR_HOST_OTLP_GRPC_TLS_KEY": str(key)}
    with _service(tmp_path / "data", **env) as (client, port, keys, _ids):
        trace_id, spans = _spans()
        credentials = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        assert _send(f"127.0.0.1:{port}", keys[0], spans, credentials=credentials) == SpanExportResult.SUCCESS
        code, _, _, _ = _call(port, keys[0], _request(spans))
        assert code == grpc.StatusCode.UNAVAILABLE  # plaintext is not served beside TLS
        found = wait_until(
            lambda: (
                client.get(f"/v1/traces/{trace_id}", headers={"Authorization": f"Bearer {keys[0]}"}).status_code == 200
            ),
            60,
            0.1,
            what="the TLS-sent trace stored",
        )
        assert found


def test_the_grpc_port_is_served_with_the_service_s_lifespan_and_closed_with_it(tmp_path: Path) -> None:
    port = free_port()
    settings = make_settings(tmp_path, backend="process", otlp_grpc_port=port)  # an open service: no keys
    _, spans = _spans()
    with TestClient(create_app(settings)) as client:
        code, _, _, answer = _call(port, None, _request(spans))
        assert (
            code == grpc.StatusCode.OK
            and not ExportTraceServiceResponse.FromString(answer).partial_success.rejected_spans
        )
        stored = client.get("/v1/traces").json()["data"]  # the default workspace's
        assert stored and stored[0]["trace_id"] == spans[0].context.trace_id.to_bytes(16, "big").hex()
    code, _, _, _ = _call(port, None, _request(spans))
    assert code == grpc.StatusCode.UNAVAILABLE  # stopped with the service
