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
from tests.support.replicas import Replicas, with_signal
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


@pytest.mark.parametrize(
    "replicas", [_on("process", "postgres"), _on(DOCKER, "postgres"), _on("process", "sqlite")], indirect=True
)
def test_a_job_whose_owner_is_sigkilled_mid_run_is_adopted_and_finished_with_every_row_once(
    replicas: Replicas,
) -> None:
    owner, other = replicas.start("a"), replicas.start("b")
    job_id = replicas.start_job(owner, N)
    assert replicas.owner_of(job_id)[0] == owner.service_id
    replicas.mid_run(job_id, N)
    owner.proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    owner.proc.wait(timeout=30)
    replicas.adopted(job_id, other.service_id, killed, float(LEASE_S))
    replicas.complete(job_id, other, N)
    assert replicas.owner_of(job_id)[0] == other.service_id


@pytest.mark.parametrize("replicas", [_on("process", "postgres"), _on(DOCKER, "postgres")], indirect=True)
def test_a_paused_owner_continued_after_the_adoption_stores_no_row_of_the_job(replicas: Replicas) -> None:
    """SIGSTOP is a process that is slow, not dead (a long GC pause, a frozen VM): its workers finish the
    chunks it handed them meanwhile, and when it continues it tries to commit them — refused, because the
    job is the adopter's (the fence is ``owner``, in the commit's own transaction)."""
    owner = replicas.start("a", log_level="info")
    other = replicas.start("b")
    job_id = replicas.start_job(owner, N)
    replicas.mid_run(job_id, N)
    owner.proc.send_signal(signal.SIGSTOP)
    paused = time.monotonic()
    try:
        replicas.adopted(job_id, other.service_id, paused, float(LEASE_S))
    finally:
        with_signal(owner.proc, signal.SIGCONT)
    refused = f"job {job_id} stopped here: job '{job_id}' is finished, deleted or another service's"
    wait_until(lambda: refused in owner.log_text(), 120, 0.1, what="the old owner's late commit refused")
    replicas.complete(job_id, other, N)
    assert replicas.owner_of(job_id)[0] == other.service_id
    assert owner.proc.poll() is None  # it lives on, and serves the job as the database has it
    seen = owner.client.get(f"/v1/jobs/{job_id}").json()
    assert seen["status"] == "succeeded" and seen["progress"]["done"] == N
