"""Queued jobs' grid: the real service, its broker and database, and real ``evaluator-host worker``
processes (process backend), each worker in its own process group and data dir (they share no disk),
as hosts would be. The fixtures that make one are in ``tests/queue/conftest.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet
from sqlalchemy import create_engine, text

from evaluator_host.store.schema import normalized_url
from tests.support import REPO
from tests.support.redis_server import RedisServer
from tests.support.service import serving
from tests.support.wait import wait_until
from tests.support.zygote import CLI, Process, popen

SECRETS_KEY = Fernet.generate_key().decode()  # the deployment's key (the service's and every host's)

# a row that waits like a model call; `score` says which rows pass, so the aggregate is known
SLOW = (
    "import time\n\ndef evaluate(inputs, outputs, trace):\n"
    "    time.sleep(inputs.get('wait', 0.02))\n    return outputs == inputs['expected']\n"
)


def rows(n: int, wait: float = 0.02) -> list[dict[str, Any]]:
    """``n`` rows, every other one passing (mean score 0.5 for even ``n``)."""
    return [{"i": i, "expected": "yes", "outputs": "yes" if i % 2 else "no", "wait": wait} for i in range(n)]


@dataclass
class Grid:
    """The service, its broker and database, and worker hosts started on demand."""

    root: Path
    redis: RedisServer
    database_url: str
    env: dict[str, str]
    client: httpx.Client | None = None
    service: Process | None = None
    hosts: dict[str, Process] = field(default_factory=dict)
    stack: ExitStack = field(default_factory=ExitStack)

    def serve(self) -> httpx.Client:
        """(Re)start the service on its data dir."""
        self.client, self.service = self.stack.enter_context(
            serving(self.root / "service", backend="process", database_url=self.database_url, env=self.env)
        )
        return self.client

    def host_env(self, name: str) -> dict[str, str]:
        return {**os.environ, **self.env, "EVALUATOR_HOST_DATA_DIR": str(self.root / name)}

    def add_host(self, name: str, lanes: int = 2) -> Process:
        """Start ``evaluator-host worker --name NAME`` in a process group of its own."""
        argv = [*CLI, "worker", "--name", name, "--lanes", str(lanes)]
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - the child holds it
        proc = popen(
            argv, cwd=REPO, env=self.host_env(name), start_new_session=True, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        self.hosts[name] = proc
        return proc

    def kill_host(self, name: str) -> None:
        """SIGKILL the host's whole process group (its sandboxed workers too): a host dying."""
        proc = self.hosts.pop(name)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def host_log(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text(errors="replace")

    def evaluator(self, code: str = SLOW, **settings: Any) -> str:
        assert self.client is not None
        body = {"name": "queued", "language": "python", "code": code, "settings": settings}
        response = self.client.post("/v1/evaluators", json=body)
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    def start_job(self, evaluator_id: str, job_rows: list[dict[str, Any]]) -> str:
        assert self.client is not None
        response = self.client.post("/v1/jobs", json={"evaluator_id": evaluator_id, "rows": job_rows})
        assert response.status_code == 202, response.text
        return str(response.json()["id"])

    def job(self, job_id: str) -> dict[str, Any]:
        assert self.client is not None
        answer: dict[str, Any] = self.client.get(f"/v1/jobs/{job_id}").json()
        return answer

    def wait(self, job_id: str, until: Callable[[dict[str, Any]], bool], timeout_s: float = 90) -> dict[str, Any]:
        job: dict[str, Any] = wait_until(lambda: until(j := self.job(job_id)) and j, timeout_s, what="the job")
        return job

    def finished(self, job_id: str, timeout_s: float = 90) -> dict[str, Any]:
        return self.wait(job_id, lambda j: j["status"] not in ("queued", "running"), timeout_s)

    def results(self, job_id: str) -> list[dict[str, Any]]:
        assert self.client is not None
        import json

        body = self.client.get(f"/v1/jobs/{job_id}/results", params={"format": "ndjson"}).text
        return [json.loads(line) for line in body.splitlines()]

    def stored(self, job_id: str) -> tuple[int, int, int, int]:
        """From the database itself: (result rows, distinct indices, the job's done, its failed)."""
        engine = create_engine(normalized_url(self.database_url))
        try:
            with engine.connect() as conn:
                count, distinct = conn.execute(
                    text("SELECT count(*), count(DISTINCT idx) FROM job_results WHERE job_id = :j"), {"j": job_id}
                ).one()
                done, failed = conn.execute(text("SELECT done, failed FROM jobs WHERE id = :j"), {"j": job_id}).one()
        finally:
            engine.dispose()
        return int(count), int(distinct), int(done), int(failed)

    def close(self) -> None:
        for proc in self.hosts.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.hosts.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.stack.close()


def assert_complete(grid: Grid, job_id: str, n: int) -> dict[str, Any]:
    """The job succeeded with every row stored once, counters equal to the rows, the right aggregate."""
    job = grid.finished(job_id)
    assert job["status"] == "succeeded", job
    assert job["progress"] == {"total": n, "done": n, "failed": 0, "cached": 0}
    assert grid.stored(job_id) == (n, n, n, 0)
    aggregate = job["aggregate"]
    assert aggregate["count"] == n and aggregate["errors"] == 0
    assert aggregate["score"]["mean"] == pytest.approx(0.5) and aggregate["pass_rate"] == pytest.approx(0.5)
    assert sum(aggregate["histogram"]["counts"]) == n
    return job
