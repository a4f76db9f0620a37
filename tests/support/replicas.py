"""Replicas: real ``evaluator-host serve`` processes on one database, each on a data dir of its own, for the
job-lease tests (``tests/faults/test_job_adoption.py``) and their benchmark (``bench/lease_bench.py``).

With ``shared_datasets`` (the default) every replica's ``data_dir/datasets`` is a link to one shared folder — a
shared filesystem mounted there, as docs/operations.md asks on SQLite of services that adopt each other's jobs
(a dataset's rows are files there); without it each replica has a datasets folder of its own, as on PostgreSQL
(a dataset's rows are in the database). Each replica
logs to ``<root>/<name>.log``; ``owner_of`` reads a job's owner and lease from the database itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from cryptography.fernet import Fernet
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine

from evaluator_host.store.schema import normalized_url
from tests.support import REPO
from tests.support.service import free_port
from tests.support.wait import wait_until
from tests.support.zygote import CLI, Process, popen

# a row that waits like a model call; every other row passes (the aggregate is known: mean 0.5)
SLEEPY = (
    "import time\n\ndef evaluate(inputs, outputs, trace):\n"
    "    time.sleep(inputs.get('wait', 0.02))\n    return outputs == inputs['expected']\n"
)


def rows(n: int, wait: float = 0.02) -> list[dict[str, Any]]:
    """``n`` rows of :data:`SLEEPY`, every other one passing."""
    return [{"i": i, "expected": "yes", "outputs": "yes" if i % 2 else "no", "wait": wait} for i in range(n)]


@dataclass
class Replica:
    """One running service: its client, process, data dir's service id (a job's ``owner``) and log."""

    name: str
    client: httpx.Client
    proc: Process
    service_id: str
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class Replicas:
    """Services sharing ``database_url`` and a datasets folder under ``root`` (see the module docstring)."""

    root: Path
    database_url: str
    backend: str = "process"
    env: dict[str, str] = field(default_factory=dict)
    running: list[Replica] = field(default_factory=list)
    engine: Engine | None = None
    shared_datasets: bool = True

    def __post_init__(self) -> None:
        (self.root / "shared-datasets").mkdir(parents=True, exist_ok=True, mode=0o700)
        self.env = {
            "EVALUATOR_HOST_DATABASE_URL": self.database_url,
            "EVALUATOR_HOST_BACKEND": self.backend,
            "EVALUATOR_HOST_SECRETS_KEY": Fernet.generate_key().decode(),  # one key for the deployment
            "EVALUATOR_HOST_SPARE_WORKERS": "0",
            "EVALUATOR_HOST_LOG_FORMAT": "text",
            **self.env,
        }
        self.engine = create_engine(normalized_url(self.database_url))

    def start(self, name: str, port: int | None = None, **settings: str) -> Replica:
        """Start ``serve`` on ``<root>/<name>`` (``settings``: more ``EVALUATOR_HOST_*``), once healthy; on
        ``port`` when given (a replacement behind a load balancer that knows the old one's port), else a free one."""
        return self._healthy(*self._spawn(name, port, settings))

    def start_all(self, *names: str, settings: dict[str, dict[str, str]] | None = None) -> list[Replica]:
        """:meth:`start` for each of ``names`` (``settings``: a name's own ``EVALUATOR_HOST_*`` values), all
        spawned before any is waited for: their start-ups overlap (each waits on its imports, database and pool)."""
        ports: list[int] = []
        while len(ports) < len(names):  # distinct: no replica binds its port before every port is picked
            if (port := free_port()) not in ports:
                ports.append(port)
        spawned: list[tuple[str, Process, httpx.Client, Path]] = []
        try:
            for name, port in zip(names, ports, strict=True):
                spawned.append(self._spawn(name, port, (settings or {}).get(name, {})))
            return [self._healthy(*one) for one in spawned]
        except BaseException:
            for name, proc, client, log in spawned:  # every spawned one not yet running: close() stops it
                if not any(r.proc is proc for r in self.running):
                    self.running.append(Replica(name, client, proc, "", log))
            raise

    def _spawn(self, name: str, port: int | None, settings: dict[str, str]) -> tuple[str, Process, httpx.Client, Path]:
        data_dir = self.root / name
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.shared_datasets and not (data_dir / "datasets").exists():
            (data_dir / "datasets").symlink_to(self.root / "shared-datasets", target_is_directory=True)
        env = {
            **os.environ,
            **self.env,
            **{f"EVALUATOR_HOST_{k.upper()}": v for k, v in settings.items()},
            "EVALUATOR_HOST_DATA_DIR": str(data_dir),
        }
        port = port or free_port()
        log = self.root / f"{name}.log"
        with open(log, "ab") as out:
            proc = popen([*CLI, "serve", "--port", str(port)], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        return name, proc, httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60), log

    def _healthy(self, name: str, proc: Process, client: httpx.Client, log: Path) -> Replica:
        """Wait for a spawned replica's ``/healthz``; the replica, now in :attr:`running`."""

        def healthy() -> bool:
            assert proc.poll() is None, f"{name} exited with {proc.returncode}: {log.read_text(errors='replace')}"
            return client.get("/healthz").status_code == 200

        try:
            wait_until(healthy, 120, 0.1, what=f"{name} to start", ignoring=(httpx.TransportError,))
        except BaseException:
            self.running.append(Replica(name, client, proc, "", log))  # close() stops it
            raise
        replica = Replica(name, client, proc, (self.root / name / "service-id").read_text().strip(), log)
        self.running.append(replica)
        return replica

    def owner_of(self, job_id: str) -> tuple[str | None, float | None, float]:
        """The job's (owner, lease_until) and the database's clock now (Unix s), from the database."""
        assert self.engine is not None
        now = (
            "extract(epoch from clock_timestamp())"
            if self.engine.dialect.name == "postgresql"
            else "((julianday('now') - 2440587.5) * 86400.0)"
        )
        with self.engine.connect() as conn:
            owner, lease, clock = conn.execute(
                text(f"SELECT owner, lease_until, {now} FROM jobs WHERE id = :j"), {"j": job_id}
            ).one()
        return owner, None if lease is None else float(lease), float(clock)

    def stored(self, job_id: str) -> tuple[int, int, int, int, int, str]:
        """From the database: (result rows, distinct indices, lowest, highest index, the job's done, status)."""
        assert self.engine is not None
        with self.engine.connect() as conn:
            count, distinct, low, high = conn.execute(
                text("SELECT count(*), count(DISTINCT idx), min(idx), max(idx) FROM job_results WHERE job_id = :j"),
                {"j": job_id},
            ).one()
            done, status = conn.execute(text("SELECT done, status FROM jobs WHERE id = :j"), {"j": job_id}).one()
        return int(count), int(distinct), int(low or 0), int(high or 0), int(done), str(status)

    def start_job(self, owner: Replica, n: int, wait: float = 0.02) -> str:
        """A job of ``n`` :data:`SLEEPY` rows created through ``owner`` (2 lanes); its id."""
        body = {"name": "sleepy", "language": "python", "code": SLEEPY}
        evaluator = owner.client.post("/v1/evaluators", json=body)
        assert evaluator.status_code == 201, evaluator.text
        job = {"evaluator_id": evaluator.json()["id"], "rows": rows(n, wait), "parallelism": 2}
        made = owner.client.post("/v1/jobs", json=job)
        assert made.status_code == 202, made.text
        return str(made.json()["id"])

    def mid_run(self, job_id: str, n: int) -> None:
        """Until the job runs and has rows stored, with most still to come."""
        wait_until(lambda: (s := self.stored(job_id))[0] >= 40 and s[5] == "running", 180, 0.02, what="the job mid-run")
        assert self.stored(job_id)[0] < n // 2, "the job ran too far before the signal: nothing left to adopt"

    def adopted(self, job_id: str, new_owner: str, signalled: float, lease_s: float) -> float:
        """Wait for ``new_owner`` to hold the job; the seconds since ``signalled`` (printed), after checking on
        the database's clock that the adoption came after the old owner's last lease ran out (that owner
        renews no more: the lease read now is its last)."""
        _, last_lease, _ = self.owner_of(job_id)
        assert last_lease is not None
        wait_until(lambda: self.owner_of(job_id)[0] == new_owner, 120, 0.02, what="the adoption")
        took = time.monotonic() - signalled
        _, lease, _ = self.owner_of(job_id)
        assert lease is not None
        adopted_at = lease - lease_s  # the adopter's first lease began then (or a renewal since: later)
        assert adopted_at >= last_lease - 0.05, "adopted before the owner's lease ran out"  # 0.05: float rounding
        assert self.engine is not None
        print(f"\nadopted {took:.2f} s after the signal ({self.backend}, {self.engine.dialect.name})")
        return took

    def complete(self, job_id: str, reader: Replica, n: int) -> None:
        """The job succeeded with every row stored exactly once: no duplicate, no gap, counters equal."""
        job = wait_until(
            lambda: (j := reader.client.get(f"/v1/jobs/{job_id}").json())["status"] not in ("queued", "running") and j,
            240,
            0.1,
            what="the job to finish",
        )
        assert job["status"] == "succeeded", job
        assert self.stored(job_id) == (n, n, 0, n - 1, n, "succeeded")
        assert job["progress"]["done"] == n and job["aggregate"]["count"] == n
        assert abs(job["aggregate"]["pass_rate"] - 0.5) < 1e-9

    def close(self) -> None:
        for replica in self.running:
            replica.client.close()
            if replica.proc.poll() is None:
                with_signal(replica.proc, signal.SIGCONT)  # a paused one must be able to stop
                replica.proc.terminate()
        for replica in self.running:
            try:
                replica.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                replica.proc.kill()
                replica.proc.wait()
        if self.engine is not None:
            self.engine.dispose()


def with_signal(proc: Process, signum: int) -> None:
    """Send ``signum`` to ``proc`` when it still runs."""
    if proc.poll() is None:
        proc.send_signal(signum)
