"""Failed sink deliveries sent again (issue 52): a rule's (and a job's) deliveries refused because the sink's
host was not in the workspace's ``network_allow`` end ``failed``; once the operator allows it,
``POST …/sinks/redeliver`` puts them back and the delivery loop writes every score into the Langfuse stand-in
(tests/support/langfuse.py) exactly once — attempts reset, the same idempotency key, so a score the tool
already holds is recorded once — while another workspace's rule or job is 404 and nothing to send is a 200
saying so."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind
from sqlalchemy import update

from evaluator_host.store.db import make_engine
from evaluator_host.store.online.rows import SinkDeliveryRow
from tests.support import REPO, zygote
from tests.support.langfuse import langfuse_stand_in
from tests.support.service import serving
from tests.support.sink_app import evaluator, settled
from tests.support.wait import wait_until

ADMIN = "redeliver-admin-key-0123456789abcdef"
PK, SK = "pk-lf-1234567890", "sk-lf-secret-0987654321"
ENV = {
    "EVALUATOR_HOST_ADMIN_KEY": ADMIN,
    "EVALUATOR_HOST_ONLINE_QUIET_PERIOD_S": "0.2",
    "EVALUATOR_HOST_ONLINE_ASSEMBLY_S": "0.05",
    "EVALUATOR_HOST_ONLINE_POLL_S": "0.05",
    "EVALUATOR_HOST_EGRESS_HOSTS": '{"langfuse.test": "127.0.0.1"}',
}
EVAL = (
    "def evaluate(inputs, outputs, trace):\n"
    "    return {'score': 1.0 if outputs == '4' else 0.25, 'reason': f'answered {outputs}'}\n"
)
TRACES = ["0af7651916cd43dd8448eb211c80319c", "5b8efff798038103d269b633813fc60c"]
OP = {"Authorization": f"Bearer {ADMIN}"}


def _workspace(client: httpx.Client, name: str) -> tuple[str, dict[str, str]]:
    ws = client.post("/v1/workspaces", json={"name": name}, headers=OP).json()["id"]
    key = client.post(f"/v1/workspaces/{ws}/keys", json={"name": "app"}, headers=OP).json()["key"]
    return ws, {"Authorization": f"Bearer {key}"}


def _send_traces(base: str, auth: dict[str, str], answers: list[str]) -> None:
    """Traces of a chat app (the real OpenTelemetry SDK, the workspace's key on its exporter)."""
    provider = TracerProvider(resource=Resource.create({"service.name": "chat-api"}))
    exporter = OTLPSpanExporter(endpoint=f"{base}/v1/traces", headers={k.lower(): v for k, v in auth.items()})
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests.redeliver")
    for answer in answers:
        attributes = {"ag.data.inputs.question": "2+2?", "ag.data.outputs": answer}
        with tracer.start_as_current_span("chat", kind=SpanKind.SERVER, attributes=attributes):
            pass
    provider.shutdown()


def _job_sinks(client: httpx.Client, job_id: str, state: str, n: int) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        job = client.get(f"/v1/jobs/{job_id}").json()
        done = job["status"] not in ("queued", "running") and not job["sinks"][0]["pending"]
        return dict(job["sinks"][0]) if done and job["sinks"][0][state] == n else None

    return wait_until(ended, 120, 0.2, what=f"job {job_id}: {n} deliveries {state}")


def test_failed_deliveries_are_sent_again_once_allowed_and_recorded_once(tmp_path: Path) -> None:
    with langfuse_stand_in(PK, SK) as langfuse, serving(tmp_path, "process", env=ENV) as (client, _proc):
        ws, auth = _workspace(client, "team")
        _other, stranger = _workspace(client, "other")
        for name, value in (("LF_PK", PK), ("LF_SK", SK)):
            assert client.put(f"/v1/secrets/{name}", json={"value": value}, headers=auth).status_code < 300
        client.headers.update(auth)
        url = f"http://langfuse.test:{langfuse.port}"
        sink = {"type": "langfuse", "url": url, "public_key": "{{secret:LF_PK}}", "secret_key": "{{secret:LF_SK}}"}
        ev = evaluator(client, EVAL)
        rule = client.post("/v1/online-rules", json={"evaluator_id": ev, "name": "facts", "sinks": [sink]}).json()
        rows = [{"question": "2+2?", "outputs": a, "trace_id": t} for a, t in zip(("4", "5"), TRACES, strict=True)]
        job = client.post("/v1/jobs", json={"evaluator_id": ev, "rows": rows, "sinks": [sink]}).json()
        _send_traces(str(client.base_url), auth, ["4", "5", "4"])

        refused = settled(client, rule["id"], 3)  # the workspace may not reach langfuse.test yet
        assert all(s["sinks"][0]["state"] == "failed" and s["sinks"][0]["attempts"] == 1 for s in refused)
        assert all("network_allow" in s["sinks"][0]["error"] for s in refused)
        assert _job_sinks(client, job["id"], "failed", 2)["delivered"] == 0
        assert langfuse.requests == []

        for path in (f"/v1/online-rules/{rule['id']}/sinks/redeliver", f"/v1/jobs/{job['id']}/sinks/redeliver"):
            assert client.post(path, headers=stranger).status_code == 404  # another workspace's: as unknown
            bad = client.post(path, json={"states": ["delivered"]})
            assert bad.status_code == 422, bad.text  # only an ended delivery is sent again
            none = client.post(path, json={"states": ["skipped"]})
            assert none.status_code == 200 and none.json()["requeued"] == 0
            assert "nothing to send again" in none.json()["message"]

        fixed = {"network_allow": [f"langfuse.test:{langfuse.port}"]}
        allow = client.patch(f"/v1/workspaces/{ws}", json=fixed, headers=OP)
        assert allow.status_code == 200, allow.text
        command = [sys.executable, "-m", "evaluator_host.cli", "rules", "redeliver", rule["id"]]
        command += ["--server", str(client.base_url), "--api-key", auth["Authorization"].split()[1]]
        run = zygote.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0 and run.stdout.strip() == "requeued 3 deliveries", run.stdout + run.stderr
        assert client.post(f"/v1/jobs/{job['id']}/sinks/redeliver").json() == {"requeued": 2}

        def delivered() -> list[dict[str, Any]] | None:
            listed = settled(client, rule["id"], 3)
            return listed if all(s["sinks"][0]["state"] == "delivered" for s in listed) else None

        scores = wait_until(delivered, 120, 0.2, what="the rule's scores delivered")
        assert [s["sinks"][0]["attempts"] for s in scores] == [1, 1, 1]  # reset: one attempt since
        assert all(s["sinks"][0]["error"] is None for s in scores)
        assert _job_sinks(client, job["id"], "delivered", 2)["failed"] == 0
        assert langfuse.refused == [] and len(langfuse.requests) == 5 and len(langfuse.scores) == 5
        assert sorted(w["traceId"] for w in langfuse.scores.values() if "job_id" in w["metadata"]) == sorted(TRACES)
        again = client.post(f"/v1/online-rules/{rule['id']}/sinks/redeliver")
        assert again.status_code == 200 and again.json()["requeued"] == 0  # nothing was failed

        # a delivery the tool got but this service recorded failed (an answer lost): sent again, recorded once
        engine = make_engine(f"sqlite:///{tmp_path / 'evaluator-host.db'}")
        with engine.begin() as conn:
            conn.execute(update(SinkDeliveryRow).where(SinkDeliveryRow.rule_id == rule["id"]).values(state="failed"))
        engine.dispose()
        assert client.post(f"/v1/online-rules/{rule['id']}/sinks/redeliver").json() == {"requeued": 3}
        wait_until(lambda: len(langfuse.requests) == 8, 120, 0.2, what="the 3 scores sent again")
        wait_until(delivered, 120, 0.2, what="the rule's scores delivered again")
        assert len(langfuse.scores) == 5  # the same ids: upserted, not duplicated
        assert client.get("/healthz").status_code == 200
