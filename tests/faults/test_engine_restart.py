"""The Docker engine restarted (really: dockerd stopped and started again) mid-job and mid-request.

While the engine is away, a call that needs it answers 503 ``BackendUnavailable`` with
``Retry-After`` (never a 500 or a hang) and ``/healthz`` keeps answering; a request in flight when
it goes ends as a result or that 503; the running job waits for the engine and resumes without
the service being restarted, finishing with every row exactly once. The engine is always
started again (``sandbox_images/start_engine.sh``), whatever happens. Run it only under the
machine's Docker lock (``flock /work/.docker.lock``), like every docker test.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import REPO
from tests.support.backends import containers_gone, docker_only
from tests.support.service import serving
from tests.support.wait import wait_until

# the serial tier: alone on the machine, after the parallel one (tests/tiers.py)
pytestmark = pytest.mark.serial

ROWS = 300
# rows of 100 ms: the job has ~13 s of rows left when the engine goes (at 20 ms a fast machine could finish it while
# dockerd was still stopping, and the job read "succeeded" where the test expects it waiting)
CODE = "import time\n\ndef evaluate(inputs, outputs, trace):\n    time.sleep(0.1)\n    return 1.0\n"
# the job asks for the engine again every second while it is away, not up to production's 8 s apart
ENV = {"EVALUATOR_HOST_JOB_BACKOFF_MAX_S": "1"}


def _engine_answers() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


def _dockerd_pids() -> list[str]:
    return subprocess.run(["pidof", "dockerd"], capture_output=True, text=True).stdout.split()


def _stop_engine() -> None:
    pids = _dockerd_pids()
    if not pids:
        pytest.skip("dockerd is not a process of this machine (a system service or a remote engine)")
    for pid in pids:
        os.kill(int(pid), signal.SIGTERM)
    # gone for good (its pid file too), so that start_engine.sh can start a new one
    wait_until(lambda: not any(Path(f"/proc/{p}").exists() for p in pids), 90, 0.5, what="the engine to stop")


def _start_engine(scratch: Path | None = None) -> None:
    """Start the engine as ``.ci/run`` does; with ``scratch`` as the caller's ``TMPDIR`` (a folder this test
    removes): the engine outlives the caller and must not keep it (runc writes each exec's spec there)."""
    env = {**os.environ, **({"TMPDIR": str(scratch)} if scratch is not None else {})}
    subprocess.run([str(REPO / "sandbox_images" / "start_engine.sh")], check=True, timeout=180, env=env)
    for pid in _dockerd_pids():
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert not any(item.startswith(b"TMPDIR=") for item in environ), "the engine kept its starter's TMPDIR"


@pytest.mark.docker
@docker_only
def test_an_engine_restart_is_503_while_away_and_the_job_resumes_without_a_service_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    try:
        with serving(data_dir, "docker", env=ENV) as (client, _proc):
            ev = client.post("/v1/evaluators", json={"name": "slow", "language": "python", "code": CODE}).json()
            job = client.post("/v1/jobs", json={"evaluator_id": ev["id"], "rows": [{"i": i} for i in range(ROWS)]})
            job_id = job.json()["id"]
            wait_until(
                lambda: client.get(f"/v1/jobs/{job_id}").json()["progress"]["done"] >= 20, 120, what="rows to be done"
            )
            in_flight: dict[str, Any] = {}

            def slow_call() -> None:
                code = "import time\n\ndef evaluate(inputs, outputs, trace):\n    time.sleep(3)\n    return 1\n"
                with httpx.Client(base_url=client.base_url, timeout=120) as other:
                    in_flight["answer"] = other.post("/v1/evaluate", json={"language": "python", "code": code})

            caller = threading.Thread(target=slow_call)
            caller.start()
            time.sleep(1)
            _stop_engine()
            caller.join(timeout=120)
            answer = in_flight["answer"]
            assert answer.status_code in (200, 503), answer.text  # a result or the 503, never a 500
            if answer.status_code == 503:
                assert answer.json()["error"]["type"] in ("BackendUnavailable", "SandboxError")
            away = client.post("/v1/evaluate", json={"language": "python", "code": CODE + "# new revision\n"})
            assert away.status_code == 503, away.text
            assert int(away.headers["Retry-After"]) > 0
            assert away.json()["error"]["type"] == "BackendUnavailable"
            assert client.get("/healthz").status_code == 200
            assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "running"  # waiting, not failed
            scratch = tmp_path / "starter-tmp"
            scratch.mkdir()
            _start_engine(scratch)
            shutil.rmtree(scratch)  # what a test run's end does to its TMPDIR: the engine's execs go on (below)
            finished = wait_until(
                lambda: (j := client.get(f"/v1/jobs/{job_id}").json())["status"] not in ("queued", "running") and j,
                240,
                0.5,
                what="the job to resume and finish",
            )
            assert finished["status"] == "succeeded", finished
            assert finished["progress"]["done"] == ROWS
            with sqlite3.connect(data_dir / "evaluator-host.db") as db:
                stored = [i for (i,) in db.execute("SELECT idx FROM job_results WHERE job_id = ?", (job_id,))]
            assert sorted(stored) == list(range(ROWS))  # every row exactly once
            again = client.post("/v1/evaluate", json={"language": "python", "code": CODE + "# after\n"})
            assert again.status_code == 200 and again.json()["score"] == 1.0, again.text
        # the containers the engine stopped under the service are removed by it too (at the latest when it stops)
        containers_gone(data_dir)
    finally:
        if not _engine_answers():
            _start_engine()
