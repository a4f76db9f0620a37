"""A model-target job across a SIGKILL of the real service process: every row's model call is answered
exactly once; a resumed job scores the rows that have a generation without calling the model again.

The loopback server answers the first rows at once and holds the calls of the others; once the first
rows are scored (so their generations are committed) the service is killed. The held calls never got
an answer (the server drops them), so they are sent again after the restart — and answered once.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text

from tests.support.llm_server import llm_server
from tests.support.service import serving
from tests.support.wait import wait_until

ROWS, FIRST = 60, 20
CODE = "def evaluate(inputs, outputs, trace):\n    return outputs == 'A: Q: ' + inputs['question']\n"


def _job(client: httpx.Client, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
    return job


def test_a_killed_job_resumes_without_calling_the_model_twice_for_a_row(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    prompts = [f"Q: row-{i}" for i in range(ROWS)]
    with llm_server() as llm:
        llm.hold.clear()
        llm.held = lambda prompt: prompt in prompts[FIRST:]
        env = {"EVALUATOR_HOST_EGRESS_HOSTS": json.dumps({"llm.test": "127.0.0.1"})}
        with serving(data_dir, "process", env=env) as (client, proc):
            ev = client.post("/v1/evaluators", json={"name": "t", "language": "python", "code": CODE}).json()
            target = {"base_url": f"http://llm.test:{llm.port}/v1", "model": "m", "prompt": "Q: {{ question }}"}
            rows = [{"question": f"row-{i}"} for i in range(ROWS)]
            body = {"evaluator_id": ev["id"], "rows": rows, "target": {**target, "concurrency": 4}}
            job = client.post("/v1/jobs", json=body).json()
            wait_until(lambda: _job(client, job["id"])["progress"]["done"] >= FIRST, 60, 0.02, what="the first rows")
            wait_until(lambda: llm.in_flight == 4, 30, 0.02, what="held calls in flight")
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
        llm.drop_held = True  # the calls the killed service made never get an answer
        llm.hold.set()
        wait_until(lambda: llm.in_flight == 0, 30, 0.02, what="the held calls to end")
        llm.drop_held = False
        engine = create_engine(f"sqlite:///{data_dir / 'evaluator-host.db'}")
        with engine.connect() as db:
            stored = db.execute(text("SELECT count(*) FROM job_generations WHERE job_id = :id"), {"id": job["id"]})
            generated_before = stored.scalar_one()
        engine.dispose()
        assert generated_before >= FIRST
        with serving(data_dir, "process", env=env) as (client, _proc):
            wait_until(lambda: _job(client, job["id"])["status"] == "succeeded", 120, 0.05, what="the resumed job")
            done = _job(client, job["id"])
            page = client.get(f"/v1/jobs/{job['id']}/results", params={"limit": 1000}).json()["data"]
    assert (
        done["progress"] == {"total": ROWS, "done": ROWS, "failed": 0, "cached": 0}
        and done["aggregate"]["pass_rate"] == 1.0
    )
    assert done["usage"]["rows"] == ROWS
    assert [item["index"] for item in page] == list(range(ROWS))
    assert all(item["generation"]["text"] == f"A: {prompts[item['index']]}" for item in page)
    assert {p: llm.answered[p] for p in prompts} == dict.fromkeys(prompts, 1)  # one answered call per row
    assert all(llm.received[p] == 1 for p in prompts[:FIRST])  # generated before the kill: never called again
    assert all(llm.received[p] <= 2 for p in prompts[FIRST:])  # at most its unanswered call, then the one
