"""Issue 54: three real ``evaluator-host serve`` replicas (process backend, one PostgreSQL, a data dir each, no
shared folder) behind Debian's HAProxy, their datasets' rows in an S3-compatible bucket (moto's server, started
here on loopback as a stand-in for a cloud bucket). A client that only knows HAProxy's address uploads a
dataset, pages it, runs a job on it and reads the job's exports, the requests landing on every replica
(``X-Replica``); then the replica that took the upload is SIGKILLed and the rows and exports are still served
by the other two. No replica's data dir keeps anything of the dataset."""

from __future__ import annotations

import json
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.backends import postgres_only
from tests.support.haproxy import HAPROXY, HAProxy
from tests.support.pg import Cluster
from tests.support.replicas import Replicas
from tests.support.s3_server import S3Server
from tests.support.wait import wait_until

N = 2500
CODE = "def evaluate(inputs, outputs, trace):\n    return outputs == 1\n"


class Through:
    """HAProxy's one address; each answer's replica in :attr:`seen`; a retry (as a real client) on a gateway
    error or a refused connection."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http
        self.seen: list[str] = []

    def call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        for attempt in range(3):
            try:
                answer = self.http.request(method, path, **kw)
            except httpx.TransportError:
                if attempt == 2:
                    raise
                continue
            if answer.status_code not in (502, 503, 504) or attempt == 2:
                self.seen.append(answer.headers.get("x-replica", "?"))
                return answer
        raise AssertionError("unreachable")


@pytest.fixture
def deployment(tmp_path: Path, postgres: Cluster) -> Iterator[tuple[Replicas, S3Server, str, Through]]:
    if not Path(HAPROXY).exists():
        pytest.fail("haproxy is not installed (.ci/run installs Debian's package)")
    s3 = S3Server()
    bucket = s3.bucket(f"b-{uuid.uuid4().hex[:12]}")
    env = {f"EVALUATOR_HOST_{k.upper()}": v for k, v in s3.settings(f"s3://{bucket}/evh").items()}
    url = postgres.database(driver="postgresql")
    group = Replicas(tmp_path / "replicas", url, "process", env, shared_datasets=False)
    proxy: HAProxy | None = None
    try:
        for name in ("r0", "r1", "r2"):
            group.start(name)
        proxy = HAProxy(tmp_path, {r.name: int(r.client.base_url.port or 0) for r in group.running})
        with proxy.client() as http:
            yield group, s3, bucket, Through(http)
    finally:
        if proxy is not None:
            proxy.close()
        group.close()
        s3.stop()


def _read(client: Through, dataset_id: str, job_id: str) -> None:
    page = client.call("GET", f"/v1/datasets/{dataset_id}/rows", params={"offset": 2046, "limit": 4})
    assert [r["row"]["i"] for r in page.json()["data"]] == [2046, 2047, 2048, 2049], page.text
    exported = client.call("GET", f"/v1/jobs/{job_id}/results", params={"format": "ndjson"})
    items = [json.loads(line) for line in exported.text.splitlines()]
    assert [r["row"]["i"] for r in items] == list(range(N))
    assert [r["result"]["passed"] for r in items] == [i % 3 == 1 for i in range(N)]
    csv = client.call("GET", f"/v1/jobs/{job_id}/results", params={"format": "csv"})
    assert csv.status_code == 200 and len(csv.text.strip().splitlines()) == N + 1


@postgres_only
@pytest.mark.slow
def test_a_dataset_uploaded_through_haproxy_is_paged_run_and_exported_by_every_replica_and_survives_its_uploader(
    deployment: tuple[Replicas, S3Server, str, Through],
) -> None:
    group, s3, bucket, client = deployment
    body = "".join(json.dumps({"i": i, "outputs": i % 3}) + "\n" for i in range(N))
    made = client.call("POST", "/v1/datasets", content=body, headers={"content-type": "application/jsonl"})
    assert made.status_code == 201, made.text
    dataset_id, uploader = made.json()["id"], client.seen[-1]
    stored = sorted(s3.objects(bucket, "evh/datasets/"))
    assert stored == [f"evh/datasets/{dataset_id}/head.json", f"evh/datasets/{dataset_id}/rows"]
    evaluator = client.call("POST", "/v1/evaluators", json={"name": "e", "language": "python", "code": CODE}).json()
    started = client.call("POST", "/v1/jobs", json={"evaluator_id": evaluator["id"], "dataset_id": dataset_id})
    assert started.status_code == 202, started.text
    job_id = started.json()["id"]
    job = wait_until(
        lambda: (j := client.call("GET", f"/v1/jobs/{job_id}").json())["status"] not in ("queued", "running") and j,
        300,
        0.2,
        what="the job",
    )
    assert job["status"] == "succeeded" and job["progress"]["done"] == N, job
    _read(client, dataset_id, job_id)
    assert set(client.seen) == {"r0", "r1", "r2"}, client.seen  # round robin: every replica served some
    for replica in group.running:
        assert list((group.root / replica.name / "datasets").iterdir()) == [], replica.name

    killed = next(r for r in group.running if r.name == uploader)
    killed.proc.send_signal(signal.SIGKILL)
    killed.proc.wait(timeout=30)
    client.seen.clear()
    for _ in range(2):  # the rows and exports from the two left, whichever serves
        _read(client, dataset_id, job_id)
    assert set(client.seen) == {"r0", "r1", "r2"} - {uploader}, client.seen
