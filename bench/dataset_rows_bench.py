"""The datasets-in-the-database benchmark section (issue 54): a 100,000-row dataset's rows as files in the data
dir (before) against chunks in PostgreSQL (after) — ``python -m bench.dataset_rows_bench``.

Against a throwaway PostgreSQL server started here (``tests/support/pg.py``). Two measurements, each with
the rows as files and then as chunks:

* the rows alone (``DatasetFiles``): store 100,000 JSONL rows (parse + write), read every row back in order
  (what a job's lanes do), and read a 20-row page at row 90,000 (a preview: the mean of 50);
* a real 100,000-row job (the app in-process, process backend, a one-line evaluator): its ``rows_per_s``
  (the median of :data:`JOB_RUNS`, files and chunks alternating), on the same PostgreSQL (the "before" run is
  the same service with its dataset store switched to files: the release before this one on PostgreSQL).

Run alone, it rewrites its own generated block of docs/benchmarks.md, nothing else (bench/doc.py; ``make bench``
writes it with the rest).
"""

from __future__ import annotations

import io
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.doc import merge_into

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "benchmarks.md"
HEADING = "## Datasets' rows in PostgreSQL (files before, chunks after)"
ROWS = 100_000
JOB_RUNS = 3  # jobs of each kind, alternating (the machine is shared: the median of 3)


@dataclass
class RowsFigures:
    store_s: dict[str, float] = field(default_factory=dict)
    read_rows_per_s: dict[str, float] = field(default_factory=dict)
    page_ms: dict[str, float] = field(default_factory=dict)
    job_rows_per_s: dict[str, float] = field(default_factory=dict)  # the median of JOB_RUNS
    job_runs: dict[str, list[float]] = field(default_factory=dict)
    stored_bytes: dict[str, int] = field(default_factory=dict)
    postgres: str = ""
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)


def rows_body() -> bytes:
    """The benches' dataset: :data:`ROWS` JSONL rows of about 80 bytes."""
    return b"".join(
        json.dumps({"i": i, "question": f"what is {i} + {i}?", "expected": str(2 * i), "outputs": str(2 * i)}).encode()
        + b"\n"
        for i in range(ROWS)
    )


def time_rows(files: Any, body: bytes, limits: Any, reads: int, pages: int) -> tuple[float, float, float]:
    """``body`` stored as dataset ``ds_bench`` by ``files`` (a ``DatasetFiles``): the store's seconds, every row read in
    order (rows/s, median of ``reads``) and a page of 20 rows at row 90,000 (ms, mean of ``pages``)."""
    began = time.perf_counter()
    files.write("ds_bench", io.BytesIO(body), "jsonl", limits)
    store_s = time.perf_counter() - began
    rates = []
    for _ in range(reads):
        began = time.perf_counter()
        count = sum(1 for _ in files.lines("ds_bench"))
        rates.append(count / (time.perf_counter() - began))
        assert count == ROWS
    times = []
    for _ in range(pages):
        began = time.perf_counter()
        page = [line for _, (_i, line) in zip(range(20), files.lines("ds_bench", 90_000), strict=False)]
        times.append(time.perf_counter() - began)
        assert len(page) == 20
    return store_s, statistics.median(rates), statistics.mean(times) * 1000


def _rows_alone(figures: RowsFigures, url: str, body: bytes) -> None:
    from evaluator_host.jobs.datasets.files import DatasetFiles, Limits
    from evaluator_host.store.db import make_engine
    from evaluator_host.store.jobs.dataset_chunks import DatasetChunks

    engine = make_engine(url)
    limits = Limits(max_rows=1_000_000, max_row_bytes=1 << 20)
    try:
        for kind in ("files", "chunks"):
            root = Path(tempfile.mkdtemp(prefix=f"rows-bench-{kind}-"))
            files = DatasetFiles(root, DatasetChunks(engine) if kind == "chunks" else None)
            store_s, rows_per_s, page_ms = time_rows(files, body, limits, reads=5, pages=50)
            figures.store_s[kind], figures.read_rows_per_s[kind], figures.page_ms[kind] = store_s, rows_per_s, page_ms
            if kind == "files":
                figures.stored_bytes[kind] = sum(p.stat().st_size for p in root.iterdir())
            else:
                with engine.connect() as conn:
                    size = conn.exec_driver_sql(
                        "SELECT sum(octet_length(data)) FROM dataset_chunks WHERE dataset_id = 'ds_bench'"
                    ).scalar()
                figures.stored_bytes[kind] = int(size or 0)
            files.delete("ds_bench")
    finally:
        engine.dispose()


def _job(figures: RowsFigures, url: str, body: bytes, kind: str) -> None:
    from fastapi.testclient import TestClient

    from evaluator_host.api import create_app
    from tests.support.jobs import create_evaluator, start, upload, wait
    from tests.support.service import make_settings

    os.environ.setdefault("EVALUATOR_HOST_ALLOWED_HOSTS", "testserver")  # TestClient's name, as the tests do
    data_dir = Path(tempfile.mkdtemp(prefix=f"rows-bench-job-{kind}-"))
    settings = make_settings(data_dir, backend="process", database_url=url, spare_workers=0)
    with TestClient(create_app(settings)) as client:
        services: Any = client.app.state.services  # type: ignore[attr-defined]
        if kind == "files":
            services.datasets.files.rows = None  # the release before: the rows as files on PostgreSQL too
        ev = create_evaluator(
            client, "def evaluate(inputs, outputs, trace):\n    return outputs == inputs['expected']\n"
        )
        ds = upload(client, body)
        job = wait(client, start(client, ev["id"], dataset_id=ds["id"])["id"], 1200)
        assert job["status"] == "succeeded" and job["progress"]["done"] == ROWS, job
        figures.job_runs.setdefault(kind, []).append(float(job["rows_per_s"]))
        figures.job_rows_per_s[kind] = statistics.median(figures.job_runs[kind])


def measure() -> RowsFigures:
    sys.path.insert(0, str(REPO))
    from tests.support.pg import Cluster

    figures = RowsFigures()
    body = rows_body()
    cluster = Cluster()
    try:
        url = cluster.database()
        with __import__("psycopg").connect(cluster.dsn("tests")) as conn:
            figures.postgres = str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
        _rows_alone(figures, url, body)
        print(f"rows alone: {figures}", flush=True)
        for _ in range(JOB_RUNS):
            for kind in ("files", "chunks"):
                _job(figures, cluster.database(), body, kind)
    finally:
        cluster.stop()
    figures.load = os.getloadavg()
    return figures


def render(f: RowsFigures) -> tuple[str, str]:
    """The section (markdown) and a summary line."""

    def cells(kind: str) -> str:
        return (
            f"| {kind} | {f.store_s[kind]:.2f} | {f.stored_bytes[kind] / 1e6:.1f} | {f.read_rows_per_s[kind]:,.0f} "
            f"| {f.page_ms[kind]:.2f} | **{f.job_rows_per_s[kind]:,.0f}** |"
        )

    runs = "; ".join(f"{kind} " + ", ".join(f"{r:,.0f}" for r in f.job_runs[kind]) for kind in f.job_runs)
    section = "\n".join(
        [
            HEADING,
            "",
            f"`python -m bench.dataset_rows_bench` (also part of `make bench`). PostgreSQL {f.postgres} (throwaway, "
            f"started by the bench), {ROWS:,} JSONL rows of about 80 bytes. *files*: the rows in the data dir "
            "(`.jsonl` + block index, as on SQLite and as before on PostgreSQL); *chunks*: `dataset_chunks` "
            "(zlib level 1, 1,024 rows a chunk). Store: parse + write; read: every row in order (a job's lanes), "
            "median of 5; page: 20 rows at row 90,000 (a preview), mean of 50; job: a real 100,000-row job "
            "(in-process app, process backend, a one-line evaluator), its `rows_per_s`: the median of "
            f"{JOB_RUNS}, files and chunks alternating (every run: {runs}).",
            "",
            "| rows in | store s | stored MB | read rows/s | page ms | job rows/s |",
            "|---|---|---|---|---|---|",
            cells("files"),
            cells("chunks"),
            "",
            "The job's rate is bounded by evaluating the rows, not by reading them: reading is more than an order "
            "of magnitude faster than a job consumes rows either way. The machine's load average when the bench "
            f"ended was {f.load[0]:.2f} / {f.load[1]:.2f} / {f.load[2]:.2f} (1 / 5 / 15 min) on 2 cores, shared.",
        ]
    )
    summary = (
        f"- 100,000-row job on PostgreSQL: {f.job_rows_per_s['files']:,.0f} rows/s (files) → "
        f"{f.job_rows_per_s['chunks']:,.0f} rows/s (chunks); reading every row {f.read_rows_per_s['files']:,.0f} → "
        f"{f.read_rows_per_s['chunks']:,.0f} rows/s"
    )
    return "\n" + section + "\n", summary


if __name__ == "__main__":
    figures = measure()
    body, head = render(figures)
    print(head)
    merge_into(DOC, [body])
    print(f"wrote the datasets-rows section of {DOC.relative_to(REPO)}")
