"""An app instrumented with the OpenTelemetry Python SDK exports over real OTLP/HTTP to the real service
(``evaluator-host serve``), on SQLite and PostgreSQL: its spans land in the workspace of its key,
assembled and made ready by the service's own loop; ``evaluator-host demo-traffic`` does the same."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind
from sqlalchemy import text
from sqlalchemy.engine import Engine

from evaluator_host.online.levels.traces import load_trace
from evaluator_host.online.reading.mapping import trace_inputs_outputs
from evaluator_host.store.db import make_engine
from tests.support import REPO
from tests.support.service import serving
from tests.support.wait import wait_until

ADMIN = "admin-key-for-online-sdk-tests-0123456789"
ENV = {
    "EVALUATOR_HOST_ADMIN_KEY": ADMIN,
    "EVALUATOR_HOST_ONLINE_QUIET_PERIOD_S": "0.3",
    "EVALUATOR_HOST_ONLINE_ASSEMBLY_S": "0.1",
}


class _Counting(SpanExporter):
    """The real exporter, with what it answered counted."""

    def __init__(self, inner: OTLPSpanExporter) -> None:
        self.inner = inner
        self.results: list[SpanExportResult] = []

    def export(self, spans: Any) -> SpanExportResult:
        result = self.inner.export(spans)
        self.results.append(result)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()  # type: ignore[no-untyped-call]


def _app_traffic(base: str, key: str, service: str, compression: Compression | None = None) -> tuple[str, _Counting]:
    """One request trace of an instrumented chat app (a SERVER root, an LLM CLIENT child), exported and
    flushed; its hex trace id and the exporter's answers."""
    exporter = _Counting(
        OTLPSpanExporter(
            endpoint=f"{base}/v1/traces",
            headers={"Authorization": f"Bearer {key}"},
            compression=compression,
            timeout=10,
        )
    )
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = provider.get_tracer("tests.online")
    with tracer.start_as_current_span("chat", kind=SpanKind.SERVER, attributes={"user.id": "u-1"}) as root:
        attributes: dict[str, str | int] = {"gen_ai.request.model": "gpt-4o-mini", "gen_ai.usage.input_tokens": 12}
        with tracer.start_as_current_span("llm", kind=SpanKind.CLIENT, attributes=attributes):
            pass
        trace_id = format(root.get_span_context().trace_id, "032x")
    assert provider.force_flush(30_000)
    provider.shutdown()
    return trace_id, exporter


def _trace(engine: Engine, trace_id: str) -> Any:
    with engine.connect() as conn:
        found = conn.execute(text("SELECT * FROM online_traces WHERE trace_id = :t"), {"t": trace_id}).all()
    return found[0] if found else None


def _ready(engine: Engine, trace_id: str) -> Any:
    """The trace once assembled: ``ready``, or already ``routed`` (assembly wakes the router at once)."""
    found = _trace(engine, trace_id)
    return found if found is not None and found.state in ("ready", "routed") and found.ready_at else None


def test_an_sdk_instrumented_app_exports_to_the_service(tmp_path: Path, database_url: str) -> None:
    with serving(tmp_path / "data", backend="process", database_url=database_url, env=ENV) as (client, _):
        op = {"Authorization": f"Bearer {ADMIN}"}
        keys, workspaces = [], []
        for name in ("team-a", "team-b"):
            ws = client.post("/v1/workspaces", json={"name": name}, headers=op).json()
            keys.append(client.post(f"/v1/workspaces/{ws['id']}/keys", json={"name": "otel"}, headers=op).json()["key"])
            workspaces.append(ws["id"])
        base = str(client.base_url).rstrip("/")
        trace_a, sent_a = _app_traffic(base, keys[0], "chat-api")
        trace_b, sent_b = _app_traffic(base, keys[1], "other-api", Compression.Gzip)
        trace_x, refused = _app_traffic(base, "not-a-key", "intruder")
        assert sent_a.results == [SpanExportResult.SUCCESS] and sent_b.results == [SpanExportResult.SUCCESS]
        assert refused.results == [SpanExportResult.FAILURE]  # 401: the exporter does not retry it
        engine = make_engine(database_url)
        try:
            for trace_id, workspace, service in (
                (trace_a, workspaces[0], "chat-api"),
                (trace_b, workspaces[1], "other-api"),
            ):
                ready = wait_until(functools.partial(_ready, engine, trace_id))
                assert (ready.workspace_id, ready.service_name, ready.root_name, ready.span_count) == (
                    workspace, service, "chat", 2
                )  # fmt: skip
            assert _trace(engine, trace_x) is None
            demo = [
                sys.executable,
                "-m",
                "evaluator_host.cli",
                "demo-traffic",
                "--server",
                base,
                "-n",
                "3",
                "--rate",
                "50",
            ]
            done = subprocess.run([*demo, "--api-key", keys[0]], cwd=REPO, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
            assert "sent 3 traces (6 spans)" in done.stdout
            with engine.connect() as conn:
                query = (
                    "SELECT workspace_id, count(*) FROM online_traces WHERE service_name = 'demo-chat' "
                    "GROUP BY workspace_id"
                )
                assert conn.execute(text(query)).all() == [(workspaces[0], 3)]
                names = conn.execute(
                    text("SELECT DISTINCT name FROM online_spans WHERE service_name = 'demo-chat'")
                ).all()
                assert sorted(n for (n,) in names) == ["chat", "llm"]
            with engine.connect() as conn:  # a demo trace, loaded as evaluators get it: the GenAI mapping reads it
                demo_id = done.stdout.split("last trace: ")[1].split()[0]
                loaded = load_trace(conn, workspaces[0], demo_id)
            assert loaded is not None and loaded.root_span_id is not None
            inputs, outputs, span_id = trace_inputs_outputs(loaded.trace)
            assert "?" in json.dumps(inputs) and outputs, (inputs, outputs)  # the question in, the answer out
            (root,) = loaded.trace["spans"].values()
            (llm,) = root["children"].values()
            assert span_id == llm["span_id"] and llm["attributes"]["gen_ai"]["request"]["model"] == "gpt-4o-mini"
            wrong = subprocess.run([*demo, "--api-key", "nope"], cwd=REPO, capture_output=True, text=True, timeout=120)
            assert wrong.returncode == 1 and "not accepted" in wrong.stderr
        finally:
            engine.dispose()
        assert client.get("/healthz").status_code == 200
        assert isinstance(client, httpx.Client)
