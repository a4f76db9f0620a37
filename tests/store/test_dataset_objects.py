"""Datasets' rows in an S3-compatible bucket (issue 54: ``store/jobs/dataset_objects.py``, ``store/bucket.py``), on a
real moto server started by the test on loopback (a stand-in for a cloud bucket) and a real PostgreSQL.

The rows are stored as compressed blocks in one object and a head written last; they are read back from any row
(across block boundaries, a row bigger than a block's byte budget) with ranged reads; a page deep in a dataset
reads the head and one range; nothing stays in the folder; a refused upload leaves no object; objects no record
names are swept once older than the grace; a bucket that denies access or cannot be reached is
``StorageUnavailable`` naming the bucket, never the secret; a prefix holding another database's rows is
refused (``BucketInUse``): nothing written there, nothing of it swept.
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from evaluator_host.errors import BucketInUse, DatasetError, StorageUnavailable
from evaluator_host.jobs.datasets.files import DatasetFiles, Limits
from evaluator_host.store.bucket import Bucket
from evaluator_host.store.db import make_engine, utcnow
from evaluator_host.store.jobs.dataset_chunks import CHUNK_BYTES, CHUNK_ROWS
from evaluator_host.store.jobs.dataset_objects import BucketRows
from evaluator_host.store.jobs.repository import DatasetRecord, JobStore
from tests.support.backends import postgres_only
from tests.support.pg import Cluster
from tests.support.s3_server import SECRET, S3Server
from tests.support.service import make_settings

pytestmark = postgres_only
LIMITS = Limits(max_rows=1_000_000, max_row_bytes=8 << 20)


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = S3Server()
    yield server
    server.stop()


@pytest.fixture
def engine(postgres: Cluster) -> Iterator[Engine]:
    made = make_engine(postgres.database())
    yield made
    made.dispose()


def _bucket(s3: S3Server, tmp_path: Path, name: str | None = None) -> Bucket:
    name = name or s3.bucket(f"b-{uuid.uuid4().hex[:12]}")
    return Bucket.from_settings(make_settings(tmp_path, **s3.settings(f"s3://{name}/evh/prod")))


@pytest.fixture
def files(s3: S3Server, engine: Engine, tmp_path: Path) -> DatasetFiles:
    return DatasetFiles(tmp_path / "datasets", BucketRows(_bucket(s3, tmp_path), engine))


def _body(n: int, big: int | None = None) -> bytes:
    """``n`` JSONL rows ``{"i": i}``; row ``big`` carries a value larger than a block's byte budget."""
    return b"".join(
        json.dumps({"i": i, **({"pad": "x" * (CHUNK_BYTES + 10)} if i == big else {})}).encode() + b"\n"
        for i in range(n)
    )


def _rows(files: DatasetFiles) -> BucketRows:
    assert isinstance(files.rows, BucketRows)
    return files.rows


def test_rows_stored_as_blocks_in_the_bucket_read_back_from_any_row_and_nothing_stays_in_the_folder(
    files: DatasetFiles, s3: S3Server
) -> None:
    n = 3 * CHUNK_ROWS + 5
    info = files.write("ds", io.BytesIO(_body(n, big=1500)), "jsonl", LIMITS)
    assert info.row_count == n and files.exists("ds") and not files.exists("other")
    assert list(files.root.iterdir()) == []  # the parse's scratch file went; no .jsonl, .idx, .cols
    bucket = _rows(files).bucket
    stored = s3.objects(bucket.name)
    assert sorted(stored) == ["evh/prod/datasets/ds/head.json", "evh/prod/datasets/ds/rows", "evh/prod/owner.json"]
    head = json.loads(stored["evh/prod/datasets/ds/head.json"])
    firsts = [first for first, _ in head["blocks"]]
    assert head["rows"] == n and 1500 in firsts and 1501 in firsts  # the big row is a block of its own
    assert len(stored["evh/prod/datasets/ds/rows"]) == head["end"] < info.bytes / 3  # compressed
    for begin in (0, 1, CHUNK_ROWS - 1, CHUNK_ROWS, 1499, 1500, 1501, n - 1, n, n + 7):
        got = [(i, json.loads(line)["i"]) for i, line in files.lines("ds", begin)]
        assert got == [(i, i) for i in range(begin, n)], begin
    assert files.filled("ds") == {"i": n, "pad": 1}
    files.delete("ds")
    assert not files.exists("ds") and list(files.lines("ds")) == [] and files.filled("ds") is None
    assert sorted(s3.objects(bucket.name)) == ["evh/prod/owner.json"]  # the prefix's owner stays


def test_a_page_deep_in_a_dataset_reads_the_head_and_one_range(files: DatasetFiles) -> None:
    files.write("ds", io.BytesIO(_body(10 * CHUNK_ROWS)), "jsonl", LIMITS)
    calls: list[tuple[str, Any]] = []
    client = _rows(files).bucket.client
    client.meta.events.register("before-call.s3", lambda model, params, **_: calls.append((model.name, params)))
    start = 7 * CHUNK_ROWS + 3
    page = [i for _, (i, _line) in zip(range(5), files.lines("ds", start), strict=False)]
    assert page == [start + k for k in range(5)]
    assert [name for name, _ in calls] == ["GetObject", "GetObject"]  # the head, then the one block's range
    assert calls[1][1]["headers"]["Range"].startswith("bytes=")


def test_an_empty_dataset_exists_with_no_rows(files: DatasetFiles) -> None:
    info = files.write_rows("empty", [], LIMITS)
    assert info.row_count == 0 and files.exists("empty") and list(files.lines("empty")) == []


def test_a_refused_upload_leaves_no_object_and_no_file(files: DatasetFiles, s3: S3Server) -> None:
    with pytest.raises(DatasetError, match="max_dataset_rows"):
        files.write("over", io.BytesIO(_body(2 * CHUNK_ROWS)), "jsonl", Limits(max_rows=CHUNK_ROWS, max_row_bytes=1000))
    assert s3.objects(_rows(files).bucket.name, "evh/prod/datasets/") == {}
    assert list(files.root.iterdir()) == [] and not files.exists("over")


def test_objects_no_record_names_are_swept_once_older_than_the_grace(files: DatasetFiles, engine: Engine) -> None:
    files.write_rows("orphan", [{"a": 1}], LIMITS)
    files.write_rows("recorded", [{"a": 1}], LIMITS)
    JobStore(engine).add_dataset(
        DatasetRecord("recorded", "r", "json", 1, ["a"], 8, False, utcnow(), workspace_id="ws_default")
    )
    assert _rows(files).sweep_orphans() == 0  # young: maybe being recorded right now
    assert _rows(files).sweep_orphans(timedelta(0)) == 1
    assert not files.exists("orphan") and files.exists("recorded")


def test_a_bucket_that_denies_access_is_storage_unavailable_naming_the_bucket_not_the_secret(
    tmp_path: Path, engine: Engine
) -> None:
    denying = S3Server(auth=True)  # knows no key: every request is refused (InvalidAccessKeyId, 403)
    try:
        files = DatasetFiles(tmp_path / "datasets", BucketRows(_bucket(denying, tmp_path, "shared"), engine))
        with pytest.raises(StorageUnavailable) as refused:
            files.write_rows("ds", [{"a": 1}], LIMITS)
        message = str(refused.value)
        assert "s3://shared/evh/prod" in message and "InvalidAccessKeyId" in message and SECRET not in message
        assert refused.value.status == 503 and refused.value.retry_after_s
        assert list(files.root.iterdir()) == []  # the scratch file went
        with pytest.raises(StorageUnavailable):
            files.exists("ds")
    finally:
        denying.stop()


def test_a_bucket_that_cannot_be_reached_is_storage_unavailable_within_seconds(tmp_path: Path, engine: Engine) -> None:
    gone = S3Server()
    bucket = _bucket(gone, tmp_path)
    gone.stop()  # nothing listens on its port now
    files = DatasetFiles(tmp_path / "datasets", BucketRows(bucket, engine))
    with pytest.raises(StorageUnavailable, match="Could not connect"):
        list(files.lines("ds"))


def test_a_prefix_holding_another_databases_rows_is_refused_and_nothing_is_written_or_swept_there(
    s3: S3Server, engine: Engine, postgres: Cluster, tmp_path: Path
) -> None:
    bucket = _bucket(s3, tmp_path)
    ours = DatasetFiles(tmp_path / "ours", BucketRows(bucket, engine))
    ours.write_rows("theirs_ds", [{"a": 1}], LIMITS)  # recorded nowhere in the other database
    other = make_engine(postgres.database())  # another deployment's database, the same bucket and prefix
    try:
        stranger = DatasetFiles(tmp_path / "other", BucketRows(_bucket(s3, tmp_path, bucket.name), other))
        with pytest.raises(BucketInUse, match="another database's rows") as refused:
            stranger.write_rows("ds", [{"a": 2}], LIMITS)
        assert refused.value.status == 503
        with pytest.raises(BucketInUse):
            _rows(stranger).sweep_orphans(timedelta(0))  # would remove every dataset the other database lacks
        assert ours.exists("theirs_ds") and not ours.exists("ds")
        assert [json.loads(line) for _, line in ours.lines("theirs_ds")] == [{"a": 1}]
    finally:
        other.dispose()
