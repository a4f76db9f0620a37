"""A queued job outlives its dispatcher (issue 54): two real ``serve`` replicas on the queue (one Redis, one
PostgreSQL), a worker host running the chunks. The service that created the job (its dispatcher: the job
is ``<its id>/queue``'s) is SIGKILLed mid-run; the other adopts the job once its lease runs out, becomes its
dispatcher (``<its id>/queue``), sends the rows without a result again, and the job ends with every row
stored exactly once — the dead dispatcher's chunks still in Redis, or running on the host, are refused at
commit (the owner they carry is not the job's any more)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

from evaluator_host.store.jobs.repository import QUEUE_SUFFIX
from tests.support.queue import Grid
from tests.support.replicas import Replicas

LEASE_S = "2"
N = 600


def test_a_queued_job_whose_dispatcher_is_sigkilled_is_adopted_and_finished_with_every_row_once(
    grid_factory: Callable[..., Grid], tmp_path: Path
) -> None:
    grid = grid_factory(job_lease_s=LEASE_S)
    group = Replicas(tmp_path / "replicas", grid.database_url, "process", dict(grid.env))
    try:
        dispatcher, other = group.start("a"), group.start("b")
        grid.add_host("h", lanes=2)
        job_id = group.start_job(dispatcher, N)
        assert group.owner_of(job_id)[0] == dispatcher.service_id + QUEUE_SUFFIX
        group.mid_run(job_id, N)
        dispatcher.proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        dispatcher.proc.wait(timeout=30)
        group.adopted(job_id, other.service_id + QUEUE_SUFFIX, killed, float(LEASE_S))
        group.complete(job_id, other, N)
        results = other.client.get(f"/v1/jobs/{job_id}/results", params={"format": "ndjson"}).text.splitlines()
        assert len(results) == N and all('"worker":"h"' in line.replace(" ", "") for line in results)
    finally:
        group.close()
