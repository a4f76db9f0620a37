"""Queued jobs' results count against the workspace's storage quota too (issue 28, item 4).

The worker hosts commit with ``JobStore.commit_shared``, which charges the quota by the embedded
runner's rule: the chunk that takes the workspace past ``max_dataset_bytes`` stops the job ``failed``
(``QuotaExceeded``), keeping the rows stored; on main the hosts stored every row, whatever the quota.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from sqlalchemy import create_engine, text

from evaluator_host.store.schema import normalized_url
from tests.support.queue import Grid, assert_complete, rows

QUOTA = 2_000_000
CHUNK_ROWS = 8
DETAIL = 60_000
BIG = (
    "def evaluate(inputs, outputs, trace):\n"
    f"    return {{'score': 1.0, 'details': {{'blob': 'x' * {DETAIL}, 'i': inputs['i']}}}}\n"
)


def _sql(grid: Grid, statement: str, **params: object) -> tuple[int, int]:
    engine = create_engine(normalized_url(grid.database_url))
    try:
        with engine.begin() as conn:
            found = conn.execute(text(statement), params)
            return tuple(found.one()) if found.returns_rows else (0, 0)  # type: ignore[return-value]
    finally:
        engine.dispose()


def test_queued_job_results_count_against_the_storage_quota(grid_factory: Callable[..., Grid]) -> None:
    grid = grid_factory(job_chunk_rows=str(CHUNK_ROWS))
    client = grid.serve()
    grid.add_host("a")
    grid.add_host("b")
    # the quota, as the operator's PATCH stores it (hosts read it from the database at each commit)
    _sql(
        grid,
        "UPDATE workspaces SET quotas = CAST(:q AS json) WHERE id = 'ws_default'",
        q=json.dumps({"max_dataset_bytes": QUOTA}),
    )
    job_id = grid.start_job(grid.evaluator(BIG), [{"i": i, "outputs": 1} for i in range(400)])
    job = grid.finished(job_id, timeout_s=180)
    assert job["status"] == "failed", job
    assert job["error"]["type"] == "QuotaExceeded" and "max_dataset_bytes" in job["error"]["message"], job
    count, size = _sql(
        grid,
        "SELECT count(*), coalesce(sum(octet_length(result)), 0) FROM job_results WHERE job_id = :j",
        j=job_id,
    )
    assert 0 < count < 400 and job["progress"]["done"] == count, (count, job)
    # two hosts of two lanes commit at once, yet each commit stores only what fits (the workspace's row
    # is locked for the check): never past the quota
    assert QUOTA - 2 * CHUNK_ROWS * (DETAIL + 1000) < size <= QUOTA, size
    recorded, _ = _sql(grid, "SELECT result_bytes, 0 FROM jobs WHERE id = :j", j=job_id)
    assert recorded == size  # the job's own count is what it stored
    assert client.get("/healthz").json()["status"] == "ok"
    # deleting the job frees its bytes: the next job runs to the end on the hosts
    assert client.delete(f"/v1/jobs/{job_id}").status_code == 204
    assert_complete(grid, grid.start_job(grid.evaluator(), rows(20)), 20)
