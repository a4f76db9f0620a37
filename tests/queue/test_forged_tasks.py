"""Worker hosts run only chunk tasks the service signed (issue 28, item 12b).

Anyone who can write to Redis can enqueue a chunk task. Each forged or altered one here is sent
through Celery on the real queue, as such a writer would, while a real job runs: it is refused,
counted in the host's log, and never run — the job's rows are its own dataset's, each stored once.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from sqlalchemy import create_engine, text

from evaluator_host.jobs.queue.broker import CHUNK_TASK, make_app
from evaluator_host.jobs.queue.chunks import encode_rows
from evaluator_host.jobs.queue.signing import sign, task_keys
from evaluator_host.settings import Settings
from evaluator_host.store.schema import normalized_url
from tests.support import REPO, zygote
from tests.support.queue import SECRETS_KEY, Grid, assert_complete, rows

N = 200


def _owner(grid: Grid, job_id: str) -> str:
    engine = create_engine(normalized_url(grid.database_url))
    try:
        with engine.connect() as conn:
            return str(conn.execute(text("SELECT owner FROM jobs WHERE id = :j"), {"j": job_id}).scalar_one())
    finally:
        engine.dispose()


def test_forged_chunk_tasks_are_refused_counted_and_never_run(grid_factory: Callable[..., Grid]) -> None:
    grid = grid_factory(queue_window="1")  # one chunk out at a time: the forged tasks are taken before the last rows
    grid.serve()
    grid.add_host("a", lanes=1)
    other = grid.start_job(grid.evaluator(), rows(4))  # a second job, for a task moved from one job to another
    assert_complete(grid, other, 4)
    job_id = grid.start_job(grid.evaluator(), rows(N))
    owner = _owner(grid, job_id)
    # the last row, rewritten: real row N-1 passes (odd), the forged one would not
    forged = encode_rows([(N - 1, b'{"i": 199, "expected": "yes", "outputs": "FORGED", "wait": 0}')])
    key = task_keys(Settings(secrets_key=[SECRETS_KEY]))[0]  # the deployment's own key (the test is the operator)
    attacker = task_keys(Settings(secrets_key=["A" * 43 + "="]))[0]
    tasks = [
        (job_id, owner, forged),  # unsigned, as today's tasks
        (job_id, owner, forged, "0" * 64),  # a made-up signature
        (job_id, owner, forged, sign(attacker, job_id, owner, forged)),  # signed with another key
        (job_id, owner, forged, sign(key, other, owner, forged)),  # signed for another job
        (job_id, owner, forged, sign(key, job_id, owner, encode_rows([(N - 1, b"{}")]))),  # signed for other rows
        # signed by the deployment itself, yet naming rows the job does not have: refused all the same
        (job_id, owner, encode_rows([(N + 5, b"{}")]), sign(key, job_id, owner, encode_rows([(N + 5, b"{}")]))),
    ]
    app = make_app(Settings(queue_url=grid.redis.url))
    try:
        for args in tasks:
            app.send_task(CHUNK_TASK, args=args)
    finally:
        app.close()
    assert_complete(grid, job_id, N)
    last = grid.results(job_id)[-1]
    assert last["index"] == N - 1 and last["result"]["passed"] is True  # the dataset's row, not the forged one
    assert "FORGED" not in grid.client.get(f"/v1/jobs/{job_id}/results", params={"format": "ndjson"}).text  # type: ignore[union-attr]
    log = grid.host_log("a")
    assert log.count("refused a chunk task") == len(tasks), log[-3000:]
    assert f"({len(tasks)} refused so far)" in log
    assert "(indices outside the job's rows)" in log and "(unsigned)" in log
    assert grid.client.get("/healthz").json()["status"] == "ok"  # type: ignore[union-attr]


def test_a_queue_without_a_shared_key_refuses_to_start(grid_factory: Callable[..., Grid]) -> None:
    grid = grid_factory()
    env = {k: v for k, v in grid.host_env("keyless").items() if k != "EVALUATOR_HOST_SECRETS_KEY"}
    for argv in (["worker", "--name", "keyless"], ["serve", "--port", "1"]):
        done = zygote.run(
            [sys.executable, "-m", "evaluator_host.cli", *argv],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2, done.stderr[-2000:]
        assert "EVALUATOR_HOST_SECRETS_KEY is not" in done.stderr
    assert os.path.isdir(grid.root)
