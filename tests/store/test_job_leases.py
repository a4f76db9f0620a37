"""evaluator_host.store.jobs.leases on SQLite and PostgreSQL: a job is held by a lease its owner renews;
one past its lease is adopted by exactly one other store, and the old owner's late commit stores nothing.

Leases here are fractions of a second (the store takes any ``lease_s``; the service's setting is ≥ 1 s),
waited out on the database's clock, not slept through blindly."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator

import pytest
from psycopg import pq
from sqlalchemy import make_url, select, text, update

from evaluator_host.errors import JobNotHeld
from evaluator_host.store.db import JobRow, make_engine
from evaluator_host.store.jobs.leases import database_now
from evaluator_host.store.jobs.repository import JobStore
from evaluator_host.store.pg_sessions import IDLE_IN_TRANSACTION_MS, StatementAtATime, idle_bound
from tests.support import REPO
from tests.support.backends import postgres_only
from tests.support.migrated import module_fixtures
from tests.support.pg import Cluster
from tests.support.store import dataset, new_job
from tests.support.wait import wait_until

SHORT = 0.3  # a lease that runs out quickly


migrated, database_url = module_fixtures()  # one migrated database per backend, emptied for each test


@pytest.fixture
def owner(database_url: str) -> Iterator[JobStore]:
    store = JobStore(make_engine(database_url), owner="service-a")
    store.lease_s = SHORT
    store.add_dataset(dataset())
    yield store
    store.engine.dispose()


def _other(owner: JobStore, name: str = "service-b") -> JobStore:
    other = JobStore(owner.engine, owner=name)
    other.lease_s = SHORT
    return other


def _now(store: JobStore) -> float:
    with store.engine.connect() as conn:
        return float(conn.execute(select(database_now(store.engine))).scalar_one())


def _expired(store: JobStore, job_id: str) -> bool:
    lease = store.get_job(job_id).lease_until
    return lease is None or lease < _now(store)


def _quick(database_url: str, idle_ms: int = 1000) -> str:
    """``database_url`` with sessions ended after ``idle_ms`` idle in a transaction (the URL's own options
    come last, and win over the service's minute)."""
    url = make_url(database_url)
    given = url.query.get("options") or ""
    extra = f"-c idle_in_transaction_session_timeout={idle_ms}"
    options = " ".join([*([given] if isinstance(given, str) else given), extra]).strip()
    return url.update_query_dict({"options": options}).render_as_string(hide_password=False)


def _row(job_id: str, idx: int) -> tuple[str, int, str, int, str, str]:
    return (job_id, idx, "ok", 1, "python-1", json.dumps({"status": "ok", "score": idx}))


def test_a_new_job_is_leased_by_the_database_clock_for_lease_s(owner: JobStore) -> None:
    before = _now(owner)
    job = owner.get_job(new_job(owner))
    assert job.lease_until is not None and before + SHORT <= job.lease_until <= _now(owner) + SHORT


def test_a_job_whose_lease_is_renewed_is_never_adopted(owner: JobStore) -> None:
    job = new_job(owner)
    other = _other(owner)
    for _ in range(5):  # renewals keep the lease ahead of the clock: nothing to adopt
        assert owner.renew_leases() == 1
        assert other.adopt_expired() == []
    assert owner.get_job(job).owner == "service-a"


def test_a_job_past_its_lease_is_adopted_with_a_fresh_lease_and_its_progress(owner: JobStore) -> None:
    job = new_job(owner)
    owner.commit_rows(job, [_row(job, 0), _row(job, 1)], done=2, failed=0, acc_state={"n": 2}, active_s=0.1)
    other = _other(owner)
    wait_until(lambda: _expired(owner, job), 10, 0.05, what="the lease to run out")
    [adopted] = other.adopt_expired()
    assert (adopted.id, adopted.owner, adopted.done, adopted.acc_state) == (job, "service-b", 2, {"n": 2})
    assert adopted.lease_until is not None and adopted.lease_until > _now(owner)
    assert other.claim(job) is True  # the adopter runs it as its own
    assert owner.renew_leases() == 0  # the old owner holds nothing any more


def test_an_owner_does_not_adopt_its_own_jobs_and_a_finished_job_is_never_adopted(owner: JobStore) -> None:
    mine, done = new_job(owner), new_job(owner, id="job_2")
    owner.set_job(done, status="succeeded")
    wait_until(lambda: _expired(owner, mine), 10, 0.05, what="the lease to run out")
    assert owner.adopt_expired() == []  # its own: it renews it, it does not adopt it
    assert [j.id for j in _other(owner).adopt_expired()] == [mine]


def test_a_job_whose_dataset_the_adopter_cannot_read_stays_with_its_owner(owner: JobStore) -> None:
    job = new_job(owner)
    wait_until(lambda: _expired(owner, job), 10, 0.05, what="the lease to run out")
    assert _other(owner).adopt_expired(lambda _dataset, _target: False) == []
    assert owner.get_job(job).owner == "service-a"


def test_a_model_target_job_is_adopted_only_by_a_service_that_runs_them(owner: JobStore) -> None:
    plain, targeted = new_job(owner), new_job(owner, id="job_2", target={"model": "m"})
    wait_until(lambda: _expired(owner, plain) and _expired(owner, targeted), 10, 0.05, what="the leases to run out")
    on_a_queue = _other(owner, "service-q/queue")
    assert [j.id for j in on_a_queue.adopt_expired(lambda _dataset, target: not target)] == [plain]
    assert [j.id for j in _other(owner).adopt_expired()] == [targeted]


def test_an_unleased_job_from_before_leases_is_adoptable(owner: JobStore) -> None:
    job = new_job(owner)
    with owner.engine.begin() as conn:  # as migration 0020 leaves the jobs it finds
        conn.execute(update(JobRow).values(lease_until=None))
    assert [j.id for j in _other(owner).adopt_expired()] == [job]


def test_of_many_stores_adopting_at_once_exactly_one_wins_each_job(owner: JobStore) -> None:
    jobs = [new_job(owner, id=f"job_{n}") for n in range(6)]
    wait_until(lambda: all(_expired(owner, j) for j in jobs), 10, 0.05, what="the leases to run out")
    adopters = [_other(owner, f"service-{n}") for n in range(4)]
    won: dict[str, list[str]] = {}
    gate = threading.Barrier(len(adopters))

    def adopt(store: JobStore) -> None:
        gate.wait()
        won[store.owner] = [j.id for j in store.adopt_expired()]

    threads = [threading.Thread(target=adopt, args=(s,)) for s in adopters]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    taken = [j for ids in won.values() for j in ids]
    assert sorted(taken) == sorted(jobs)  # every job once, none twice
    for name, ids in won.items():
        assert all(owner.get_job(j).owner == name for j in ids)


def test_the_old_owners_late_commit_after_adoption_stores_nothing(owner: JobStore) -> None:
    """A paused owner coming back: its chunk was computed before the adoption, its commit is refused
    whole (rows and counters), and the adopter's commit of the same rows lands once."""
    job = new_job(owner)
    owner.commit_rows(job, [_row(job, 0)], done=1, failed=0, acc_state={"n": 1}, active_s=0.1)
    other = _other(owner)
    wait_until(lambda: _expired(owner, job), 10, 0.05, what="the lease to run out")
    assert [j.id for j in other.adopt_expired()] == [job]
    with pytest.raises(JobNotHeld):
        owner.commit_rows(job, [_row(job, 1), _row(job, 2)], done=3, failed=0, acc_state={"n": 3}, active_s=0.2)
    assert owner.finish(job) is False and owner.claim(job) is False
    assert list(owner.done_indices(job)) == [0] and owner.get_job(job).done == 1
    other.commit_rows(job, [_row(job, 1), _row(job, 2)], done=3, failed=0, acc_state={"n": 3}, active_s=0.2)
    assert list(owner.done_indices(job)) == [0, 1, 2] and owner.get_job(job).done == 3


def test_a_restarting_owner_resumes_its_own_job_and_renews_its_lease(owner: JobStore) -> None:
    job = new_job(owner)
    wait_until(lambda: _expired(owner, job), 10, 0.05, what="the lease to run out")
    again = JobStore(owner.engine, owner="service-a")  # the same data dir's service, started again
    again.lease_s = 60.0
    assert [j.id for j in again.unfinished()] == [job]
    assert not _expired(owner, job) and _other(owner).adopt_expired() == []


@postgres_only
def test_an_owner_frozen_inside_a_transaction_holding_its_job_is_ended_by_the_server_and_the_job_adopted(
    postgres: Cluster,
) -> None:
    """A service frozen (SIGSTOP) inside a transaction that holds its job's row held that lock for as long as it
    was frozen, and every adopter's ``FOR UPDATE SKIP LOCKED`` skipped the job: it was never adopted. The server
    now ends a session idle in a transaction (``IDLE_IN_TRANSACTION_MS``, one minute; 1 s here through the URL's
    own options, which come last), its lock goes with it, and the job is adopted."""
    assert IDLE_IN_TRANSACTION_MS == 60_000
    database_url = postgres.database()
    with make_engine(database_url).connect() as conn:  # the service's sessions get the bound
        assert conn.exec_driver_sql("SHOW idle_in_transaction_session_timeout").scalar_one() == "1min"
    owner = JobStore(make_engine(_quick(database_url)), owner="service-a")
    owner.lease_s = SHORT
    owner.add_dataset(dataset())
    other = _other(owner)
    job = new_job(owner)
    frozen = owner.engine.connect()
    try:
        frozen.begin()
        frozen.execute(update(JobRow).where(JobRow.id == job).values(done=JobRow.done))  # holds the job's row
        wait_until(lambda: _expired(other, job), 10, 0.05, what="the lease to run out")
        [adopted] = wait_until(other.adopt_expired, 30, 0.1, what="the adoption of the frozen owner's job")
        assert adopted.owner == "service-b"
    finally:
        frozen.invalidate()
        frozen.close()
        owner.engine.dispose()


@postgres_only
def test_an_engines_executemany_sends_one_statement_at_a_time_never_a_pipeline(postgres: Cluster) -> None:
    """psycopg's ``executemany`` pipelines, and a session frozen mid-pipeline waits on its client "active", where
    no idle timeout ends it (store/pg_sessions.py). The engine's cursors send each statement of an
    ``executemany`` alone, answered before the next; results as psycopg's (the rowcount is the sum)."""
    engine = make_engine(postgres.database())
    modes: list[object] = []
    try:
        with engine.begin() as conn:
            raw = conn.connection.driver_connection
            assert raw is not None
            conn.exec_driver_sql("CREATE TEMPORARY TABLE numbers (i integer)")

            def params() -> Iterator[tuple[int]]:
                for i in range(5):
                    modes.append(raw.pgconn.pipeline_status)  # read while executemany runs
                    yield (i,)

            with raw.cursor() as cursor:
                assert isinstance(cursor, StatementAtATime)
                cursor.executemany("INSERT INTO numbers VALUES (%s)", params())
                assert cursor.rowcount == 5
            added = conn.exec_driver_sql("INSERT INTO numbers VALUES (%s)", [(5,), (6,)])  # through SQLAlchemy
            assert added.rowcount == 2
            assert conn.exec_driver_sql("SELECT sum(i) FROM numbers").scalar_one() == 21
    finally:
        engine.dispose()
    assert modes == [pq.PipelineStatus.OFF] * 5


@postgres_only
def test_a_job_transactions_idle_bound_is_its_own_never_under_a_second_nor_over_the_sessions(
    postgres: Cluster,
) -> None:
    """``idle_bound`` sets the timeout for the transaction under way only (the pooled session's next one has the
    minute back), never under a second whatever the store's lease (tests' leases are fractions of one), never
    over the session's own (a URL's ``options``: the operator's), and not at all where the session has none."""
    database_url = postgres.database()
    show = "SHOW idle_in_transaction_session_timeout"
    for url, lease, inside, after in (
        (database_url, SHORT, "1s", "1min"),
        (database_url, 2.5, "2500ms", "1min"),
        (database_url, 3600.0, "1min", "1min"),  # a lease past the minute: the minute
        (_quick(database_url, 1500), 2.5, "1500ms", "1500ms"),  # the operator's tighter setting kept
        (_quick(database_url, 0), 2.5, "0", "0"),  # turned off by the operator: left off
    ):
        engine = make_engine(url)
        try:
            with engine.begin() as conn:
                idle_bound(conn, lease)
                assert conn.exec_driver_sql(show).scalar_one() == inside, (url, lease)
            with engine.connect() as conn:  # the same pooled session
                assert conn.exec_driver_sql(show).scalar_one() == after, (url, lease)
        finally:
            engine.dispose()


_COMMITTER = """
import json, sys
from evaluator_host.store.db import make_engine
from evaluator_host.errors import JobNotHeld
from evaluator_host.store.jobs.repository import JobStore
url, job, n, lease_s = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
store = JobStore(make_engine(url), owner="service-a")
store.lease_s = lease_s
rows = [(job, i, "ok", 1, "python-1", json.dumps({"status": "ok", "score": i})) for i in range(n)]
print("ready", flush=True)
sys.stdin.readline()
try:
    store.commit_rows(job, rows, done=n, failed=0, acc_state={}, active_s=0.0)
except JobNotHeld as exc:
    print("refused:", exc.message, flush=True)
else:
    print("committed", flush=True)
"""
_GATE = 4242  # the advisory lock the test holds and the job_results trigger waits for


@postgres_only
@pytest.mark.parametrize("adopter", [True, False], ids=["adopted meanwhile", "nobody adopting"])
def test_an_owner_frozen_in_the_middle_of_a_chunks_commit_holds_its_job_only_until_the_server_ends_its_session(
    postgres: Cluster, adopter: bool
) -> None:
    """The CI failure of the paused-owner test (tests/faults/test_job_adoption.py, docker-postgres): an owner
    SIGSTOPped while committing a chunk held its job's row (the rows' foreign key) from inside psycopg's
    ``executemany`` pipeline, a state no server timeout ends: nobody adopted the job. A real process commits
    a chunk whose insert waits, in a trigger after the foreign key's checks locked the job's row, for a lock
    the test holds; the committer is frozen there, then the lock is let go: the server finishes the insert,
    answers, and ends the session once it idled in its transaction for the committer's job lease (1 s here;
    ``idle_bound``: the commit's own bound, on the service's own sessions, whose minute would have held the
    job that long: the paused-owner test's adoption came 60 s after its signal in 3 runs of 5).
    With an adopter, the job is adopted and the commit, continued, is refused as after any adoption
    (``JobNotHeld``, not the database's error), storing nothing; with nobody adopting, the continued commit
    finds the job still its own and commits the chunk on a fresh session (store/jobs/refusals.py)."""
    database_url = postgres.database()
    owner = JobStore(make_engine(database_url), owner="service-a")
    owner.lease_s = SHORT
    owner.add_dataset(dataset())
    other = _other(owner)
    job = new_job(owner, total=1000)
    with owner.engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE FUNCTION gated_insert() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN PERFORM pg_advisory_lock({_GATE}); PERFORM pg_advisory_unlock({_GATE}); RETURN NULL; END $$"
        )
        conn.exec_driver_sql(
            "CREATE TRIGGER gated AFTER INSERT ON job_results FOR EACH STATEMENT EXECUTE FUNCTION gated_insert()"
        )
    name = f"frozen-{uuid.uuid4().hex[:8]}"
    url = make_url(database_url).update_query_dict({"application_name": name})  # the service's minute
    argv = [sys.executable, "-c", _COMMITTER, url.render_as_string(hide_password=False), job, "1000", "1.0"]

    def sessions(where: str) -> int:  # a connection each time: a transaction sees one snapshot of the view
        query = f"SELECT count(*) FROM pg_stat_activity WHERE application_name = :n {where}"
        with owner.engine.connect() as watch:
            return int(watch.execute(text(query), {"n": name}).scalar_one())

    gate = owner.engine.connect()
    gate.exec_driver_sql(f"SELECT pg_advisory_lock({_GATE})")
    gate.commit()  # a session's lock: held across transactions until unlocked
    child = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None
    said = ""
    try:
        assert child.stdout.readline().strip() == "ready"
        child.stdin.write("\n")
        child.stdin.flush()
        waiting = "AND query LIKE 'INSERT INTO job_results%' AND wait_event = 'advisory'"
        wait_until(lambda: sessions(waiting), 60, 0.01, what="the insert waiting in its trigger")
        child.send_signal(signal.SIGSTOP)
        gate.exec_driver_sql(f"SELECT pg_advisory_unlock({_GATE})")
        gate.commit()
        # within half the session's minute: the commit's transaction was bounded by its lease
        wait_until(lambda: sessions("") == 0, 30, 0.05, what="the frozen session ended by the server")
        if adopter:
            [adopted] = wait_until(other.adopt_expired, 30, 0.1, what="the adoption of the frozen committer's job")
            assert adopted.owner == "service-b" and adopted.done == 0
    finally:
        gate.close()
        child.send_signal(signal.SIGCONT)
        try:
            said, _ = child.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            said, _ = child.communicate()
    assert child.returncode == 0, said
    if adopter:
        assert f"refused: job '{job}' is finished, deleted or another service's: its commit failed" in said, said
        assert other.stored_among(job, list(range(1000))) == set()
    else:
        assert "committed" in said, said
        assert owner.stored_among(job, list(range(1000))) == set(range(1000))
        assert owner.get_job(job).done == 1000
    owner.engine.dispose()
