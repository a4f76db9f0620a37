"""Queued jobs use the result cache as the service's own lanes do: a re-run job over the same rows is
answered from the cache on the worker hosts (``cached: true`` on each row, counted in the job's
``progress.cached``), its aggregate the first run's; the first run looked nothing up and cached what ran.
"""

from __future__ import annotations

from tests.support.queue import SLOW, Grid, rows


def test_a_rerun_queued_job_is_answered_from_the_cache_on_the_hosts(grid: Grid) -> None:
    evaluator = grid.evaluator(SLOW, cache=True)  # it sleeps (a time use): opted in
    data = rows(200, wait=0.01)
    first = grid.finished(grid.start_job(evaluator, data))
    assert first["status"] == "succeeded" and first["progress"]["done"] == 200
    assert not first["progress"].get("cached")
    again_id = grid.start_job(evaluator, data)
    again = grid.finished(again_id)
    assert again["status"] == "succeeded", again
    assert again["progress"]["done"] == 200 and again["progress"]["failed"] == 0
    assert again["progress"]["cached"] == 200
    assert again["aggregate"]["pass_rate"] == first["aggregate"]["pass_rate"] == 0.5
    results = grid.results(again_id)
    assert [r["index"] for r in results] == list(range(200))
    assert all(r["result"]["cached"] is True for r in results)
    assert all(r["result"]["passed"] == (r["index"] % 2 == 1) for r in results)
    assert {r["worker"] for r in results} <= {"a", "b"}  # committed by the hosts, not the service
