"""Datasets' rows in the database on PostgreSQL (issue 54:
``store/jobs/dataset_chunks.py``, ``jobs/datasets/files.py``).

The rows are stored as compressed chunks and read back from any row (across chunk boundaries, a row bigger
than a chunk's byte budget) with a page costing one chunk's query; a refused upload leaves no chunk and no
file; chunks no record names are swept once older than the grace; through the API an upload leaves nothing in
the data dir and its rows serve previews, jobs, results and exports, and deleting it removes its chunks; a
data dir whose datasets are files (stored before, on this database) has them moved in at start-up with nothing
lost, and a second start-up finds nothing to move; going below the migration is refused while it holds rows.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, event, select, text, update
from sqlalchemy.engine import Engine

from evaluator_host.api import create_app
from evaluator_host.errors import DatasetError
from evaluator_host.jobs.datasets.files import DatasetFiles, Limits
from evaluator_host.store import schema
from evaluator_host.store.db import DatasetChunkRow, make_engine, utcnow
from evaluator_host.store.jobs.dataset_chunks import CHUNK_BYTES, CHUNK_ROWS, DatasetChunks
from evaluator_host.store.jobs.repository import DatasetRecord, JobStore
from tests.support.backends import postgres_only
from tests.support.jobs import create_evaluator, jsonl, ndjson, start, upload, wait
from tests.support.pg import Cluster
from tests.support.service import assert_healthy, make_settings

pytestmark = postgres_only
LIMITS = Limits(max_rows=1_000_000, max_row_bytes=8 << 20)


@pytest.fixture
def url(postgres: Cluster) -> str:
    return postgres.database()


@pytest.fixture
def engine(url: str) -> Iterator[Engine]:
    made = make_engine(url)  # migrated to the newest
    yield made
    made.dispose()


@pytest.fixture
def files(engine: Engine, tmp_path: Path) -> DatasetFiles:
    return DatasetFiles(tmp_path / "datasets", DatasetChunks(engine))


def _body(n: int, big: int | None = None) -> bytes:
    """``n`` JSONL rows ``{"i": i}``; row ``big`` carries a value larger than a chunk's byte budget."""
    return b"".join(
        json.dumps({"i": i, **({"pad": "x" * (CHUNK_BYTES + 10)} if i == big else {})}).encode() + b"\n"
        for i in range(n)
    )


def test_rows_stored_as_chunks_read_back_from_any_row_and_nothing_stays_in_the_folder(
    files: DatasetFiles, engine: Engine
) -> None:
    n = 3 * CHUNK_ROWS + 5
    info = files.write("ds", io.BytesIO(_body(n, big=1500)), "jsonl", LIMITS)
    assert info.row_count == n and files.exists("ds") and not files.exists("other")
    assert list(files.root.iterdir()) == []  # the parse's scratch file went; no .jsonl, .idx, .cols
    with engine.connect() as conn:
        firsts = conn.execute(
            select(DatasetChunkRow.first_row, DatasetChunkRow.row_count)
            .where(DatasetChunkRow.dataset_id == "ds")
            .order_by(DatasetChunkRow.first_row)
        ).all()
    # the header, then chunks of CHUNK_ROWS rows except around the row over the byte budget (a chunk of its own)
    assert firsts[0] == (-1, 0) and sum(count for _, count in firsts) == n
    assert (1500, 1) in firsts
    for begin in (0, 1, CHUNK_ROWS - 1, CHUNK_ROWS, 1499, 1500, 1501, n - 1, n, n + 7):
        got = [(i, json.loads(line)["i"]) for i, line in files.lines("ds", begin)]
        assert got == [(i, i) for i in range(begin, n)], begin
    assert files.filled("ds") == {"i": n, "pad": 1}
    files.delete("ds")
    assert not files.exists("ds") and list(files.lines("ds")) == [] and files.filled("ds") is None


def test_a_page_deep_in_a_dataset_reads_the_one_chunk_holding_it_in_one_query(
    files: DatasetFiles, engine: Engine
) -> None:
    files.write("ds", io.BytesIO(_body(10 * CHUNK_ROWS)), "jsonl", LIMITS)
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", seen)
    try:
        start = 7 * CHUNK_ROWS + 3
        page = [i for _, (i, _line) in zip(range(5), files.lines("ds", start), strict=False)]
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    assert page == [start + k for k in range(5)]
    assert len(statements) == 1  # the one chunk holding the row, found by the primary key


def test_an_empty_dataset_exists_with_no_rows(files: DatasetFiles) -> None:
    info = files.write_rows("empty", [], LIMITS)
    assert info.row_count == 0 and files.exists("empty") and list(files.lines("empty")) == []


def test_a_refused_upload_leaves_no_chunk_and_no_file(files: DatasetFiles, engine: Engine) -> None:
    with pytest.raises(DatasetError, match="max_dataset_rows"):
        files.write("over", io.BytesIO(_body(2 * CHUNK_ROWS)), "jsonl", Limits(max_rows=CHUNK_ROWS, max_row_bytes=1000))
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM dataset_chunks")).scalar() == 0
    assert list(files.root.iterdir()) == [] and not files.exists("over")


def test_chunks_no_record_names_are_swept_once_older_than_the_grace(files: DatasetFiles, engine: Engine) -> None:
    assert files.chunks is not None
    files.write_rows("orphan", [{"a": 1}], LIMITS)
    files.write_rows("recorded", [{"a": 1}], LIMITS)
    JobStore(engine).add_dataset(
        DatasetRecord("recorded", "r", "json", 1, ["a"], 8, False, utcnow(), workspace_id="ws_default")
    )
    assert files.chunks.sweep_orphans() == 0  # young: maybe being recorded right now
    with engine.begin() as conn:
        conn.execute(update(DatasetChunkRow).values(stored_at=utcnow() - timedelta(hours=2)))
    assert files.chunks.sweep_orphans() == 1
    assert not files.exists("orphan") and files.exists("recorded")


def test_through_the_api_an_upload_leaves_no_file_and_its_rows_serve_previews_jobs_results_and_exports(
    tmp_path: Path, url: str
) -> None:
    settings = make_settings(tmp_path, backend="process", database_url=url)
    with TestClient(create_app(settings)) as client:
        ds = upload(client, jsonl([{"i": i, "outputs": i % 3} for i in range(2500)]))
        assert sorted(p.name for p in (tmp_path / "datasets").iterdir()) == []
        rows = client.get(f"/v1/datasets/{ds['id']}/rows", params={"offset": 2046, "limit": 4}).json()["data"]
        assert [r["row"]["i"] for r in rows] == [2046, 2047, 2048, 2049]
        evaluator = create_evaluator(client, "def evaluate(inputs, outputs, trace):\n    return outputs == 1\n")
        job = wait(client, start(client, evaluator["id"], dataset_id=ds["id"])["id"])
        assert job["status"] == "succeeded" and job["progress"]["done"] == 2500
        exported = ndjson(client, job["id"])
        assert [r["row"]["i"] for r in exported] == list(range(2500))
        assert [r["result"]["passed"] for r in exported] == [i % 3 == 1 for i in range(2500)]
        csv = client.get(f"/v1/jobs/{job['id']}/results", params={"format": "csv"})
        assert csv.status_code == 200 and len(csv.text.strip().splitlines()) == 2501
        assert client.delete(f"/v1/jobs/{job['id']}").status_code in (200, 204)
        assert client.delete(f"/v1/datasets/{ds['id']}").status_code in (200, 204)
    engine = create_engine(schema.normalized_url(url))
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM dataset_chunks")).scalar() == 0
    engine.dispose()


def test_a_data_dir_whose_datasets_are_files_has_them_moved_into_the_database_at_start_up(
    tmp_path: Path, url: str
) -> None:
    """As today's release left them: the database at 0021_shadow_revisions, each dataset's ``.jsonl``/``.idx``/``.cols``
    in the data dir (written by the file store, recorded in ``datasets``); the next start-up migrates the schema
    and moves the rows in: every row readable, in order, its column counts kept, the files gone."""
    old = create_engine(schema.normalized_url(url))
    with old.begin() as conn:
        command.upgrade(schema._config(conn), "0021_shadow_revisions")  # the revision before dataset_chunks
    legacy = DatasetFiles(tmp_path / "datasets")  # the rows as files: no database to put them in
    made = {}
    for name, n in (("small", 3), ("large", 2 * CHUNK_ROWS + 17)):
        info = legacy.write_rows(f"ds_{name}", ({"i": i, "name": name} for i in range(n)), LIMITS)
        record = DatasetRecord(
            f"ds_{name}", name, "json", info.row_count, info.columns, info.bytes, False, utcnow(), "ws_default"
        )
        JobStore(old).add_dataset(record)
        made[f"ds_{name}"] = n
    old.dispose()
    settings = make_settings(tmp_path, backend="process", database_url=url)
    with TestClient(create_app(settings)) as client:
        assert sorted(p.name for p in (tmp_path / "datasets").iterdir()) == []
        for dataset_id, n in made.items():
            shown = client.get(f"/v1/datasets/{dataset_id}/rows", params={"offset": 0, "limit": 1000}).json()["data"]
            tail = client.get(f"/v1/datasets/{dataset_id}/rows", params={"offset": n - 1, "limit": 5}).json()["data"]
            assert [r["row"]["i"] for r in shown] == list(range(min(n, 1000)))
            assert [r["row"]["i"] for r in tail] == [n - 1]
        evaluator = create_evaluator(client, "def evaluate(inputs, outputs, trace):\n    return 1\n")
        job = wait(client, start(client, evaluator["id"], dataset_id="ds_large")["id"])
        assert job["status"] == "succeeded" and job["progress"]["done"] == made["ds_large"]
    engine = make_engine(url)
    chunks = DatasetFiles(tmp_path / "datasets", DatasetChunks(engine))
    assert chunks.filled("ds_large") == {"i": made["ds_large"], "name": made["ds_large"]}
    assert [json.loads(line)["i"] for _, line in chunks.lines("ds_large")] == list(range(made["ds_large"]))
    engine.dispose()
    with TestClient(create_app(settings)) as client:  # a second start-up: nothing left to move, still readable
        assert client.get("/v1/datasets/ds_small/rows").json()["data"][2]["row"] == {"i": 2, "name": "small"}


def test_an_upload_over_the_row_or_byte_limit_leaves_no_chunk_and_the_service_healthy(tmp_path: Path, url: str) -> None:
    settings = make_settings(tmp_path, backend="process", database_url=url, max_dataset_rows=2000)
    with TestClient(create_app(settings)) as client:
        over = client.post(
            "/v1/datasets",
            content=jsonl([{"i": i} for i in range(2001)]),
            headers={"content-type": "application/jsonl"},
        )
        assert over.status_code == 422 and "max_dataset_rows" in over.json()["error"]["message"], over.text
        assert upload(client, jsonl([{"i": i} for i in range(2000)]))["row_count"] == 2000
        assert list((tmp_path / "datasets").iterdir()) == []
        assert_healthy(client)
    engine = create_engine(schema.normalized_url(url))
    with engine.connect() as conn:  # the one dataset that fits: its header and two chunks
        assert conn.execute(text("SELECT count(DISTINCT dataset_id), count(*) FROM dataset_chunks")).one() == (1, 3)
    engine.dispose()


def test_going_below_0022_is_refused_while_datasets_rows_are_in_the_table(files: DatasetFiles, engine: Engine) -> None:
    files.write_rows("kept", [{"a": 1}], LIMITS)
    below = schema._scripts().get_revision("0022_dataset_chunks").down_revision
    with pytest.raises(RuntimeError, match="would lose them"), engine.begin() as conn:
        command.downgrade(schema._config(conn), str(below))
    assert schema.state(engine).up_to_date
    assert [json.loads(line) for _, line in files.lines("kept")] == [{"a": 1}]
    files.delete("kept")
    with engine.begin() as conn:  # empty: down and up again
        command.downgrade(schema._config(conn), str(below))
        assert not conn.dialect.has_table(conn, "dataset_chunks")
        command.upgrade(schema._config(conn), "head")
    assert files.exists("kept") is False
