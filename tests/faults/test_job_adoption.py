"""A job outlives its owner (issue 54): two real ``serve`` replicas on one database (PostgreSQL, and a SQLite
file), each on its own data dir (their datasets folder shared, docs/operations.md). The owner of a running
job is SIGKILLed: the other adopts the job once its lease runs out and finishes it with every row stored
exactly once. The owner paused instead (SIGSTOP) and continued after the adoption: its chunks in flight
are refused (``JobNotHeld``, in its log) and every row is still stored exactly once.

The time from the signal to the adoption is printed (``-s`` shows it; the bench measures it: ``bench/
lease_bench.py``); what is asserted about time is the lease's own rule, on the database's clock: nobody
adopts a job before its owner's last lease has run out.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.backends import BACKENDS, postgres_only
from tests.support.pg import Cluster
from tests.support.replicas import SLEEPY, Replica, Replicas, rows, with_signal
from tests.support.wait import wait_until

LEASE_S = "2"  # short, so each test waits seconds, not the default's 10 s (the bench uses the default)
N = 600  # rows of 20 ms on 2 lanes: about 6 s of work, so the kill lands mid-run


DOCKER = BACKENDS[1]  # the docker backend, with its marks (skipped where no engine answers)
POSTGRES = pytest.param("postgres", marks=[postgres_only])


@pytest.fixture
def replicas(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Replicas]:
    """Replicas on ``request.param``'s (backend, database): a PostgreSQL schema, or one SQLite file outside
    every data dir."""
    backend, database = request.param
    if database == "sqlite":
        url = f"sqlite:///{tmp_path / 'shared.db'}"
    else:
        cluster: Cluster = request.getfixturevalue("postgres")
        url = cluster.database(driver="postgresql")
    group = Replicas(tmp_path / "replicas", url, backend, {"EVALUATOR_HOST_JOB_LEASE_S": LEASE_S})
    try:
        yield group
    finally:
        group.close()


def _on(backend: object, database: str) -> object:
    """A (backend, database) parameter with both one's marks."""
    marks = [*getattr(backend, "marks", ()), *([postgres_only] if database == "postgres" else [])]
    name = getattr(backend, "values", (backend,))[0]
    return pytest.param((name, database), marks=marks, id=f"{name}-{database}")


def _start_job(owner: Replica) -> str:
    evaluator = owner.client.post("/v1/evaluators", json={"name": "sleepy", "language": "python", "code": SLEEPY})
    assert evaluator.status_code == 201, evaluator.text
    body = {"evaluator_id": evaluator.json()["id"], "rows": rows(N), "parallelism": 2}
    job = owner.client.post("/v1/jobs", json=body)
    assert job.status_code == 202, job.text
    return str(job.json()["id"])


def _mid_run(group: Replicas, job_id: str) -> None:
    """Until the job runs and has rows stored, with most still to come."""
    wait_until(lambda: 40 <= group.stored(job_id)[0] and group.stored(job_id)[5] == "running", 180, 0.02,
               what="the job mid-run")  # fmt: skip
    assert group.stored(job_id)[0] < N // 2, "the job ran too far before the signal: nothing left to adopt"


def _adopted(group: Replicas, job_id: str, old: Replica, new: Replica, signalled: float) -> float:
    """Wait for ``new`` to hold the job; the seconds since ``signalled`` (printed), after checking on the
    database's clock that the adoption came after the old owner's last lease ran out."""
    _, last_lease, _ = group.owner_of(job_id)  # the old owner renews no more: this is its last lease
    assert last_lease is not None
    wait_until(lambda: group.owner_of(job_id)[0] == new.service_id, 120, 0.02, what="the adoption")
    took = time.monotonic() - signalled
    owner, lease, now = group.owner_of(job_id)
    adopted_at = lease - float(LEASE_S) if lease is not None else now  # the adopter's lease began then
    assert adopted_at >= last_lease - 0.5, "adopted before the owner's lease ran out"  # the next renewal: ≤ 0.5 s
    print(f"\nadoption {took:.2f} s after the signal to {old.name} ({group.backend}, {group.engine.dialect.name})")
    return took


def _complete(group: Replicas, job_id: str, reader: Replica) -> None:
    """The job succeeded with every row stored exactly once: no duplicate, no gap, counters equal."""
    job = wait_until(
        lambda: (j := reader.client.get(f"/v1/jobs/{job_id}").json())["status"] not in ("queued", "running") and j,
        240,
        0.1,
        what="the job to finish",
    )
    assert job["status"] == "succeeded", job
    assert group.stored(job_id) == (N, N, 0, N - 1, N, "succeeded")
    assert job["progress"]["done"] == N and job["aggregate"]["count"] == N
    assert job["aggregate"]["pass_rate"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    "replicas", [_on("process", "postgres"), _on(DOCKER, "postgres"), _on("process", "sqlite")], indirect=True
)
def test_a_job_whose_owner_is_sigkilled_mid_run_is_adopted_and_finished_with_every_row_once(
    replicas: Replicas,
) -> None:
    owner, other = replicas.start("a"), replicas.start("b")
    job_id = _start_job(owner)
    assert replicas.owner_of(job_id)[0] == owner.service_id
    _mid_run(replicas, job_id)
    owner.proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    owner.proc.wait(timeout=30)
    _adopted(replicas, job_id, owner, other, killed)
    _complete(replicas, job_id, other)
    assert replicas.owner_of(job_id)[0] == other.service_id


@pytest.mark.parametrize("replicas", [_on("process", "postgres"), _on(DOCKER, "postgres")], indirect=True)
def test_a_paused_owner_continued_after_the_adoption_stores_no_row_of_the_job(replicas: Replicas) -> None:
    """SIGSTOP is a process that is slow, not dead (a long GC pause, a frozen VM): its workers finish the
    chunks it handed them meanwhile, and when it continues it tries to commit them — refused, because the
    job is the adopter's (the fence is ``owner``, in the commit's own transaction)."""
    owner = replicas.start("a", log_level="info")
    other = replicas.start("b")
    job_id = _start_job(owner)
    _mid_run(replicas, job_id)
    owner.proc.send_signal(signal.SIGSTOP)
    paused = time.monotonic()
    try:
        _adopted(replicas, job_id, owner, other, paused)
    finally:
        with_signal(owner.proc, signal.SIGCONT)
    refused = f"job {job_id} stopped here: job '{job_id}' is finished, deleted or another service's"
    wait_until(lambda: refused in owner.log_text(), 120, 0.1, what="the old owner's late commit refused")
    _complete(replicas, job_id, other)
    assert replicas.owner_of(job_id)[0] == other.service_id
    assert owner.proc.poll() is None  # it lives on, and serves the job as the database has it
    seen = owner.client.get(f"/v1/jobs/{job_id}").json()
    assert seen["status"] == "succeeded" and seen["progress"]["done"] == N
