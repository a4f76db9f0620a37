"""The datasets-in-a-bucket benchmark section (issue 54): a 100,000-row dataset's rows in the data dir, as
chunks in PostgreSQL and in an S3-compatible bucket, in one run — ``python -m bench.blob_rows_bench``.

Against a throwaway PostgreSQL server and a moto server in server mode on loopback, both started here
(``tests/support/pg.py``, ``tests/support/s3_server.py``; moto stands in for a cloud bucket this machine
cannot reach: its figures are a loopback server's, a cloud bucket adds a network round trip per request).
For each place of the rows:

* the rows alone (``DatasetFiles`` over ``RowStore``): store 100,000 JSONL rows (parse + write / upload), read
  every row back in order (a job's lanes; median of 3), read a 20-row page at row 90,000 (mean of 30), the
  bytes stored;
* through the API (the app in-process): ``POST /v1/datasets`` of the same rows (median of 3) and ``GET
  /v1/datasets/{id}/rows?offset=90000&limit=20`` (mean of 30).

Run alone, it rewrites its own generated block of docs/benchmarks.md, nothing else (bench/doc.py; ``make bench``
writes it with the rest).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.dataset_rows_bench import ROWS, rows_body, time_rows
from bench.doc import merge_into

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "benchmarks.md"
HEADING = "## Datasets' rows in a bucket (data dir, PostgreSQL chunks, S3)"
KINDS = ("data dir", "chunks", "bucket")


@dataclass
class BlobFigures:
    store_s: dict[str, float] = field(default_factory=dict)
    read_rows_per_s: dict[str, float] = field(default_factory=dict)
    page_ms: dict[str, float] = field(default_factory=dict)
    stored_bytes: dict[str, int] = field(default_factory=dict)
    upload_s: dict[str, float] = field(default_factory=dict)
    api_page_ms: dict[str, float] = field(default_factory=dict)
    round_trip_ms: float = 0.0  # one request to the bucket (a HEAD of an object), mean of 30
    postgres: str = ""
    moto: str = ""
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)


def _settings(kind: str, data_dir: Path, url: str, s3: Any) -> Any:
    from tests.support.service import make_settings

    if kind == "data dir":
        return make_settings(data_dir, backend="process", spare_workers=0)  # SQLite: the rows as files
    if kind == "chunks":
        return make_settings(data_dir, backend="process", spare_workers=0, database_url=url)
    bucket = s3.bucket(f"bench-{uuid.uuid4().hex[:8]}")
    return make_settings(
        data_dir, backend="process", spare_workers=0, database_url=url, **s3.settings(f"s3://{bucket}/evh")
    )


def _rows_alone(figures: BlobFigures, kind: str, settings: Any, body: bytes) -> None:
    from evaluator_host.jobs.datasets.files import DatasetFiles, Limits
    from evaluator_host.store.db import make_engine
    from evaluator_host.store.jobs.row_stores import shared_rows

    engine = make_engine(settings.resolved_database_url)
    limits = Limits(max_rows=1_000_000, max_row_bytes=1 << 20)
    try:
        files = DatasetFiles(settings.data_dir / "datasets", shared_rows(settings, engine))
        store_s, rows_per_s, page_ms = time_rows(files, body, limits, reads=3, pages=30)
        figures.store_s[kind], figures.read_rows_per_s[kind], figures.page_ms[kind] = store_s, rows_per_s, page_ms
        if kind == "bucket":
            trips = []
            for _ in range(30):
                began = time.perf_counter()
                assert files.exists("ds_bench")
                trips.append(time.perf_counter() - began)
            figures.round_trip_ms = statistics.mean(trips) * 1000
        if kind == "data dir":
            figures.stored_bytes[kind] = sum(p.stat().st_size for p in files.root.iterdir())
        elif kind == "chunks":
            with engine.connect() as conn:
                size = conn.exec_driver_sql(
                    "SELECT sum(octet_length(data)) FROM dataset_chunks WHERE dataset_id = 'ds_bench'"
                ).scalar()
            figures.stored_bytes[kind] = int(size or 0)
        else:
            bucket = files.rows.bucket  # type: ignore[union-attr]
            figures.stored_bytes[kind] = sum(
                bucket.client.head_object(Bucket=bucket.name, Key=bucket.key(name))["ContentLength"]
                for name, _ in bucket.listing("datasets/ds_bench/", "measuring")
            )
        files.delete("ds_bench")
    finally:
        engine.dispose()


def _through_the_api(figures: BlobFigures, kind: str, settings: Any, body: bytes) -> None:
    from fastapi.testclient import TestClient

    from evaluator_host.api import create_app
    from tests.support.jobs import upload

    with TestClient(create_app(settings)) as client:
        uploads = []
        for _ in range(3):
            began = time.perf_counter()
            ds = upload(client, body)
            uploads.append(time.perf_counter() - began)
            assert ds["row_count"] == ROWS
        figures.upload_s[kind] = statistics.median(uploads)
        pages = []
        for _ in range(30):
            began = time.perf_counter()
            page = client.get(f"/v1/datasets/{ds['id']}/rows", params={"offset": 90_000, "limit": 20})
            pages.append(time.perf_counter() - began)
            assert [r["index"] for r in page.json()["data"]] == list(range(90_000, 90_020)), page.text
        figures.api_page_ms[kind] = statistics.mean(pages) * 1000


def measure() -> BlobFigures:
    sys.path.insert(0, str(REPO))
    import importlib.metadata

    from tests.support.pg import Cluster
    from tests.support.s3_server import S3Server

    os.environ.setdefault("EVALUATOR_HOST_ALLOWED_HOSTS", "testserver")  # TestClient's name, as the tests do
    figures = BlobFigures(moto=importlib.metadata.version("moto"))
    body = rows_body()
    cluster = Cluster()
    s3 = S3Server()
    try:
        with __import__("psycopg").connect(cluster.dsn("tests")) as conn:
            figures.postgres = str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
        for kind in KINDS:
            data_dir = Path(tempfile.mkdtemp(prefix="blob-bench-"))
            settings = _settings(kind, data_dir, cluster.database(), s3)
            _rows_alone(figures, kind, settings, body)
            _through_the_api(figures, kind, settings, body)
            print(f"{kind}: {figures}", flush=True)
    finally:
        s3.stop()
        cluster.stop()
    figures.load = os.getloadavg()
    return figures


def render(f: BlobFigures) -> tuple[str, str]:
    """The section (markdown) and a summary line."""

    def cells(kind: str) -> str:
        return (
            f"| {kind} | {f.store_s[kind]:.2f} | {f.stored_bytes[kind] / 1e6:.1f} | {f.read_rows_per_s[kind]:,.0f} "
            f"| {f.page_ms[kind]:.2f} | {f.upload_s[kind]:.2f} | {f.api_page_ms[kind]:.2f} |"
        )

    section = "\n".join(
        [
            HEADING,
            "",
            f"`python -m bench.blob_rows_bench` (also part of `make bench`), one run. PostgreSQL {f.postgres} and "
            f"moto {f.moto} in server mode on loopback (both throwaway, started by the bench: moto stands in for a "
            "cloud bucket this machine cannot reach; a cloud bucket adds a network round trip to each of its "
            f"requests), {ROWS:,} JSONL rows of about 80 bytes. *data dir*: the rows as files (SQLite, the "
            "default); *chunks*: `dataset_chunks` in PostgreSQL; *bucket*: `EVALUATOR_HOST_BLOB_URL` "
            "(`store/jobs/dataset_objects.py`: zlib blocks of 1,024 rows in one object, a head written last; records "
            "in "
            "PostgreSQL). Rows alone (`DatasetFiles`): store = parse + write (upload), read = every row in order "
            "(a job's lanes), median of 3, page = 20 rows at row 90,000, mean of 30. Through the API (in-process "
            "app): `POST /v1/datasets` of the same rows (median of 3) and `GET /v1/datasets/{id}/rows?offset=90000"
            "&limit=20` (mean of 30).",
            "",
            "| rows in | store s | stored MB | read rows/s | page ms | API upload s | API page ms |",
            "|---|---|---|---|---|---|---|",
            *(cells(kind) for kind in KINDS),
            "",
            "A page from the bucket is two requests (the head, then one byte range of the block holding the row): "
            f"one request to this moto server took {f.round_trip_ms:.1f} ms (a HEAD, mean of 30), most of the "
            "page's time; a job reads 1, 2, 4 … 16 blocks a request, and reading every row from the bucket stays "
            "several times faster than a job consumes rows (docs/benchmarks.md, *Datasets' rows in PostgreSQL*: "
            "25,000–40,000 rows/s). Compare the rows of one run, not runs: on the shared, loaded machine two runs' "
            "figures differed up to 4×. The machine's load average when the bench ended was "
            f"{f.load[0]:.2f} / {f.load[1]:.2f} / {f.load[2]:.2f} (1 / 5 / 15 min) on 2 cores, shared.",
        ]
    )
    summary = (
        "- datasets' rows (100,000): API upload "
        + ", ".join(f"{kind} {f.upload_s[kind]:.2f} s" for kind in KINDS)
        + "; a 20-row page at row 90,000 "
        + ", ".join(f"{kind} {f.api_page_ms[kind]:.2f} ms" for kind in KINDS)
    )
    return "\n" + section + "\n", summary


if __name__ == "__main__":
    figures = measure()
    body, head = render(figures)
    print(head)
    merge_into(DOC, [body])
    print(f"wrote the datasets-in-a-bucket section of {DOC.relative_to(REPO)}")
