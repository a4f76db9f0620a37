"""Issue 54: datasets' rows in an S3-compatible bucket (``EVALUATOR_HOST_BLOB_URL``), through the API of real
services on one real PostgreSQL and a real moto server started by the test on loopback (a stand-in for a cloud
bucket this machine cannot reach).

Two services sharing only the database and the bucket (a data dir each): a dataset uploaded through one is
paged, run as a job and exported (NDJSON, CSV) through the other, nothing of it in either data dir; a bucket
that denies access or goes away answers 503 ``StorageUnavailable`` naming it (no traceback), and the service
stays healthy and stores again once the bucket is back; a job running when it goes away ends failed with that
error; a data dir of today's release (datasets as files, on
SQLite) and a PostgreSQL database holding datasets as chunks have their datasets moved into the bucket at
start-up, nothing lost (count, every row, the column counts), and a second start-up finds nothing to move.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from evaluator_host.api import create_app
from evaluator_host.errors import BucketInUse
from evaluator_host.services import Services
from evaluator_host.store.db import make_engine
from tests.support.backends import postgres_only
from tests.support.jobs import create_evaluator, jsonl, ndjson, start, upload, wait
from tests.support.pg import Cluster
from tests.support.s3_server import S3Server
from tests.support.service import assert_healthy, make_settings

N = 2500  # three blocks of rows


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = S3Server()
    yield server
    server.stop()


def _on_bucket(s3: S3Server) -> tuple[str, dict[str, Any]]:
    name = s3.bucket(f"b-{uuid.uuid4().hex[:12]}")
    return name, {"backend": "process", "spare_workers": 0, **s3.settings(f"s3://{name}/evh")}


def _leftovers(data_dir: Path) -> list[str]:
    return sorted(p.name for p in (data_dir / "datasets").iterdir())


def _all_rows(client: TestClient, dataset_id: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    while True:
        page = client.get(f"/v1/datasets/{dataset_id}/rows", params={"offset": len(rows), "limit": 1000})
        assert page.status_code == 200, page.text
        got = [item["row"] for item in page.json()["data"]]
        if not got:
            return rows
        rows += got


@postgres_only
def test_a_dataset_uploaded_through_one_service_is_paged_run_and_exported_through_another_sharing_the_bucket(
    tmp_path: Path, postgres: Cluster, s3: S3Server
) -> None:
    name, shared = _on_bucket(s3)
    shared["database_url"] = postgres.database()
    with (
        TestClient(create_app(make_settings(tmp_path / "a", **shared))) as a,
        TestClient(create_app(make_settings(tmp_path / "b", **shared))) as b,
    ):
        ds = upload(a, jsonl([{"i": i, "outputs": i % 3} for i in range(N)]))
        assert _leftovers(tmp_path / "a") == [] and _leftovers(tmp_path / "b") == []
        rows = s3.objects(name, "evh/datasets/")
        assert sorted(rows) == [f"evh/datasets/{ds['id']}/head.json", f"evh/datasets/{ds['id']}/rows"]
        page = b.get(f"/v1/datasets/{ds['id']}/rows", params={"offset": 2046, "limit": 4})
        assert [r["row"]["i"] for r in page.json()["data"]] == [2046, 2047, 2048, 2049], page.text
        evaluator = create_evaluator(b, "def evaluate(inputs, outputs, trace):\n    return outputs == 1\n")
        job = wait(b, start(b, evaluator["id"], dataset_id=ds["id"])["id"])
        assert job["status"] == "succeeded" and job["progress"]["done"] == N
        exported = ndjson(a, job["id"])  # the export through the other service: rows read from the bucket
        assert [r["row"]["i"] for r in exported] == list(range(N))
        assert [r["result"]["passed"] for r in exported] == [i % 3 == 1 for i in range(N)]
        csv = b.get(f"/v1/jobs/{job['id']}/results", params={"format": "csv"})
        assert csv.status_code == 200 and len(csv.text.strip().splitlines()) == N + 1
        assert b.delete(f"/v1/jobs/{job['id']}").status_code in (200, 204)
        assert a.delete(f"/v1/datasets/{ds['id']}").status_code in (200, 204)
        assert s3.objects(name, "evh/datasets/") == {} and b.get(f"/v1/datasets/{ds['id']}").status_code == 404


def _unavailable(response: Any, *said: str) -> None:
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["type"] == "StorageUnavailable" and "Retry-After" in response.headers
    assert all(part in error["message"] for part in said), error["message"]
    assert "Traceback" not in response.text


@postgres_only
def test_a_bucket_that_denies_access_answers_503_naming_it_and_the_service_stays_healthy(
    tmp_path: Path, postgres: Cluster
) -> None:
    denying = S3Server(auth=True)  # knows no key: every request refused (InvalidAccessKeyId, 403)
    try:
        settings = {"backend": "process", "database_url": postgres.database(), **denying.settings("s3://shared/evh")}
        with TestClient(create_app(make_settings(tmp_path, **settings))) as client:
            refused = client.post("/v1/datasets", content=jsonl([{"a": 1}]), headers={"content-type": "text/jsonl"})
            _unavailable(refused, "s3://shared/evh", "InvalidAccessKeyId")
            evaluator = create_evaluator(client, "def evaluate(inputs, outputs, trace):\n    return 1.0\n")
            inline = client.post("/v1/jobs", json={"evaluator_id": evaluator["id"], "rows": [{"outputs": 1}]})
            _unavailable(inline, "s3://shared/evh")
            assert client.get("/v1/datasets").json()["data"] == []  # nothing recorded
            assert _leftovers(tmp_path) == []
            assert_healthy(client)
    finally:
        denying.stop()


@postgres_only
def test_a_bucket_that_goes_away_answers_503_and_the_service_stores_again_once_it_is_back(
    tmp_path: Path, postgres: Cluster
) -> None:
    server = S3Server()
    try:
        name, settings = _on_bucket(server)
        with TestClient(create_app(make_settings(tmp_path, database_url=postgres.database(), **settings))) as client:
            ds = upload(client, jsonl([{"a": i} for i in range(10)]))
            server.stop()
            _unavailable(client.get(f"/v1/datasets/{ds['id']}/rows"), f"s3://{name}/evh", "Could not connect")
            gone = client.post("/v1/datasets", content=jsonl([{"a": 1}]), headers={"content-type": "text/jsonl"})
            _unavailable(gone, "Could not connect")
            assert_healthy(client)
            server.start()  # back (moto keeps nothing: the bucket is made again)
            server.bucket(name)
            again = upload(client, jsonl([{"a": 7}]))
            assert client.get(f"/v1/datasets/{again['id']}/rows").json()["data"][0]["row"] == {"a": 7}
            assert _leftovers(tmp_path) == []
    finally:
        server.stop()


def _made(client: TestClient, count: int) -> dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """``count`` datasets of different sizes (one of 2,500 rows, columns sometimes null); by id: the rows and
    the dataset's description."""
    made = {}
    for k in range(count):
        rows = [{"i": i, "k": k, "note": None if i % 7 else f"row {i}"} for i in range(3 if k else N)]
        ds = upload(client, jsonl(rows), name=f"set {k}")
        made[ds["id"]] = (rows, ds)
    return made


def _same(client: TestClient, made: dict[str, tuple[list[dict[str, Any]], Any]]) -> None:
    listed = {d["id"]: d for d in client.get("/v1/datasets").json()["data"]}
    assert sorted(listed) == sorted(made)  # the count: every dataset, nothing more
    for dataset_id, (rows, described) in made.items():
        assert _all_rows(client, dataset_id) == rows
        assert listed[dataset_id]["row_count"] == described["row_count"] == len(rows)


@pytest.mark.parametrize("before", ["sqlite", "postgres"])
def test_datasets_stored_before_the_bucket_move_into_it_at_start_up_with_nothing_lost(
    tmp_path: Path, s3: S3Server, before: str, request: pytest.FixtureRequest
) -> None:
    """``sqlite``: a data dir of today's release (rows as files); ``postgres``: rows as the database's chunks."""
    database = {}
    if before == "postgres":
        postgres: Cluster = request.getfixturevalue("postgres")
        database = {"database_url": postgres.database()}
    plain = make_settings(tmp_path, backend="process", spare_workers=0, **database)
    with TestClient(create_app(plain)) as client:
        made = _made(client, 3)
    assert len(_leftovers(tmp_path)) == (9 if before == "sqlite" else 0)  # .jsonl, .idx, .cols each
    name, settings = _on_bucket(s3)
    with TestClient(create_app(make_settings(tmp_path, **database, **settings))) as client:
        assert _leftovers(tmp_path) == []
        assert len(s3.objects(name, "evh/datasets/")) == 2 * len(made)
        _same(client, made)
        evaluator = create_evaluator(client, "def evaluate(inputs, outputs, trace):\n    return 1\n")
        big = next(dataset_id for dataset_id, (rows, _) in made.items() if len(rows) == N)
        job = wait(client, start(client, evaluator["id"], dataset_id=big, field_mapping={"outputs": "i"})["id"])
        assert job["status"] == "succeeded" and job["progress"]["done"] == N
    heads = {k: json.loads(v) for k, v in s3.objects(name).items() if k.endswith("head.json")}
    assert {head["filled"]["note"] for head in heads.values()} == {358, 1}  # the column counts came along
    if before == "postgres":
        engine = make_engine(database["database_url"])
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM dataset_chunks")).scalar() == 0
        engine.dispose()
    with TestClient(create_app(make_settings(tmp_path, **database, **settings))) as client:  # nothing to move
        _same(client, made)


@postgres_only
def test_a_job_whose_bucket_goes_away_mid_run_ends_failed_with_storage_unavailable_and_a_new_job_is_503(
    tmp_path: Path, postgres: Cluster
) -> None:
    server = S3Server()
    try:
        name, settings = _on_bucket(server)
        settings.update(database_url=postgres.database(), job_chunk_rows=16)
        with TestClient(create_app(make_settings(tmp_path, **settings))) as client:
            ds = upload(client, jsonl([{"outputs": i} for i in range(N)]))  # three blocks: read 1, then 2
            slow = "import time\ndef evaluate(inputs, outputs, trace):\n    time.sleep(0.02)\n    return 1.0\n"
            evaluator = create_evaluator(client, slow)
            # 4 lanes, not the default 2: the first block's 1,024 rows (0.02 s each) still take ~5 s after the
            # first progress, the bucket stopped within a fraction of it
            job = start(client, evaluator["id"], dataset_id=ds["id"], parallelism=4)
            wait(client, job["id"], until=lambda j: j["progress"]["done"] > 0)  # reading the first block
            server.stop()  # the second block's read cannot reach it
            ended = wait(client, job["id"])
            assert ended["status"] == "failed" and ended["error"]["type"] == "StorageUnavailable", ended
            assert f"s3://{name}/evh" in ended["error"]["message"] and 0 < ended["progress"]["done"] < N
            again = client.post("/v1/jobs", json={"evaluator_id": evaluator["id"], "dataset_id": ds["id"]})
            _unavailable(again, f"s3://{name}/evh")
            assert_healthy(client)
    finally:
        server.stop()


@postgres_only
def test_a_service_refuses_to_start_on_a_prefix_holding_another_databases_rows_and_sweeps_nothing(
    tmp_path: Path, postgres: Cluster, s3: S3Server
) -> None:
    name, settings = _on_bucket(s3)
    with TestClient(create_app(make_settings(tmp_path / "one", database_url=postgres.database(), **settings))) as one:
        ds = upload(one, jsonl([{"a": 1}]))
    other = make_settings(tmp_path / "two", database_url=postgres.database(), **settings)  # another database
    with pytest.raises(BucketInUse, match=f"s3://{name}/evh holds another database's rows"):
        with TestClient(create_app(other)):
            pass
    assert sorted(s3.objects(name, "evh/datasets/")) == [
        f"evh/datasets/{ds['id']}/head.json",
        f"evh/datasets/{ds['id']}/rows",
    ]


def test_an_in_process_cli_run_keeps_its_rows_in_its_scratch_dir_not_in_the_bucket(tmp_path: Path) -> None:
    """``Services.start_private`` (``evaluator-host run``/``test``): a SQLite scratch database of its own, so the
    configured bucket is not its place either — its start-up sweep would take every dataset there for an orphan."""
    settings = make_settings(tmp_path, backend="process", blob_url="s3://production/evh")
    services = Services.start_private(settings)
    try:
        assert services.datasets.files.rows is None and services.datasets.where == "the data dir"
    finally:
        asyncio.run(services.close())
