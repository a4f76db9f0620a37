"""A job outlives its owner (issue 54): two real ``serve`` replicas on one database (PostgreSQL, and a SQLite
file), each on its own data dir (on SQLite their datasets folder shared, docs/operations.md; on PostgreSQL
also without one: a dataset's rows are in the database). The owner of a running
job is SIGKILLed: the other adopts the job once its lease runs out and finishes it with every row stored
exactly once. The owner paused instead (SIGSTOP) and continued after the adoption: its chunks in flight
are refused (``JobNotHeld``, in its log) and every row is still stored exactly once.

The time from the signal to the adoption is printed (``-s`` shows it; the bench measures it: ``bench/
lease_bench.py``); what is asserted about time is the lease's own rule, on the database's clock: nobody
adopts a job before its owner's last lease has run out.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.backends import BACKENDS, postgres_only
from tests.support.pg import Cluster
from tests.support.replicas import SLEEPY, Replicas, with_signal
from tests.support.wait import wait_until

LEASE_S = "2"  # short, so each test waits seconds, not the default's 10 s (the bench uses the default); not the
# setting's least (1 s): a live owner that missed a second of renewals on a loaded machine would lose its job
N = 600  # rows of 20 ms on 2 lanes: about 6 s of work, so the kill lands mid-run


DOCKER = BACKENDS[1]  # the docker backend, with its marks (skipped where no engine answers)
POSTGRES = pytest.param("postgres", marks=[postgres_only])


@pytest.fixture
def replicas(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Replicas]:
    """Replicas on ``request.param``'s (backend, database): a PostgreSQL schema, or one SQLite file outside
    every data dir."""
    backend, database, *rest = request.param
    if database == "sqlite":
        url = f"sqlite:///{tmp_path / 'shared.db'}"
    else:
        cluster: Cluster = request.getfixturevalue("postgres")
        url = cluster.database(driver="postgresql")
    group = Replicas(tmp_path / "replicas", url, backend, {"EVALUATOR_HOST_JOB_LEASE_S": LEASE_S})
    group.shared_datasets = not rest  # ("process", "postgres", "separate"): each its own datasets folder
    try:
        yield group
    finally:
        group.close()


def _on(backend: object, database: str, separate: bool = False) -> object:
    """A (backend, database) parameter with both one's marks (``separate``: no shared datasets folder)."""
    marks = [*getattr(backend, "marks", ()), *([postgres_only] if database == "postgres" else [])]
    name = getattr(backend, "values", (backend,))[0]
    if separate:
        return pytest.param((name, database, "separate"), marks=marks, id=f"{name}-{database}-separate")
    return pytest.param((name, database), marks=marks, id=f"{name}-{database}")


def _dataset_files(replicas: Replicas) -> list[str]:
    """The rows files (``.jsonl``) in every replica's data dir."""
    return sorted(p.name for p in replicas.root.glob("*/datasets/*.jsonl"))


@pytest.mark.parametrize(
    "replicas",
    [
        _on("process", "postgres"),
        _on(DOCKER, "postgres"),
        _on("process", "sqlite"),
        _on("process", "postgres", separate=True),
    ],
    indirect=True,
)
def test_a_job_whose_owner_is_sigkilled_mid_run_is_adopted_and_finished_with_every_row_once(
    replicas: Replicas,
) -> None:
    owner, other = replicas.start_all("a", "b")
    job_id = replicas.start_job(owner, N)
    assert replicas.owner_of(job_id)[0] == owner.service_id
    replicas.mid_run(job_id, N)
    owner.proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    owner.proc.wait(timeout=30)
    replicas.adopted(job_id, other.service_id, killed, float(LEASE_S))
    replicas.complete(job_id, other, N)
    assert replicas.owner_of(job_id)[0] == other.service_id
    if not replicas.shared_datasets:  # the adopter read the rows from the database: no file anywhere
        assert _dataset_files(replicas) == []


@pytest.mark.parametrize("replicas", [_on("process", "postgres", separate=True)], indirect=True)
def test_replicas_with_separate_data_dirs_on_postgresql_serve_any_request_about_any_dataset(
    replicas: Replicas,
) -> None:
    """No shared folder: a dataset uploaded through one replica has its job started through the other, and its
    results paged and rows previewed through the first (a dataset's rows are in the database)."""
    first, second = replicas.start_all("a", "b")
    body = b"".join(
        b'{"i": %d, "expected": "yes", "outputs": "%s", "wait": 0}\n' % (i, b"yes" if i % 2 else b"no")
        for i in range(3000)
    )
    made = first.client.post("/v1/datasets", content=body, headers={"content-type": "application/jsonl"})
    assert made.status_code == 201, made.text
    dataset = made.json()
    assert dataset["row_count"] == 3000
    evaluator = second.client.post("/v1/evaluators", json={"name": "sleepy", "language": "python", "code": SLEEPY})
    assert evaluator.status_code == 201, evaluator.text
    job = second.client.post("/v1/jobs", json={"evaluator_id": evaluator.json()["id"], "dataset_id": dataset["id"]})
    assert job.status_code == 202, job.text
    job_id = job.json()["id"]
    replicas.complete(job_id, first, 3000)
    page = first.client.get(f"/v1/jobs/{job_id}/results", params={"offset": 2040, "limit": 20})
    assert page.status_code == 200, page.text
    shown = page.json()["data"]
    assert [r["index"] for r in shown] == list(range(2040, 2060))
    assert [r["row"]["i"] for r in shown] == list(range(2040, 2060))  # the rows, read by the first replica
    assert [r["result"]["passed"] for r in shown] == [bool(i % 2) for i in range(2040, 2060)]
    rows = first.client.get(f"/v1/datasets/{dataset['id']}/rows", params={"offset": 2047, "limit": 3})
    assert rows.status_code == 200, rows.text
    assert [(r["index"], r["row"]["i"]) for r in rows.json()["data"]] == [(2047, 2047), (2048, 2048), (2049, 2049)]
    seen = second.client.get(f"/v1/datasets/{dataset['id']}/rows", params={"offset": 0, "limit": 1}).json()
    assert seen["data"][0]["row"]["i"] == 0
    assert _dataset_files(replicas) == []


@pytest.mark.parametrize("replicas", [_on("process", "postgres"), _on(DOCKER, "postgres")], indirect=True)
def test_a_paused_owner_continued_after_the_adoption_stores_no_row_of_the_job(replicas: Replicas) -> None:
    """SIGSTOP is a process that is slow, not dead (a long GC pause, a frozen VM): its workers finish the
    chunks it handed them meanwhile, and when it continues it tries to commit them — refused, because the
    job is the adopter's (the fence is ``owner``, in the commit's own transaction)."""
    owner, other = replicas.start_all("a", "b", settings={"a": {"log_level": "info"}})
    job_id = replicas.start_job(owner, N)
    replicas.mid_run(job_id, N)
    owner.proc.send_signal(signal.SIGSTOP)
    paused = time.monotonic()
    try:
        took = replicas.adopted(job_id, other.service_id, paused, float(LEASE_S))
    finally:
        with_signal(owner.proc, signal.SIGCONT)
    # a transaction of the job's idles on PostgreSQL no longer than the lease (store/pg_sessions.idle_bound):
    # an owner paused inside one held the job for the session's minute (adopted after 60 s in 3 runs of 5)
    assert took < 30, f"adopted {took:.1f} s after the pause: the job's row was held past its lease"
    refused = f"job {job_id} stopped here: job '{job_id}' is finished, deleted or another service's"
    wait_until(lambda: refused in owner.log_text(), 120, 0.1, what="the old owner's late commit refused")
    replicas.complete(job_id, other, N)
    assert replicas.owner_of(job_id)[0] == other.service_id
    assert owner.proc.poll() is None  # it lives on, and serves the job as the database has it
    seen = owner.client.get(f"/v1/jobs/{job_id}").json()
    assert seen["status"] == "succeeded" and seen["progress"]["done"] == N


@pytest.mark.parametrize("replicas", [_on("process", "postgres")], indirect=True)
def test_a_replica_starting_on_a_shared_datasets_folder_leaves_another_ones_upload_in_flight_alone(
    replicas: Replicas,
) -> None:
    """A starting service sweeps what a killed one left in its datasets folder; shared between replicas (so
    each can adopt the other's jobs), the folder also holds the upload a live replica is writing: its write
    lock keeps it out of the sweep, and the upload completes, readable through either replica."""
    uploading = replicas.start("a")
    stop, sent, answer = threading.Event(), [0], []

    def body() -> Iterator[bytes]:
        while not stop.is_set():
            yield b"".join(b'{"i": %d, "outputs": "x"}\n' % (sent[0] + k) for k in range(500))
            sent[0] += 500
            time.sleep(0.01)

    def upload() -> None:
        with httpx.Client(base_url=uploading.client.base_url, timeout=120) as client:
            answer.append(client.post("/v1/datasets", content=body(), headers={"content-type": "application/jsonl"}))

    sender = threading.Thread(target=upload, daemon=True)
    sender.start()
    shared = replicas.root / "shared-datasets"
    wait_until(lambda: any(p.stat().st_size > 1 << 16 for p in shared.glob(".upload-*")), 120, what="the upload")
    starting = replicas.start("b")  # its start-up sweep runs over the shared folder now
    assert list(shared.glob(".upload-*")), "the sweep removed a live replica's upload"
    stop.set()
    sender.join(timeout=120)
    assert answer and answer[0].status_code == 201, answer and answer[0].text
    made = answer[0].json()
    assert made["row_count"] == sent[0]
    rows = starting.client.get(f"/v1/datasets/{made['id']}/rows", params={"offset": sent[0] - 1, "limit": 5})
    assert rows.status_code == 200, rows.text
    assert [(r["index"], r["row"]["i"]) for r in rows.json()["data"]] == [(sent[0] - 1, sent[0] - 1)]
    assert not list(shared.glob(".*")), "a temporary or lock file left behind"
