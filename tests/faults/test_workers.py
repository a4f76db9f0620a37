"""Workers killed (SIGKILL / ``docker kill``), paused (SIGSTOP / ``docker pause``) and OOM-killed from
outside in the middle of a job's batch, on both backends (the real ``serve`` process).

What must hold: the job finishes ``succeeded`` with every row counted exactly once (the rows the
fault hit are results of their own: an error, a timeout or a memory limit; the rest run on fresh
workers), the stored counters equal the stored rows, and the service is healthy afterwards with
the evaluator answering ``ok`` again (a worker hit while idle is found out when next used).

Each test has a fresh service of its own, as a service would be after a start. The six scenarios
(three faults, two backends) are independent, so they run three at a time (:class:`~tests.support.ahead.Ahead`):
each in its own thread with its own service and data dir, each judged by its own checks in its own
test; nothing of one scenario's service is seen by another (the faults hit only the workers of the
scenario's service: its process tree, its containers by owner label).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from evaluator_host.sandbox.docker.engine import Engine
from evaluator_host.settings import Settings
from tests.support.ahead import Ahead, selected_params
from tests.support.backends import BACKENDS, containers_gone
from tests.support.faults import worker_pids
from tests.support.service import serving
from tests.support.wait import wait_until

ROWS = 160
CODE = (
    "import time\n\ndef evaluate(inputs, outputs, trace):\n"
    "    ballast = bytearray(24 << 20)  # touched: real memory for the OOM case\n"
    "    ballast[::4096] = b'x' * len(ballast[::4096])\n"
    "    time.sleep(0.03)\n"
    "    return {'score': 1.0, 'i': inputs['i']}\n"
)
FAULT_STATUSES = {"error", "timeout", "memory_limit"}
# a paused worker is found out when bound: after 3 s of silence here, not production's 15 s; a chunk the
# fault cut is tried again after at most 0.5 s, not production's 1 s, 2 s, 4 s (the same number of tries)
ENV = {"EVALUATOR_HOST_WORKER_ACK_TIMEOUT_S": "3", "EVALUATOR_HOST_JOB_BACKOFF_MAX_S": "0.5"}
# scenarios running at once: each has a service (~120 MB) and its workers; six at once outgrew a 1 GB
# memory cgroup (a test session's here), three fit with room
AT_ONCE = 3


@pytest.fixture(scope="module")
def scenarios(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ahead]:
    """Every selected (fault, backend) scenario of the module, started at once on services of their own."""
    root = tmp_path_factory.mktemp("workers")
    chosen = selected_params(request, "fault", "backend")
    ahead = Ahead(at_once=AT_ONCE, name="worker-fault")
    for fault, backend in chosen:
        ahead.start((fault, backend), _scenario, root / f"{fault}-{backend}" / "data", backend, fault)
    try:
        yield ahead
    finally:
        ahead.close()


def _memory_cgroup(pid: int) -> Path | None:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return Path("/sys/fs/cgroup/memory") / path.lstrip("/")
        if controllers == "" and path != "/":
            return Path("/sys/fs/cgroup") / path.lstrip("/")
    return None


def _limit_file(cgroup: Path | None) -> Path | None:
    """A memory cgroup's limit file (v1's or v2's; None: none, e.g. v2's root)."""
    for name in ("memory.limit_in_bytes", "memory.max"):
        if cgroup is not None and (cgroup / name).is_file():
            return cgroup / name
    return None


def _limit(cgroup: Path | None) -> str | None:
    """A memory cgroup's limit as written (None: no limit file)."""
    found = _limit_file(cgroup)
    return None if found is None else found.read_text().strip()


def _squeeze_memory(cgroup: Path) -> None:
    """Lower a worker cgroup's memory limit to just above its use: its next allocation is an OOM kill."""
    limit = _limit_file(cgroup)
    if limit is None:
        raise FileNotFoundError(f"{cgroup} has no memory limit to set")
    v1 = limit.name == "memory.limit_in_bytes"
    usage = int((cgroup / ("memory.usage_in_bytes" if v1 else "memory.current")).read_text())
    limit.write_text(str(usage + (2 << 20)))


def _process_fault(fault: str, service_pid: int) -> int:
    """Hit every worker of the service; how many were hit (``oom``: the workers' own memory cgroups squeezed).
    A worker's ``unshare`` stays in the service's memory cgroup — the test session's, which may be a run's or a
    machine's own: that one is never squeezed (it was, and a whole run's later allocations met its limit)."""
    pids = worker_pids(service_pid)
    shared = _memory_cgroup(service_pid)
    squeezed: set[Path] = set()
    for pid in pids:
        try:
            if fault == "kill":
                os.kill(pid, signal.SIGKILL)
            elif fault == "stop":
                os.kill(pid, signal.SIGSTOP)
            elif (cgroup := _memory_cgroup(pid)) is not None and cgroup != shared and cgroup not in squeezed:
                _squeeze_memory(cgroup)
                squeezed.add(cgroup)
        except (ProcessLookupError, FileNotFoundError, OSError):
            pass
    return len(squeezed) if fault == "oom" else len(pids)


def _docker_fault(fault: str, owner: str) -> int:
    """Hit every running worker container of ``owner`` at once (a build box is no worker); how many were hit."""
    import docker

    client = docker.from_env(timeout=30)

    def hit(container: Any) -> bool:
        try:
            if fault == "kill":
                container.kill()
            elif fault == "stop":
                container.pause()
            else:  # the limit squeezed to just above its use: its next allocation is the engine's OOM kill
                stats = client.api.stats(container.id, stream=False, one_shot=True)  # no second sample waited for
                limit = str(stats["memory_stats"].get("usage", 64 << 20) + (4 << 20))
                update = ["docker", "update", "--memory", limit, "--memory-swap", limit, container.id]
                subprocess.run(update, check=True, capture_output=True, timeout=60)
        except (docker.errors.APIError, subprocess.CalledProcessError):
            return False
        return True

    try:
        labels = ["evaluator-host.managed=1", f"evaluator-host.owner={owner}"]
        running = client.containers.list(filters={"label": labels, "status": "running"})
        workers = [c for c in running if not c.name.startswith("evh-build")]
        with ThreadPoolExecutor(max_workers=max(1, len(workers))) as hitting:
            return sum(hitting.map(hit, workers))
    finally:
        client.close()


def _stored(data_dir: Path, job_id: str) -> tuple[tuple[int, int], dict[int, str]]:
    with sqlite3.connect(data_dir / "evaluator-host.db") as db:
        done, failed = db.execute("SELECT done, failed FROM jobs WHERE id = ?", (job_id,)).fetchone()
        rows = db.execute("SELECT idx, status FROM job_results WHERE job_id = ?", (job_id,)).fetchall()
    return (done, failed), dict(rows)


def _job(client: httpx.Client, job_id: str) -> dict[str, Any]:
    answer: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
    return answer


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fault", ["kill", "stop", "oom"])
def test_a_worker_hit_from_outside_mid_batch_costs_only_its_rows(scenarios: Ahead, backend: str, fault: str) -> None:
    scenarios.outcome((fault, backend))  # its checks ran in the scenario; a failed one is raised here


def _scenario(data_dir: Path, backend: str, fault: str) -> None:
    """One fault on a fresh service of ``backend``: the checks of the module's docstring."""
    with serving(data_dir, backend, env=ENV) as (client, proc):
        settings = {"timeout_s": 2, "memory_mb": 256}
        ev = client.post("/v1/evaluators", json={"name": "w", "language": "python", "code": CODE, "settings": settings})
        assert ev.status_code == 201, ev.text
        rows = [{"i": i} for i in range(ROWS)]
        job = client.post("/v1/jobs", json={"evaluator_id": ev.json()["id"], "rows": rows, "parallelism": 2}).json()
        wait_until(lambda: _job(client, job["id"])["progress"]["done"] >= 20, 120, what="rows to be done")
        owner = Engine(Settings(data_dir=data_dir)).owner
        shared = _memory_cgroup(proc.pid)  # the service's own (the test session's)
        limit = _limit(shared)
        hit = _process_fault(fault, proc.pid) if backend == "process" else _docker_fault(fault, owner)
        assert hit, "no worker was found to hit"
        assert _limit(shared) == limit, f"the fault changed the memory limit of the service's own {shared}"
        finished = wait_until(
            lambda: (j := _job(client, job["id"]))["status"] not in ("queued", "running") and j,
            180,
            what="the job to finish",
        )
        assert finished["status"] == "succeeded", finished
        assert finished["progress"]["total"] == finished["progress"]["done"] == ROWS
        (done, failed), stored = _stored(data_dir, job["id"])
        assert sorted(stored) == list(range(ROWS))  # every row exactly once
        assert (done, failed) == (ROWS, sum(s != "ok" for s in stored.values()))
        hit_rows = [s for s in stored.values() if s != "ok"]
        assert set(hit_rows) <= FAULT_STATUSES, hit_rows
        # only the rows in flight on the hit workers (a paused container times out the batch it holds)
        assert len(hit_rows) <= 2 * hit + 2, (hit, hit_rows)
        if fault == "oom" and backend == "process" and hit_rows:
            assert "memory_limit" in hit_rows or "error" in hit_rows
        results = client.get(f"/v1/jobs/{job['id']}/results", params={"format": "ndjson"}).text.splitlines()
        assert [json.loads(line)["index"] for line in results] == list(range(ROWS))
        assert client.get("/healthz").json()["status"] == "ok"
        # a worker hit while idle is found out when next used (a stopped one times out and is replaced):
        # the evaluator answers again after at most one failed row per worker the fault hit
        by_id = f"/v1/evaluators/{ev.json()['id']}/evaluate"
        answers = [client.post(by_id, json={"inputs": {"i": k}}).json()["status"] for k in range(hit + 2)]
        assert answers[-1] == "ok" and set(answers) <= {"ok"} | FAULT_STATUSES, answers
        fresh = client.post(
            "/v1/evaluate",
            json={"language": "python", "code": "def evaluate(inputs, outputs, trace):\n    return 1\n"},
        )
        assert fresh.status_code == 200 and fresh.json()["score"] == 1.0
    if backend == "docker":
        containers_gone(data_dir)
