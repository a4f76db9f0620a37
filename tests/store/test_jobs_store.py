"""evaluator_host.store.jobs.repository.JobStore on an empty SQLite file and PostgreSQL database.

Datasets (add/get/list/delete; inline datasets are not listed), jobs (create, get, list
filters, ``set_job`` with ``only_unfinished``, ``unfinished``) and the resume invariant of
``commit_rows``: results and counters land in one transaction, and ``(job_id, idx)`` is
the primary key, so committing a row twice raises ``IntegrityError`` and rolls the whole
chunk back (no row stored, counters untouched). ``done_indices`` and ``results`` read
rows back in index order, paged by ``start``/``limit``. Queued jobs' ``commit_shared`` is
idempotent and additive: redelivered, overlapping and concurrent chunks count each row once.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, text, update
from sqlalchemy.exc import IntegrityError

from evaluator_host.errors import JobNotHeld, NotFoundError
from evaluator_host.store.db import DEFAULT_WORKSPACE, DatasetRow, JobRow, make_engine, utcnow
from evaluator_host.store.jobs.repository import JobStore, StoredResult
from tests.support.backends import postgres_only
from tests.support.migrated import module_fixtures
from tests.support.pg import Cluster
from tests.support.store import QUEUE_OWNER, dataset, new_job

migrated, database_url = module_fixtures()  # one migrated database per backend, emptied for each test


@pytest.fixture
def store(database_url: str) -> Iterator[JobStore]:
    store = JobStore(make_engine(database_url))
    yield store
    store.engine.dispose()


def row(idx: int, status: str = "ok", job_id: str = "job_1") -> tuple[str, int, str, int, str, str]:
    return (job_id, idx, status, 1, "python-1", json.dumps({"status": status, "score": idx}))


@pytest.fixture
def job(store: JobStore) -> str:
    store.add_dataset(dataset())
    return new_job(store)


# --------------------------------------------------------------------------- datasets


def test_add_then_get_dataset_round_trips_every_field(store: JobStore) -> None:
    record = dataset()
    store.add_dataset(record)
    got = store.get_dataset("ds_1")
    assert got == record and got.created_at.tzinfo is not None


def test_get_dataset_of_an_unknown_id_is_not_found(store: JobStore) -> None:
    with pytest.raises(NotFoundError):
        store.get_dataset("ds_missing")


def test_list_datasets_lists_uploads_newest_first_and_not_inline_rows(store: JobStore) -> None:
    store.add_dataset(dataset("ds_old", age_s=20))
    store.add_dataset(dataset("ds_inline", inline=True, age_s=10))
    store.add_dataset(dataset("ds_new"))
    assert [d.id for d in store.list_datasets(DEFAULT_WORKSPACE)] == ["ds_new", "ds_old"]
    assert store.get_dataset("ds_inline").inline is True


def test_lists_are_paged_in_the_database_newest_first_ties_by_id(store: JobStore) -> None:
    """``limit`` + ``before`` (the API cursor's ``(created_at, id)``) walk a list in its whole order —
    ties of ``created_at`` broken by id — and each page loads only its own rows."""
    same = utcnow() - timedelta(seconds=5)
    for n in range(9):  # three groups of three datasets created at the same instant
        record = dataset(f"ds_{n}")
        store.add_dataset(dataclasses.replace(record, created_at=same - timedelta(seconds=n // 3)))
        new_job(store, dataset_id=f"ds_{n}", id=f"job_{n}")
        store.set_job(f"job_{n}", created_at=same - timedelta(seconds=n // 3))
    everything = [d.id for d in store.list_datasets(DEFAULT_WORKSPACE)]
    assert everything == ["ds_2", "ds_1", "ds_0", "ds_5", "ds_4", "ds_3", "ds_8", "ds_7", "ds_6"]
    assert [j.id for j in store.list_jobs(DEFAULT_WORKSPACE)] == [i.replace("ds_", "job_") for i in everything]
    loaded: list[object] = []

    def count(target: object, _context: object) -> None:
        loaded.append(target)

    for listing, table in ((store.list_datasets, DatasetRow), (store.list_jobs, JobRow)):
        event.listen(table, "load", count)
        try:
            walked: list[str] = []
            before = None
            while True:
                loaded.clear()
                found = listing(DEFAULT_WORKSPACE, limit=3, before=before)  # type: ignore[operator]
                assert len(loaded) == len(found) <= 3  # the page's rows, never the list's
                walked += [r.id for r in found]
                if len(found) < 3:
                    break
                before = (found[-1].created_at, found[-1].id)
        finally:
            event.remove(table, "load", count)
        assert [w.replace("job_", "ds_") for w in walked] == everything  # no repeat, no gap, the same order


def test_delete_dataset_removes_it_and_ignores_unknown_ids(store: JobStore) -> None:
    store.add_dataset(dataset())
    store.delete_dataset("ds_1")
    store.delete_dataset("ds_1")
    with pytest.raises(NotFoundError):
        store.get_dataset("ds_1")
    assert store.list_datasets(DEFAULT_WORKSPACE) == []


def test_a_dataset_a_job_refers_to_cannot_be_deleted(store: JobStore, job: str) -> None:
    with pytest.raises(IntegrityError):
        store.delete_dataset("ds_1")
    assert store.get_dataset("ds_1").id == "ds_1"


# --------------------------------------------------------------------------- jobs


def test_create_job_is_queued_with_zero_progress(store: JobStore, job: str) -> None:
    record = store.get_job(job)
    assert (record.status, record.done, record.failed, record.active_s) == ("queued", 0, 0, 0.0)
    assert (record.acc_state, record.error, record.started_at, record.finished_at) == (None, None, None, None)
    assert record.field_mapping == {"output": "a"} and record.total == 10
    assert record.created_at.tzinfo is not None


def test_create_job_on_an_unknown_dataset_is_refused(store: JobStore) -> None:
    with pytest.raises(IntegrityError):
        new_job(store, dataset_id="ds_missing")


def test_get_job_of_an_unknown_id_is_not_found(store: JobStore) -> None:
    with pytest.raises(NotFoundError):
        store.get_job("job_missing")


def test_list_jobs_is_newest_first_and_filters_by_status_and_evaluator(store: JobStore) -> None:
    store.add_dataset(dataset())
    new_job(store, id="j1", evaluator_id="ev_a")
    new_job(store, id="j2", evaluator_id="ev_b")
    new_job(store, id="j3", evaluator_id="ev_a")
    store.set_job("j3", status="running")
    assert [j.id for j in store.list_jobs(DEFAULT_WORKSPACE)] == ["j3", "j2", "j1"]
    assert [j.id for j in store.list_jobs(DEFAULT_WORKSPACE, evaluator_id="ev_a")] == ["j3", "j1"]
    assert [j.id for j in store.list_jobs(DEFAULT_WORKSPACE, status="queued")] == ["j2", "j1"]
    assert [j.id for j in store.list_jobs(DEFAULT_WORKSPACE, status="running", evaluator_id="ev_b")] == []


def test_set_job_updates_fields_and_reports_whether_a_job_matched(store: JobStore, job: str) -> None:
    now = utcnow()
    assert store.set_job(job, status="running", started_at=now, warnings=["w"]) is True
    record = store.get_job(job)
    assert (record.status, record.started_at, record.warnings) == ("running", now, ["w"])
    assert store.set_job("job_missing", status="running") is False


@pytest.mark.parametrize("status", ["queued", "running"])
def test_set_job_only_unfinished_changes_a_queued_or_running_job(store: JobStore, job: str, status: str) -> None:
    store.set_job(job, status=status)
    assert store.set_job(job, only_unfinished=True, status="cancelled") is True
    assert store.get_job(job).status == "cancelled"


@pytest.mark.parametrize("status", ["succeeded", "failed", "cancelled"])
def test_set_job_only_unfinished_leaves_a_finished_job_unchanged(store: JobStore, job: str, status: str) -> None:
    store.set_job(job, status=status, error={"type": "X"})
    before = store.get_job(job)
    assert store.set_job(job, only_unfinished=True, status="running", error=None) is False
    assert store.get_job(job) == before


def test_unfinished_lists_queued_and_running_jobs_oldest_first(store: JobStore) -> None:
    store.add_dataset(dataset())
    for n, status in enumerate(["running", "succeeded", "queued", "failed", "cancelled", "running"]):
        new_job(store, id=f"j{n}")
        store.set_job(f"j{n}", status=status)
    assert [j.id for j in store.unfinished()] == ["j0", "j2", "j5"]


# --------------------------------------------------------------------------- results


def test_commit_rows_stores_rows_and_counters_together(store: JobStore, job: str) -> None:
    store.commit_rows(job, [row(0), row(1, "error")], done=2, failed=1, acc_state={"n": 2}, active_s=1.5)
    record = store.get_job(job)
    assert (record.done, record.failed, record.acc_state, record.active_s) == (2, 1, {"n": 2}, 1.5)
    assert list(store.done_indices(job)) == [0, 1]
    assert store.results(job, 0, 10) == [
        StoredResult(0, 1, "python-1", row(0)[5]),
        StoredResult(1, 1, "python-1", row(1, "error")[5]),
    ]


def test_commit_rows_with_no_rows_updates_only_the_counters(store: JobStore, job: str) -> None:
    store.commit_rows(job, [], done=0, failed=0, acc_state={"empty": True}, active_s=0.25)
    record = store.get_job(job)
    assert (record.acc_state, record.active_s) == ({"empty": True}, 0.25)
    assert list(store.done_indices(job)) == []


def test_committing_a_stored_row_again_fails_and_rolls_back_the_whole_chunk(store: JobStore, job: str) -> None:
    store.commit_rows(job, [row(0), row(1)], done=2, failed=0, acc_state={"n": 2}, active_s=1.0)
    with pytest.raises(IntegrityError):
        store.commit_rows(job, [row(5), row(1, "error")], done=4, failed=1, acc_state={"n": 4}, active_s=2.0)
    record = store.get_job(job)
    assert (record.done, record.failed, record.acc_state, record.active_s) == (2, 0, {"n": 2}, 1.0)
    assert list(store.done_indices(job)) == [0, 1]
    assert store.results(job, 1, 1)[0].result == row(1)[5]  # the first result is kept


def test_a_chunk_with_the_same_index_twice_is_refused_entirely(store: JobStore, job: str) -> None:
    with pytest.raises(IntegrityError):
        store.commit_rows(job, [row(3), row(3)], done=2, failed=0, acc_state={}, active_s=0.0)
    assert store.get_job(job).done == 0
    assert list(store.done_indices(job)) == []


def test_the_same_index_may_be_stored_once_per_job(store: JobStore, job: str) -> None:
    new_job(store, id="job_2")
    store.commit_rows(job, [row(0)], done=1, failed=0, acc_state={}, active_s=0.0)
    store.commit_rows("job_2", [row(0, job_id="job_2")], done=1, failed=0, acc_state={}, active_s=0.0)
    assert list(store.done_indices(job)) == [0] and list(store.done_indices("job_2")) == [0]


def test_rows_of_an_unknown_job_are_refused(store: JobStore, job: str) -> None:
    with pytest.raises(IntegrityError):
        store.commit_rows("job_missing", [row(0, job_id="job_missing")], done=1, failed=0, acc_state={}, active_s=0.0)
    assert list(store.done_indices("job_missing")) == []


def test_done_indices_are_ascending_whatever_the_commit_order(store: JobStore, job: str) -> None:
    store.commit_rows(job, [row(7), row(2)], done=2, failed=0, acc_state={}, active_s=0.0)
    store.commit_rows(job, [row(5), row(0)], done=4, failed=0, acc_state={}, active_s=0.0)
    assert list(store.done_indices(job)) == [0, 2, 5, 7]


def test_results_pages_by_start_index_and_limit_across_gaps(store: JobStore, job: str) -> None:
    store.commit_rows(job, [row(i) for i in (9, 1, 4, 6, 2)], done=5, failed=0, acc_state={}, active_s=0.0)
    assert [r.idx for r in store.results(job, 0, 3)] == [1, 2, 4]
    assert [r.idx for r in store.results(job, 5, 3)] == [6, 9]  # start falls in a gap
    assert [r.idx for r in store.results(job, 10, 3)] == []
    assert [r.idx for r in store.results("job_missing", 0, 3)] == []


# --------------------------------------------------------------------------- ownership


def test_a_cancelled_or_deleted_job_takes_no_more_rows(store: JobStore, job: str) -> None:
    store.commit_rows(job, [row(0)], done=1, failed=0, acc_state={"n": 1}, active_s=0.5)
    store.set_job(job, status="cancelled")
    with pytest.raises(JobNotHeld):
        store.commit_rows(job, [row(1)], done=2, failed=0, acc_state={"n": 2}, active_s=1.0)
    record = store.get_job(job)
    assert (record.done, record.acc_state) == (1, {"n": 1}) and list(store.done_indices(job)) == [0]
    store.delete_job(job)
    with pytest.raises(IntegrityError):  # the rows' job is gone
        store.commit_rows(job, [row(2)], done=3, failed=0, acc_state={}, active_s=0.0)
    assert list(store.done_indices(job)) == []


def test_another_owners_job_is_neither_resumed_claimed_nor_committed_to(store: JobStore, job: str) -> None:
    other = JobStore(store.engine, owner="other-service")
    assert [j.id for j in store.unfinished()] == [job] and other.unfinished() == []
    assert other.claim(job) is False
    with pytest.raises(JobNotHeld):
        other.commit_rows(job, [row(0)], done=1, failed=0, acc_state={}, active_s=0.0)
    assert other.set_job(job, only_held=True, status="failed") is False
    assert store.claim(job) is True and store.get_job(job).status == "running"
    assert list(store.done_indices(job)) == [] and store.get_job(job).done == 0


def test_jobs_without_an_owner_are_claimed_once_by_whoever_resumes_first(store: JobStore) -> None:
    store.add_dataset(dataset())
    for n in range(6):
        new_job(store, id=f"j{n}")
    with store.engine.begin() as conn:  # as a database from before owners existed has them
        conn.execute(update(JobRow).values(owner=None))
    stores = [JobStore(store.engine, owner=f"service-{n}") for n in range(3)]
    with ThreadPoolExecutor(3) as pool:
        claimed = list(pool.map(lambda s: [j.id for j in s.unfinished()], stores))
    assert sorted(sum(claimed, [])) == [f"j{n}" for n in range(6)]  # each exactly once
    for owner, mine in zip(stores, claimed, strict=True):
        assert [j.id for j in owner.unfinished()] == mine  # and they stay its own
    assert store.unfinished() == []  # the first store's jobs are others' now


@postgres_only
def test_stored_times_read_back_in_utc_whatever_the_session_zone(postgres: Cluster) -> None:
    url = postgres.database().replace("options=", "options=-ctimezone%3DAsia/Kolkata%20")
    store = JobStore(make_engine(url))
    with store.engine.connect() as conn:
        assert conn.execute(text("SHOW timezone")).scalar() == "Asia/Kolkata"  # the URL's options win
    record = dataset()
    store.add_dataset(record)
    got = store.get_dataset(record.id)
    assert got == record and got.created_at.utcoffset() == timedelta(0)
    store.engine.dispose()


# --------------------------------------------------------------------------- queued jobs: commit_shared


@pytest.fixture
def queued(store: JobStore) -> str:
    store.add_dataset(dataset())
    job_id = new_job(store, total=10)
    store.set_job(job_id, owner=QUEUE_OWNER, status="running")
    return job_id


def shared_rows(indices: range | list[int]) -> list[tuple[int, str, str, Any]]:
    from evaluator_host.jobs.running.rows import StoredRow

    made = []
    for idx in indices:
        status = "error" if idx % 5 == 4 else "ok"
        score = None if status != "ok" else idx / 10
        made.append((idx, status, json.dumps({"status": status, "score": score}), StoredRow(status, "", score)))
    return made


def commit(store: JobStore, job_id: str, indices: range | list[int], worker: str = "host-a") -> Any:
    return store.commit_shared(
        job_id, QUEUE_OWNER, shared_rows(indices), revision=1, runtime_id="python-1", worker=worker
    )


def test_a_redelivered_chunk_after_a_partial_commit_counts_each_row_once(store: JobStore, queued: str) -> None:
    first = commit(store, queued, range(0, 3))
    again = commit(store, queued, range(0, 6))  # rows 0-2 are stored: only 3-5 are new
    assert (first.stored, again.stored, again.done) == (3, 3, 6)
    job = store.get_job(queued)
    assert (job.done, job.failed, job.status) == (6, 1, "running")  # row 4 is the one error
    assert job.acc_state is not None and job.acc_state["count"] == 6 and job.acc_state["errors"] == 1
    assert commit(store, queued, range(0, 6)).stored == 0  # the whole chunk again: nothing changes
    assert store.get_job(queued).acc_state == job.acc_state
    assert [r.worker for r in store.results(queued, 0, 10)] == ["host-a"] * 6


def test_the_commit_that_stores_the_last_row_marks_the_job_succeeded(store: JobStore, queued: str) -> None:
    commit(store, queued, range(5, 10), worker="host-b")
    last = commit(store, queued, range(0, 5))
    assert last.finished and last.done == 10
    job = store.get_job(queued)
    assert (job.status, job.done, job.failed) == ("succeeded", 10, 2) and job.finished_at is not None
    assert {r.worker for r in store.results(queued, 0, 10)} == {"host-a", "host-b"}
    with pytest.raises(JobNotHeld):  # a late duplicate after the end stores nothing
        commit(store, queued, [3])


def test_shared_commits_are_fenced_by_status_and_owner(store: JobStore, queued: str) -> None:
    with pytest.raises(JobNotHeld):
        store.commit_shared(queued, "another/queue", shared_rows([0]), revision=1, runtime_id="p", worker="x")
    store.set_job(queued, status="cancelled")
    with pytest.raises(JobNotHeld):
        commit(store, queued, [1])
    assert store.results(queued, 0, 10) == [] and store.get_job(queued).done == 0


def test_concurrent_shared_commits_of_overlapping_chunks_keep_counters_equal_to_rows(
    store: JobStore, queued: str
) -> None:
    store.set_job(queued, total=200)
    chunks = [list(range(start, min(start + 20, 200))) for start in range(0, 200, 10)]  # each row in two chunks

    def one(numbered: tuple[int, list[int]]) -> int:
        try:
            return int(commit(store, queued, numbered[1], f"host-{numbered[0] % 3}").stored)
        except JobNotHeld:  # the job was complete already: a late duplicate stores nothing
            return 0

    with ThreadPoolExecutor(max_workers=8) as threads:
        assert sum(threads.map(one, enumerate(chunks * 2))) == 200
    job = store.get_job(queued)
    assert (job.status, job.done, job.failed) == ("succeeded", 200, 40)
    assert job.acc_state is not None and job.acc_state["count"] == 200 and job.acc_state["errors"] == 40
    assert list(store.done_indices(queued)) == list(range(200))


def test_a_service_adopts_its_other_modes_unfinished_jobs(store: JobStore, queued: str) -> None:
    plain = JobStore(store.engine, owner="service-1", adopts=QUEUE_OWNER)  # the queue was turned off
    assert [j.id for j in plain.unfinished()] == [queued]
    assert store.get_job(queued).owner == "service-1"
    with pytest.raises(JobNotHeld):  # the queue's late commits are fenced off from then on
        commit(store, queued, [0])
