"""Queued jobs across worker hosts: every row stored once whatever fails, as a user of the API sees it.

Each test runs the real service, a real redis-server, PostgreSQL and ``evaluator-host worker``
processes (process backend), each in its own process group and data dir.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable

from tests.support import REPO, zygote
from tests.support.pg import Cluster
from tests.support.queue import SECRETS_KEY, Grid, assert_complete, rows
from tests.support.wait import wait_until


def test_a_job_runs_across_two_worker_hosts_each_row_once_and_marked_with_its_host(grid: Grid) -> None:
    evaluator = grid.evaluator()
    job_id = grid.start_job(evaluator, rows(400))
    assert_complete(grid, job_id, 400)
    results = grid.results(job_id)
    assert [r["index"] for r in results] == list(range(400))
    hosts = Counter(r["worker"] for r in results)
    assert set(hosts) == {"a", "b"} and min(hosts.values()) > 40, hosts  # both hosts took a share
    assert all(r["result"]["passed"] == (r["index"] % 2 == 1) for r in results)
    page = grid.client.get(f"/v1/jobs/{job_id}/results", params={"limit": 3}).json()  # type: ignore[union-attr]
    assert [item["worker"] in ("a", "b") for item in page["data"]] == [True] * 3


def test_a_worker_host_killed_mid_job_has_its_chunks_redelivered_none_lost_or_doubled(grid: Grid) -> None:
    evaluator = grid.evaluator()
    job_id = grid.start_job(evaluator, rows(600))
    grid.wait(job_id, lambda j: j["progress"]["done"] >= 100)
    grid.kill_host("a")  # SIGKILL mid-chunk: its taken chunks are unacknowledged in Redis
    job = assert_complete(grid, job_id, 600)
    assert job["progress"]["done"] == 600
    assert {r["worker"] for r in grid.results(job_id)} <= {"a", "b"}


def test_redis_restarted_mid_job_loses_no_row(grid: Grid) -> None:
    evaluator = grid.evaluator()
    job_id = grid.start_job(evaluator, rows(500))
    grid.wait(job_id, lambda j: j["progress"]["done"] >= 60)
    grid.redis.stop()
    time.sleep(1.5)
    grid.redis.start()
    assert_complete(grid, job_id, 500)


def test_the_database_briefly_unreachable_mid_job_loses_no_row(grid_factory: Callable[..., Grid]) -> None:
    cluster = Cluster()  # a server of its own: this test stops it
    try:
        grid = grid_factory(database_url=cluster.database(driver="postgresql"))
        grid.serve()
        grid.add_host("a")
        grid.add_host("b")
        job_id = grid.start_job(grid.evaluator(), rows(500))
        grid.wait(job_id, lambda j: j["progress"]["done"] >= 60)
        before = {host: len(grid.host_log(host)) for host in ("a", "b")}  # only what is logged after the halt

        def found_away() -> bool:
            return any("the database does not answer" in grid.host_log(h)[before[h] :] for h in before)

        cluster.halt()
        # away until a host found it so, not a fixed 3 s (hosts retry 0.2 s, 0.4 s, 0.8 s, ... apart: the
        # longer the outage, the later the retry that finds it back); hosts commit nothing meanwhile
        wait_until(found_away, 60, 0.05, what="a host to find the database away")
        cluster.resume()
        assert_complete(grid, job_id, 500)
    finally:
        grid.close()  # before the server goes
        cluster.stop()


def test_cancel_stops_the_chunks_running_on_hosts_at_once(grid_factory: Callable[..., Grid]) -> None:
    grid = grid_factory()
    grid.serve()
    grid.add_host("a", lanes=1)
    evaluator = grid.evaluator()
    # the first chunk (32 rows) is quick, the next takes minutes (rows of 5 s): only an interrupted chunk frees the
    # host's one lane for the quick job below within its 30 s
    slow = grid.start_job(evaluator, [{**row, "wait": 5.0 if row["i"] >= 32 else 0.0} for row in rows(400)])
    grid.wait(slow, lambda j: j["progress"]["done"] >= 32)  # the lane now runs the second chunk
    time.sleep(0.5)
    assert grid.client.post(f"/v1/jobs/{slow}/cancel").json()["status"] == "cancelled"  # type: ignore[union-attr]
    frozen = grid.job(slow)["progress"]["done"]
    quick = grid.start_job(evaluator, rows(4, wait=0.0))
    grid.wait(quick, lambda j: j["status"] == "succeeded", timeout_s=30)  # the lane was freed: the chunk stopped
    assert grid.job(slow)["progress"]["done"] == frozen and grid.job(slow)["status"] == "cancelled"
    assert grid.stored(slow)[0] == frozen  # nothing committed after the cancel
    assert "was cancelled: stopping its 1 running chunks" in grid.host_log("a")


def test_a_host_added_mid_job_takes_chunks_and_a_drained_host_finishes_its_own(
    grid_factory: Callable[..., Grid],
) -> None:
    grid = grid_factory()
    grid.serve()
    grid.add_host("a", lanes=1)
    job_id = grid.start_job(grid.evaluator(), rows(1200, wait=0.03))
    grid.wait(job_id, lambda j: j["progress"]["done"] >= 32)
    grid.add_host("b", lanes=2)  # joins while the job runs
    grid.wait(job_id, lambda j: j["progress"]["done"] >= 200)
    drain = zygote.run(
        [sys.executable, "-m", "evaluator_host.cli", "worker", "--drain", "--timeout", "60"],
        cwd=REPO, env=grid.host_env("a"), capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert drain.returncode == 0, drain.stderr
    assert "drained" in drain.stdout
    assert grid.hosts["a"].wait(timeout=10) == 0  # it exited by itself, cleanly
    assert grid.job(job_id)["progress"]["done"] < 1200  # still running: b goes on alone
    assert_complete(grid, job_id, 1200)
    hosts = Counter(r["worker"] for r in grid.results(job_id))
    assert set(hosts) == {"a", "b"}, hosts
    assert "a chunk goes back" not in grid.host_log("a")  # a drain finishes what it runs


def test_a_queued_job_survives_the_service_restarting(grid: Grid) -> None:
    evaluator = grid.evaluator()
    job_id = grid.start_job(evaluator, rows(2000, wait=0.005))
    grid.wait(job_id, lambda j: j["progress"]["done"] >= 100)
    assert grid.service is not None
    grid.service.terminate()
    grid.service.wait(timeout=60)
    grid.serve()  # the same data dir and database: it resumes dispatching
    job = assert_complete(grid, job_id, 2000)
    assert job["rows_per_s"] is not None


def test_drain_without_a_worker_on_the_data_dir_says_so(grid_factory: Callable[..., Grid]) -> None:
    grid = grid_factory()
    (grid.root / "nobody").mkdir()
    drain = zygote.run(
        [sys.executable, "-m", "evaluator_host.cli", "worker", "--drain"],
        cwd=REPO, env=grid.host_env("nobody"), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert drain.returncode == 1 and "no worker runs on" in drain.stderr


def test_drain_on_the_services_data_dir_leaves_the_service_running(grid_factory: Callable[..., Grid]) -> None:
    grid = grid_factory()
    client = grid.serve()
    drain = zygote.run(
        [sys.executable, "-m", "evaluator_host.cli", "worker", "--drain", "--timeout", "10"],
        cwd=REPO, env=grid.host_env("service"), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert drain.returncode == 1 and "is not a worker host but a service" in drain.stderr, drain.stderr
    assert "drained" not in drain.stdout
    time.sleep(0.5)
    assert grid.service is not None and grid.service.poll() is None
    assert client.get("/healthz").status_code == 200


def test_a_worker_without_a_queue_url_refuses_to_start(grid_factory: Callable[..., Grid]) -> None:
    grid = grid_factory()
    env = {k: v for k, v in grid.host_env("c").items() if k != "EVALUATOR_HOST_QUEUE_URL"}
    done = zygote.run(
        [sys.executable, "-m", "evaluator_host.cli", "worker"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 2 and "EVALUATOR_HOST_QUEUE_URL" in done.stderr


def test_a_workspace_job_with_a_secret_runs_on_hosts_redacted_and_hidden_from_other_workspaces(
    grid_factory: Callable[..., Grid],
) -> None:
    import httpx
    from cryptography.fernet import Fernet

    grid = grid_factory(admin_key="operator-key", secrets_key=Fernet.generate_key().decode())
    base = str(grid.serve().base_url)
    grid.add_host("a")
    operator = httpx.Client(base_url=base, headers={"Authorization": "Bearer operator-key"}, timeout=60)
    keys = []
    for name in ("team-a", "team-b"):
        ws = operator.post("/v1/workspaces", json={"name": name}).json()["id"]
        keys.append(operator.post(f"/v1/workspaces/{ws}/keys", json={"name": "ci"}).json()["key"])
    team_a = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {keys[0]}"}, timeout=60)
    team_b = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {keys[1]}"}, timeout=60)
    assert team_a.put("/v1/secrets/TOKEN", json={"value": "s3cret-value"}).status_code == 204
    code = (
        "import os\n\ndef evaluate(inputs, outputs, trace):\n"
        "    token = os.environ['TOKEN']\n"
        "    return {'score': 1.0 if token == 's3cret-value' else 0.0, 'reason': 'saw ' + token}\n"
    )
    body = {"name": "judge", "language": "python", "code": code, "secrets": ["TOKEN"]}
    evaluator = team_a.post("/v1/evaluators", json=body)
    assert evaluator.status_code == 201, evaluator.text
    job = team_a.post("/v1/jobs", json={"evaluator_id": evaluator.json()["id"], "rows": [{"i": i} for i in range(40)]})
    assert job.status_code == 202, job.text
    job_id = job.json()["id"]
    state = wait_until(
        lambda: (s := team_a.get(f"/v1/jobs/{job_id}").json())["status"] not in ("queued", "running") and s, 90, 0.1
    )
    assert state["status"] == "succeeded" and state["progress"]["done"] == 40, state
    exported = team_a.get(f"/v1/jobs/{job_id}/results", params={"format": "ndjson"}).text
    assert "s3cret-value" not in exported and "[secret TOKEN]" in exported  # the host decrypted, then redacted
    assert {r["worker"] for r in map(__import__("json").loads, exported.splitlines())} == {"a"}
    assert team_a.get(f"/v1/jobs/{job_id}").json()["aggregate"]["score"]["mean"] == 1.0
    assert team_b.get(f"/v1/jobs/{job_id}").status_code == 404
    assert team_b.get(f"/v1/jobs/{job_id}/results").status_code == 404
    for client in (operator, team_a, team_b):
        client.close()


def test_a_chunk_task_a_host_cannot_run_fails_the_job_clearly_naming_the_host(
    grid_factory: Callable[..., Grid],
) -> None:
    from sqlalchemy import create_engine, text

    from evaluator_host.jobs.queue.broker import CHUNK_TASK, make_app
    from evaluator_host.jobs.queue.signing import sign, task_keys
    from evaluator_host.settings import Settings
    from evaluator_host.store.schema import normalized_url

    grid = grid_factory(queue_window="1")  # one chunk of the job queued at a time
    grid.serve()
    job_id = grid.start_job(grid.evaluator(), rows(200, wait=0.05))
    engine = create_engine(normalized_url(grid.database_url))
    with engine.connect() as conn:
        owner = conn.execute(text("SELECT owner FROM jobs WHERE id = :j"), {"j": job_id}).scalar_one()
    engine.dispose()
    # a task no release can read (a version skew in this deployment: signed with its key, so the host reads it;
    # an unsigned or forged one is refused unread and leaves the job alone: tests/queue/test_forged_tasks.py),
    # queued behind the job's first chunk
    producer = Settings(queue_url=grid.redis.url, data_dir=grid.root / "producer", secrets_key=[SECRETS_KEY])
    unreadable = "this is not a chunk"
    signature = sign(task_keys(producer)[0], job_id, owner, unreadable)
    make_app(producer).send_task(CHUNK_TASK, args=(job_id, owner, unreadable, signature))
    grid.add_host("a", lanes=1)
    job = grid.finished(job_id)
    assert job["status"] == "failed", job
    assert job["error"]["type"] == "InternalError" and "on worker host a" in job["error"]["message"], job
    assert "a chunk could not be run" in grid.host_log("a")
    done = job["progress"]["done"]
    assert grid.stored(job_id)[:3] == (done, done, done)  # what was stored before stays, each row once


def test_a_queued_job_whose_every_row_errored_on_the_hosts_fails_with_the_common_error(
    grid_factory: Callable[..., Grid],
) -> None:
    """Issue 48 point 3 on worker hosts: the host's commit that stores the last row ends the job ``failed``
    (``AllRowsErrored``, with the most common error and an example), not ``succeeded``."""
    grid = grid_factory()
    grid.serve()
    grid.add_host("a")
    evaluator = grid.evaluator("def evaluate(inputs, outputs, trace):\n    return outputs.strip()\n")
    job_id = grid.start_job(evaluator, [{"outputs": i} for i in range(30)])
    job = grid.finished(job_id)
    assert job["status"] == "failed" and job["progress"] == {"total": 30, "done": 30, "failed": 30, "cached": 0}, job
    error = job["error"]
    assert error["type"] == "AllRowsErrored" and error["most_common"] == {"type": "AttributeError", "count": 30}
    assert error["example"]["index"] == 0 and error["example"]["line"] == 2, error
