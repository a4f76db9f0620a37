"""Job results to score sinks (issue 52): ``POST /v1/jobs {..., "sinks": [...]}`` writes each row's result
against the row's ``trace_id``/``span_id`` — into the Langfuse stand-in (tests/support/langfuse.py: every
request checked against Langfuse's public API reference) — once each (a retried write is recorded once), with
the delivery state on each result row and a per-sink summary on the job; a row without a trace id is ``skipped``
with its reason, and a job whose rows name no trace at all is refused (it would deliver nothing, yet end green).
A job's results in a REAL Phoenix server are proved in tests/online/test_sinks_phoenix.py, on that module's one
Phoenix."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from evaluator_host.store.db import make_engine
from evaluator_host.store.online.rows import SinkDeliveryRow
from tests.support import REPO, zygote
from tests.support.backends import BACKENDS
from tests.support.langfuse import langfuse_stand_in
from tests.support.service import serving
from tests.support.sink_app import evaluator, job_delivered
from tests.support.wait import wait_until

PK, SK = "pk-lf-1234567890", "sk-lf-secret-0987654321"
# the write whose answer is lost is sent again after SINK_RETRY_S: the same retry as at 2 s, an eighth of the wait
ENV = {"EVALUATOR_HOST_EGRESS_HOSTS": '{"langfuse.test": "127.0.0.1"}', "EVALUATOR_HOST_SINK_RETRY_S": "0.25"}
EVAL = (
    "def evaluate(inputs, outputs, trace):\n"
    "    return {'score': 1.0 if outputs == '4' else 0.25, 'reason': f'answered {outputs}'}\n"
)
TRACES = ["0af7651916cd43dd8448eb211c80319c", "4bf92f3577b34da6a3ce929d0e0e4736", "5b8efff798038103d269b633813fc60c"]
SPAN = "00f067aa0ba902b7"


def _secrets(client: httpx.Client) -> None:
    for name, value in (("LF_PK", PK), ("LF_SK", SK)):
        assert client.put(f"/v1/secrets/{name}", json={"value": value}).status_code in (200, 201, 204)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_jobs_results_are_written_to_langfuse_once_each_against_the_rows_traces(
    tmp_path: Path, database_url: str, backend: str
) -> None:
    if backend == "docker" and not database_url.startswith("sqlite"):
        pytest.skip("the docker backend on SQLite: the store part is the process run's")
    with (
        langfuse_stand_in(PK, SK) as langfuse,
        serving(tmp_path, backend, database_url=database_url, env=ENV) as (
            client,
            _proc,
        ),
    ):
        _secrets(client)
        url = f"http://langfuse.test:{langfuse.port}"
        sink = {"type": "langfuse", "url": url, "public_key": "{{secret:LF_PK}}", "secret_key": "{{secret:LF_SK}}"}
        ev = evaluator(client, EVAL)
        rows = [
            {"question": "2+2?", "outputs": "4", "trace_id": TRACES[0].upper()},  # hex ids: lower-cased
            {"question": "2+2?", "outputs": "5", "trace_id": TRACES[1], "span_id": SPAN},
            {"question": "2+2?", "outputs": "4", "trace_id": TRACES[2], "session_id": "conv-7"},
            {"question": "2+2?", "outputs": "4"},  # no trace id: not delivered, and says so
        ]
        bad = [{**sink, "secret_key": SK}]
        literal = client.post("/v1/jobs", json={"evaluator_id": ev, "rows": rows, "sinks": bad})
        assert literal.status_code == 422 and SK not in literal.text  # a credential is a secret reference only
        untraced = [{k: v for k, v in r.items() if k != "trace_id"} for r in rows]
        refused = client.post("/v1/jobs", json={"evaluator_id": ev, "rows": untraced, "sinks": [sink]})
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["type"] == "NothingCompared" and error["columns"] == ["trace_id", "span_id", "session_id"]
        assert "trace_id" in error["message"] and "deliver nothing" in error["message"]

        langfuse.fail_next, langfuse.store_then_fail = 1, True  # the first write lands, its answer is lost
        made = client.post("/v1/jobs", json={"evaluator_id": ev, "rows": rows, "sinks": [{**sink, "name": "facts"}]})
        assert made.status_code == 202, made.text
        assert made.json()["sinks"][0]["type"] == "langfuse"
        job = job_delivered(client, made.json()["id"], 3)
        (summary,) = job["sinks"]
        assert summary == {"type": "langfuse", "url": url, "name": "facts", "delivered": 3, "pending": 0,
                           "failed": 0, "skipped": 1}  # fmt: skip

        assert langfuse.refused == []  # every request met the API reference
        assert len(langfuse.requests) == 4 and len(langfuse.scores) == 3  # one sent twice, recorded once
        by_trace = {w["traceId"]: w for w in langfuse.scores.values()}
        assert sorted(by_trace) == sorted(TRACES)
        assert "observationId" not in by_trace[TRACES[0]] and by_trace[TRACES[1]]["observationId"] == SPAN
        for index, trace in enumerate(TRACES):
            written = by_trace[trace]
            assert written["name"] == "facts" and written["dataType"] == "NUMERIC" and written["id"].startswith("evh-")
            assert written["metadata"]["job_id"] == job["id"] and written["metadata"]["row"] == index
        assert by_trace[TRACES[1]]["value"] == 0.25 and by_trace[TRACES[1]]["comment"] == "answered 5"
        assert (
            by_trace[TRACES[2]]["metadata"]["session_id"] == "conv-7"
            and "session_id" not in by_trace[TRACES[0]]["metadata"]
        )

        page = client.get(f"/v1/jobs/{job['id']}/results").json()["data"]
        states = [item["sinks"] for item in page]
        assert [s[0]["state"] for s in states] == ["delivered", "delivered", "delivered", "skipped"]
        assert states[3] == [{"type": "langfuse", "state": "skipped", "attempts": 0, "error": "row has no trace_id"}]
        assert max(s[0]["attempts"] for s in states) == 2  # the one whose answer was lost
        plain = client.post("/v1/jobs", json={"evaluator_id": ev, "rows": rows[:1]}).json()
        assert plain["sinks"] == []  # a job without sinks keeps its shape
        wait_until(lambda: client.get(f"/v1/jobs/{plain['id']}").json()["status"] == "succeeded", 120, 0.2)
        assert "sinks" not in client.get(f"/v1/jobs/{plain['id']}/results").json()["data"][0]

        command = [sys.executable, "-m", "evaluator_host.cli", "jobs", "show", job["id"], "--server"]
        shown = zygote.run([*command, str(client.base_url)], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert "langfuse facts: 3 delivered, 1 skipped" in shown.stdout, shown.stdout
        assert SK not in client.get(f"/v1/jobs/{job['id']}").text


def test_a_job_maps_its_trace_columns_keeps_the_host_rule_and_its_deletion_drops_its_deliveries(tmp_path: Path) -> None:
    with langfuse_stand_in(PK, SK) as langfuse, serving(tmp_path, "process", env=ENV) as (client, _proc):
        _secrets(client)
        sink = {"type": "langfuse", "url": f"http://langfuse.test:{langfuse.port}",
                "public_key": "{{secret:LF_PK}}", "secret_key": "{{secret:LF_SK}}"}  # fmt: skip
        rows = [{"outputs": "4", "otel": {"trace": TRACES[0], "span": SPAN}}]
        unreachable = {**sink, "url": f"http://127.0.0.1:{langfuse.port}"}  # an IP literal: the host rule refuses
        body = {"evaluator_id": evaluator(client, EVAL), "rows": rows, "sinks": [sink, unreachable]}
        assert client.post("/v1/jobs", json=body).status_code == 422  # no trace_id column
        mapping = {"trace_id": "otel.trace", "span_id": "otel.span"}
        made = client.post("/v1/jobs", json={**body, "field_mapping": mapping})
        assert made.status_code == 202, made.text
        assert made.json()["field_mapping"] == {"outputs": None, "trace": None, "inputs": None, "app_params": None,
                                                **mapping}  # fmt: skip
        job = job_delivered(client, made.json()["id"], 1)
        (written,) = langfuse.scores.values()
        assert (written["traceId"], written["observationId"]) == (TRACES[0], SPAN)
        assert len(langfuse.requests) == 1  # nothing sent to the refused one
        assert {k: job["sinks"][1][k] for k in ("delivered", "pending", "failed", "skipped")} == {
            "delivered": 0, "pending": 0, "failed": 1, "skipped": 0}  # fmt: skip
        (item,) = client.get(f"/v1/jobs/{job['id']}/results").json()["data"]
        assert item["sinks"][1]["state"] == "failed" and "IP literal" in item["sinks"][1]["error"]
        assert client.delete(f"/v1/jobs/{job['id']}").status_code == 204
        engine = make_engine(f"sqlite:///{tmp_path / 'evaluator-host.db'}")
        with engine.connect() as conn:  # its deliveries went with it: none is sent or claimed again
            assert conn.execute(select(func.count()).where(SinkDeliveryRow.source == "job")).scalar() == 0
        engine.dispose()
        assert client.get("/healthz").status_code == 200
