"""A job survives its service: stop the real service process mid-job, start it again, count every row once.

The service runs as a subprocess (``evaluator-host serve``) on a private data dir (and its
SQLite file, or a PostgreSQL database given as a plain ``postgresql://`` URL). Each
worker draws a random nonce when it loads the evaluator and returns it with every score,
so after the restart we can tell which rows ran before the stop (they must keep exactly
the result committed then) and which ran after (on fresh workers).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from evaluator_host.sandbox.docker.engine import Engine
from evaluator_host.settings import Settings
from evaluator_host.store.schema import normalized_url
from tests.support.backends import DOCKER_MISSING, docker_only, managed_containers, postgres_only
from tests.support.service import serving
from tests.support.wait import wait_until

ROWS = 3000
CODE = (
    "import os, time\n"
    "NONCE = os.urandom(8).hex()\n\n"
    "def evaluate(inputs, outputs, trace):\n"
    "    time.sleep(0.002)\n"
    "    return {'score': float(inputs['i'] % 2), 'nonce': NONCE}\n"
)


def _job(client: httpx.Client, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
    return job


def _committed(url: str, job_id: str) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    """The job row and its stored results, read straight from the database."""
    engine = create_engine(normalized_url(url))
    with engine.connect() as db:
        query = text("SELECT status, done, failed FROM jobs WHERE id = :id")
        status, done, failed = db.execute(query, {"id": job_id}).one()
        rows = db.execute(text("SELECT idx, result FROM job_results WHERE job_id = :id"), {"id": job_id}).all()
    engine.dispose()
    return {"status": status, "done": done, "failed": failed}, {idx: json.loads(r) for idx, r in rows}


@pytest.mark.parametrize(
    ("backend", "sig", "database"),
    [
        ("process", signal.SIGKILL, "sqlite"),
        ("process", signal.SIGTERM, "sqlite"),
        pytest.param("process", signal.SIGKILL, "postgres", marks=[postgres_only]),
        pytest.param("docker", signal.SIGKILL, "sqlite", marks=[pytest.mark.docker, docker_only]),
    ],
)
def test_restart_resumes_every_row_exactly_once(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str, sig: signal.Signals, database: str
) -> None:
    data_dir = tmp_path / "data"
    url = f"sqlite:///{data_dir / 'evaluator-host.db'}"
    given = None
    if database == "postgres":
        url = given = request.getfixturevalue("postgres").database(driver="postgresql")
    with serving(data_dir, backend, database_url=given) as (client, proc):
        ev = client.post("/v1/evaluators", json={"name": "resume", "language": "python", "code": CODE}).json()
        rows = [{"i": i, "outputs": None} for i in range(ROWS)]
        job = client.post("/v1/jobs", json={"evaluator_id": ev["id"], "rows": rows}).json()
        wait_until(lambda: _job(client, job["id"])["progress"]["done"] >= ROWS // 5, 120, 0.02)
        proc.send_signal(sig)
        proc.wait(timeout=60)
    stored, before = _committed(url, job["id"])
    assert stored["status"] == "running"  # neither finished nor failed by the stop
    assert stored["done"] == len(before) and stored["failed"] == 0  # counters committed with their rows
    assert ROWS // 5 <= len(before) < ROWS, "the stop should land mid-job"

    with serving(data_dir, backend, database_url=given) as (client, _proc):
        resumed = wait_until(lambda: (j := _job(client, job["id"]))["status"] not in ("queued", "running") and j, 180)
        assert resumed["status"] == "succeeded", resumed
        assert resumed["progress"] == {"total": ROWS, "done": ROWS, "failed": 0, "cached": 0}
        aggregate = resumed["aggregate"]
        assert aggregate["count"] == ROWS and aggregate["errors"] == 0 and aggregate["score"]["mean"] == 0.5
        response = client.get(f"/v1/jobs/{job['id']}/results", params={"format": "ndjson"})
        results = [json.loads(line) for line in response.text.splitlines()]
    assert [r["index"] for r in results] == list(range(ROWS))  # every row once, in input order
    _, after = _committed(url, job["id"])
    assert len(after) == ROWS
    for idx, result in before.items():  # rows committed before the stop were not run again
        assert after[idx] == result
    old = {r["details"]["nonce"] for r in before.values()}
    new = {after[i]["details"]["nonce"] for i in range(ROWS) if i not in before}
    assert new and not old & new  # the rest ran on the restarted service's workers
    assert all(r["result"]["score"] == float(r["index"] % 2) for r in results)
    if backend == "docker" and DOCKER_MISSING is None:
        assert not managed_containers(Engine(Settings(data_dir=data_dir)).owner)
