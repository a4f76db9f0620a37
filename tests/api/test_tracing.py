"""OpenTelemetry tracing: spans as a real OTLP/HTTP receiver gets them from a real service.

The receiver (``tests/support/otlp.py``) listens on loopback and decodes every export with
``opentelemetry-proto``; the service is ``evaluator-host serve`` on the process backend.
Tracing off (the default) loads nothing of the SDK and exports nothing; a dead or silent
collector neither fails nor slows a request.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from opentelemetry.trace import INVALID_SPAN

from evaluator_host.api import create_app
from evaluator_host.observability import tracing
from evaluator_host.settings import Settings
from tests.support import REPO
from tests.support.otlp import Collector, Received, collector
from tests.support.service import make_settings, serving

CODE = "def evaluate(inputs, outputs, trace):\n    return outputs == inputs['correct_answer']  # code-marker-7f3a\n"
CASE = {"inputs": {"correct_answer": "input-marker-91c2"}, "outputs": "input-marker-91c2"}
FAST = {"OTEL_BSP_SCHEDULE_DELAY": "50"}  # the SDK's own knob: export every 50 ms (default 5 s)
_CLEAN = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "EVALUATOR_HOST_OTEL_"))}


def _traceparent(sampled: bool = True) -> tuple[str, str, str]:
    trace_id, parent = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{parent}-{'01' if sampled else '00'}", trace_id, parent


@pytest.fixture(scope="module")
def otlp() -> Iterator[Collector]:
    with collector() as running:
        yield running


@pytest.fixture(scope="module")
def traced(otlp: Collector, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """The real service, tracing to ``otlp`` (a base URL: the service appends /v1/traces)."""
    env = {**FAST, "EVALUATOR_HOST_OTEL_ENDPOINT": otlp.endpoint, "OTEL_SERVICE_NAME": "evh-trace-test"}
    with serving(tmp_path_factory.mktemp("traced"), "process", env=env) as (client, _proc):
        yield client


def _evaluator(client: httpx.Client, code: str = CODE) -> str:
    answer = client.post("/v1/evaluators", json={"name": "tenant-marker-55d0", "language": "python", "code": code})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def _one(by_name: dict[str, list[Received]], name: str) -> Received:
    (found,) = by_name[name]
    return found


def test_an_evaluation_is_a_server_span_continuing_the_callers_trace_with_evaluation_and_worker_spans(
    traced: httpx.Client, otlp: Collector
) -> None:
    evaluator_id = _evaluator(traced)
    header, trace_id, parent = _traceparent()
    answer = traced.post(
        f"/v1/evaluators/{evaluator_id}/evaluate",
        json=CASE,
        headers={"traceparent": header, "x-request-id": "trace-req-1"},
    )
    assert answer.status_code == 200 and answer.json()["status"] == "ok"
    spans = otlp.trace(
        trace_id, {"POST /v1/evaluators/{evaluator_id}/evaluate", "evaluate", "pool.acquire", "worker.run"}
    )
    server = _one(spans, "POST /v1/evaluators/{evaluator_id}/evaluate")
    assert server.kind == "SERVER" and server.parent_span_id == parent  # the caller's span is its parent
    assert server.attributes == {
        "http.request.method": "POST",
        "http.route": "/v1/evaluators/{evaluator_id}/evaluate",
        "http.response.status_code": 200,
        "evaluator_host.request_id": "trace-req-1",
        "url.scheme": "http",
        "network.protocol.version": "1.1",
    }
    assert server.status == "UNSET" and server.resource["service.name"] == "evh-trace-test"
    evaluate = _one(spans, "evaluate")
    assert evaluate.parent_span_id == server.span_id and evaluate.kind == "INTERNAL"
    assert evaluate.attributes["evaluator_host.language"] == "python"
    assert evaluate.attributes["evaluator_host.backend"] == "process"
    assert evaluate.attributes["evaluator_host.runtime.id"] == answer.json()["runtime"]["id"]
    assert evaluate.attributes["evaluator_host.status"] == "ok" and evaluate.attributes["evaluator_host.cases"] == 1
    acquire, run = _one(spans, "pool.acquire"), _one(spans, "worker.run")
    assert acquire.parent_span_id == evaluate.span_id and run.parent_span_id == evaluate.span_id
    assert run.attributes == {
        "evaluator_host.backend": "process",
        "evaluator_host.language": "python",
        "evaluator_host.cases": 1,
        "evaluator_host.status": "ok",
        "evaluator_host.failed_cases": 0,
    }
    assert server.duration_s >= evaluate.duration_s >= run.duration_s > 0
    # no tenant, evaluator or user data ever leaves: not in any export so far
    for marker in (evaluator_id, "tenant-marker-55d0", "code-marker-7f3a", "input-marker-91c2"):
        assert not any(marker.encode() in body for body in otlp.bodies), marker
    assert otlp.other_requests == []


def test_a_user_error_is_an_outcome_and_a_batch_counts_its_failures(traced: httpx.Client, otlp: Collector) -> None:
    code = (
        "def evaluate(inputs, outputs, trace):\n"
        "    if outputs == 'boom':\n        raise ValueError('user-msg-3b1')\n    return 1.0\n"
    )
    header, trace_id, _ = _traceparent()
    cases = [{"inputs": {}, "outputs": "fine"}, {"inputs": {}, "outputs": "boom"}]
    answer = traced.post(
        "/v1/evaluate", json={"language": "python", "code": code, "cases": cases}, headers={"traceparent": header}
    )
    assert answer.status_code == 200 and [r["status"] for r in answer.json()["results"]] == ["ok", "error"]
    spans = otlp.trace(trace_id, {"POST /v1/evaluate", "evaluate", "worker.run"})
    evaluate = _one(spans, "evaluate")
    assert evaluate.attributes["evaluator_host.status"] == "mixed"
    assert evaluate.attributes["evaluator_host.failed_cases"] == 1 and evaluate.attributes["evaluator_host.cases"] == 2
    assert evaluate.status == "UNSET"  # a user's exception is the evaluation's outcome, not a failure of ours
    assert _one(spans, "POST /v1/evaluate").status == "UNSET"
    assert not any(b"user-msg-3b1" in body for body in otlp.bodies)


def test_routes_outside_the_fast_path_are_named_by_template_and_unmatched_paths_by_method(
    traced: httpx.Client, otlp: Collector
) -> None:
    evaluator_id = _evaluator(traced)
    header, trace_id, _ = _traceparent()
    assert traced.get(f"/v1/evaluators/{evaluator_id}", headers={"traceparent": header}).status_code == 200
    by_template = _one(otlp.trace(trace_id, {"GET /v1/evaluators/{evaluator_id}"}), "GET /v1/evaluators/{evaluator_id}")
    assert by_template.attributes["http.route"] == "/v1/evaluators/{evaluator_id}"
    header, trace_id, _ = _traceparent()
    assert traced.get("/v1/no/such/path", headers={"traceparent": header}).status_code == 404
    unmatched = _one(otlp.trace(trace_id, {"GET"}), "GET")
    assert "http.route" not in unmatched.attributes and unmatched.attributes["http.response.status_code"] == 404
    assert unmatched.status == "UNSET"  # a 4xx is the client's, not a server failure


def test_an_unsampled_traceparent_is_followed_and_a_garbage_one_starts_a_new_trace(
    traced: httpx.Client, otlp: Collector
) -> None:
    header, unsampled, _ = _traceparent(sampled=False)
    assert traced.get("/healthz", headers={"traceparent": header, "x-request-id": "unsampled-1"}).status_code == 200
    garbage = "00-zz" + "0" * 50
    assert traced.get("/healthz", headers={"traceparent": garbage, "x-request-id": "garbage-1"}).status_code == 200
    spans = otlp.wait_for(lambda got: any(s.attributes.get("evaluator_host.request_id") == "garbage-1" for s in got))
    (fresh,) = [s for s in spans if s.attributes.get("evaluator_host.request_id") == "garbage-1"]
    assert fresh.parent_span_id == "" and fresh.name == "GET /healthz"
    assert not any(s.trace_id == unsampled for s in spans)
    assert not any(s.attributes.get("evaluator_host.request_id") == "unsampled-1" for s in spans)


@pytest.mark.network
def test_runtime_builds_have_spans_with_their_digest_seconds_and_outcome(traced: httpx.Client, otlp: Collector) -> None:
    code = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"
    header, trace_id, _ = _traceparent()
    body = {"language": "python", "code": code, "packages": {"six": "1.16.0"}, "outputs": "x"}
    answer = traced.post("/v1/evaluate", json=body, headers={"traceparent": header})
    assert answer.status_code == 200, answer.text
    spans = otlp.trace(trace_id, {"POST /v1/evaluate", "runtime.build", "evaluate"})
    build = _one(spans, "runtime.build")
    assert build.parent_span_id == _one(spans, "POST /v1/evaluate").span_id
    assert build.attributes["evaluator_host.runtime.id"] == answer.json()["runtime"]["id"]
    assert build.attributes["evaluator_host.build.outcome"] == "built"
    assert 0 < build.attributes["evaluator_host.build.seconds"] <= build.duration_s
    header, trace_id, _ = _traceparent()
    body["packages"] = {"six": "0.0.424242"}
    failed = traced.post("/v1/evaluate", json=body, headers={"traceparent": header})
    assert failed.status_code == 422 and failed.json()["error"]["type"] == "BuildError"
    spans = otlp.trace(trace_id, {"POST /v1/evaluate", "runtime.build"})
    build = _one(spans, "runtime.build")
    assert build.status == "ERROR" and build.attributes["error.type"] == "BuildError"
    assert build.attributes["evaluator_host.build.outcome"] == "failed"
    assert build.events == []  # no exception event: its message quotes the installer's output
    server = _one(spans, "POST /v1/evaluate")
    assert server.status == "UNSET" and server.attributes["http.response.status_code"] == 422


def test_job_chunks_are_traces_of_their_own_with_the_job_id_and_rows(traced: httpx.Client, otlp: Collector) -> None:
    evaluator_id = _evaluator(traced)
    rows = [{"correct_answer": "a", "answer": "a"}, {"correct_answer": "a", "answer": "b"}]
    answer = traced.post(
        "/v1/jobs", json={"evaluator_id": evaluator_id, "rows": rows, "field_mapping": {"outputs": "answer"}}
    )
    assert answer.status_code == 202, answer.text
    job_id = answer.json()["id"]

    def chunk_and_commit(got: list[Received]) -> bool:
        chunks = {s.trace_id for s in got if s.attributes.get("evaluator_host.job.id") == job_id}
        return any(s.name == "job.commit" and s.trace_id in chunks for s in got)

    spans = otlp.wait_for(chunk_and_commit)
    (chunk,) = [s for s in spans if s.name == "job.chunk" and s.attributes["evaluator_host.job.id"] == job_id]
    assert chunk.parent_span_id == "" and chunk.kind == "INTERNAL"  # not under the POST that created the job
    assert chunk.attributes["evaluator_host.job.rows"] == 2 and chunk.attributes["evaluator_host.status"] == "ok"
    assert chunk.attributes["evaluator_host.language"] == "python"
    children = {s.name for s in spans if s.parent_span_id == chunk.span_id}
    assert {"job.commit", "worker.run"} <= children


def test_a_5xx_fails_the_server_span_by_type_only_and_sampling_keeps_the_callers_decision(
    otlp: Collector, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path, backend="process", otel_endpoint=otlp.endpoint, otel_sample_ratio=0.0)
    app = create_app(settings)

    def boom() -> None:
        raise RuntimeError("secret-in-message-6d2e")

    app.add_api_route("/boom", boom)
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/healthz", headers={"x-request-id": "ratio-zero"}).status_code == 200  # not kept
        header, trace_id, parent = _traceparent()
        assert client.get("/boom", headers={"traceparent": header}).status_code == 500
        invented, invented_trace, _ = _traceparent()  # (uvicorn refuses such a method; an ASGI server may not)
        assert client.request("FROBNICATE", "/healthz", headers={"traceparent": invented}).status_code == 405
    assert tracing._tracer is None  # stopped with the service (it flushed on the way)
    (server,) = [s for s in otlp.received() if s.trace_id == trace_id]
    assert server.name == "GET /boom" and server.parent_span_id == parent
    assert server.status == "ERROR" and server.attributes["error.type"] == "RuntimeError"
    assert server.attributes["http.response.status_code"] == 500 and server.events == []
    assert not any(b"secret-in-message-6d2e" in body for body in otlp.bodies)
    assert not any(s.attributes.get("evaluator_host.request_id") == "ratio-zero" for s in otlp.received())
    (odd,) = [s for s in otlp.received() if s.trace_id == invented_trace]
    assert odd.name == "HTTP /healthz" and odd.attributes["http.request.method"] == "_OTHER"
    assert odd.attributes["http.request.method_original"] == "FROBNICATE"


_PROBE = """
import json, sys
from fastapi.testclient import TestClient
from opentelemetry.trace import INVALID_SPAN
from opentelemetry import trace
from evaluator_host.observability import tracing
from evaluator_host.api import create_app
from evaluator_host.settings import Settings
with TestClient(create_app(Settings(data_dir=sys.argv[1], backend="process"))) as client:
    body = {"language": "python", "code": "def evaluate(inputs, outputs, trace):\\n    return 1.0\\n"}
    status = client.post("/v1/evaluate", json=body).json()["status"]
print(json.dumps({
    "status": status,
    "sdk": sorted(m for m in sys.modules if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))),
    "provider": type(trace.get_tracer_provider()).__name__,
    "tracer": tracing._tracer is not None,
}))
"""


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """The two probes (:data:`_PROBE`, :data:`_GLOBAL_PROBE`), each in a fresh interpreter of its own, started
    side by side when the first test needs one: each imports the product (seconds on a loaded machine), and the
    second no longer waits for the first. Each test reads its own probe's answer (:func:`_answer`)."""
    started = {
        name: subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path_factory.mktemp(f"probe-{name}"))],
            cwd=REPO,
            env=_CLEAN,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for name, code in (("off", _PROBE), ("global", _GLOBAL_PROBE))
    }
    yield started
    for proc in started.values():
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def _answer(proc: subprocess.Popen[bytes]) -> Any:
    """The last line a probe printed, as JSON, once it exited 0."""
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()[-3000:]
    return json.loads(out.decode().strip().splitlines()[-1])


def test_off_by_default_the_sdk_is_never_loaded_and_no_tracer_provider_exists(
    probes: dict[str, subprocess.Popen[bytes]],
) -> None:
    seen = _answer(probes["off"])
    assert seen == {"status": "ok", "sdk": [], "provider": "ProxyTracerProvider", "tracer": False}


def test_off_the_hooks_hand_out_one_shared_no_op_and_create_no_span() -> None:
    assert not tracing.enabled()
    scope = {"type": "http", "method": "POST", "headers": [(b"traceparent", _traceparent()[0].encode())]}
    assert tracing.request(scope, b"req") is None
    assert tracing.span("evaluate", {"evaluator_host.cases": 1}) is tracing.span("job.chunk", root=True)
    with tracing.span("evaluate") as inside:
        assert inside is INVALID_SPAN and not inside.is_recording()
    assert tracing.start_span("worker.run") is INVALID_SPAN


def test_an_empty_endpoint_keeps_tracing_off_whatever_the_standard_variables_say(tmp_path: Path) -> None:
    with collector() as otlp:
        env = {**FAST, "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint, "EVALUATOR_HOST_OTEL_ENDPOINT": ""}
        with serving(tmp_path, "process", env=env) as (client, _proc):
            for _ in range(3):
                assert client.post("/v1/evaluate", json={"language": "python", "code": CODE, **CASE}).status_code == 200
            time.sleep(0.5)  # ten export periods
        assert otlp.received() == [] and otlp.bodies == [] and otlp.other_requests == []


class _SilentCollector:
    """A collector that takes each export's connection, reads its request and never answers: the exporter
    waits on it until its own timeout. Each connection's span of time "in flight, unanswered" is kept:
    from its first request byte until the exporter gives up and closes it (or the test ends)."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port: int = self.listener.getsockname()[1]
        self.in_flight: list[list[float]] = []  # [first request byte, closed by the exporter (inf: not yet)]
        self._held: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed
            self._held.append(conn)
            threading.Thread(target=self._hold, args=(conn,), daemon=True).start()

    def _hold(self, conn: socket.socket) -> None:
        span: list[float] | None = None
        while True:
            try:
                chunk = conn.recv(65536)
            except OSError:
                chunk = b""
            now = time.monotonic()
            if not chunk:
                if span is not None:
                    span[1] = now
                return
            if span is None:
                span = [now, float("inf")]
                with self._lock:
                    self.in_flight.append(span)

    def spans(self) -> list[tuple[float, float]]:
        with self._lock:
            return [(start, end) for start, end in self.in_flight]

    def close(self) -> None:
        self.listener.close()
        for conn in self._held:
            conn.close()


@pytest.mark.parametrize("collector_state", ["nothing listening", "never answers"])
def test_a_dead_collector_neither_fails_nor_slows_requests_nor_holds_up_the_stop(
    collector_state: str, tmp_path: Path
) -> None:
    """Requests never wait on an export: with a collector that never answers, calls start and finish while one
    export is held unanswered (an order of events, not a duration: a request that waited on the export could not
    end before the exporter gave up on it); with nothing listening, every call still succeeds."""
    silent = _SilentCollector() if collector_state == "never answers" else None
    port = silent.port if silent is not None else 1  # nothing listens on port 1, ever
    env = {
        **FAST,
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "8",
        "EVALUATOR_HOST_OTEL_ENDPOINT": f"http://127.0.0.1:{port}",
        "EVALUATOR_HOST_OTEL_SHUTDOWN_S": "1",  # the stop's wait for the last spans (5 s by default)
    }
    try:
        with serving(tmp_path, "process", env=env) as (client, proc):
            evaluator_id = _evaluator(client)
            calls: list[tuple[float, float]] = []
            for _ in range(60):  # every few calls fills a batch: exports run (and fail) all along
                t0 = time.monotonic()
                answer = client.post(f"/v1/evaluators/{evaluator_id}/evaluate", json=CASE)
                calls.append((t0, time.monotonic()))
                assert answer.status_code == 200 and answer.json()["status"] == "ok"
            if silent is not None:
                held = silent.spans()
                assert held, "no export reached the silent collector: nothing was proven"
                inside = [c for c in calls if any(s <= c[0] and c[1] <= e for s, e in held)]
                # the first calls make the first spans, before any export; every later one must not wait
                assert len(inside) >= 30, (held, calls)
            proc.terminate()
            t0 = time.monotonic()
            proc.wait(timeout=60)
            assert time.monotonic() - t0 < 15  # the last flush gives up after otel_shutdown_s
    finally:
        if silent is not None:
            silent.close()


def test_settings_follow_the_sdks_own_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in [k for k in os.environ if k.startswith(("OTEL_", "EVALUATOR_HOST_OTEL_"))]:
        monkeypatch.delenv(name)
    assert Settings(data_dir=tmp_path).otel_endpoint is None
    assert Settings(data_dir=tmp_path).otel_service_name == "evaluator-host"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "evh-a")
    seen = Settings(data_dir=tmp_path)
    assert seen.otel_endpoint == "http://collector:4318/v1/traces" and seen.otel_service_name == "evh-a"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://gw.example/otlp/traces")
    assert Settings(data_dir=tmp_path).otel_endpoint == "https://gw.example/otlp/traces"  # used as it is
    monkeypatch.setenv("EVALUATOR_HOST_OTEL_ENDPOINT", "http://mine:4318")
    assert Settings(data_dir=tmp_path).otel_endpoint == "http://mine:4318"  # ours first
    assert tracing.traces_url("http://mine:4318") == "http://mine:4318/v1/traces"
    assert tracing.traces_url("http://mine:4318/custom/path") == "http://mine:4318/custom/path"
    monkeypatch.delenv("EVALUATOR_HOST_OTEL_ENDPOINT")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")  # not ours to speak
    assert Settings(data_dir=tmp_path).otel_endpoint is None
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert Settings(data_dir=tmp_path).otel_endpoint is None
    with pytest.raises(ValueError, match="OTLP/HTTP"):
        Settings(data_dir=tmp_path, otel_endpoint="grpc://collector:4317")


_GLOBAL_PROBE = """
import json, sys
from fastapi.testclient import TestClient
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from evaluator_host.api import create_app
from evaluator_host.settings import Settings
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)  # what `opentelemetry-instrument` or an embedding program would install
with TestClient(create_app(Settings(data_dir=sys.argv[1], backend="process"))) as client:
    codes = [client.get("/healthz").status_code, client.get("/v1/no-such-route").status_code]
print(json.dumps({"codes": codes, "spans": [s.name for s in exporter.get_finished_spans()]}))
"""


def test_a_process_global_tracer_provider_gets_no_span_from_fastapis_own_telemetry(
    probes: dict[str, subprocess.Popen[bytes]],
) -> None:
    # the service's spans come from its own provider (off here); FastAPI's built-in telemetry, which
    # follows the process-global one, is off: it would wrap every request in a second server span
    seen = _answer(probes["global"])
    assert seen == {"codes": [200, 404], "spans": []}
