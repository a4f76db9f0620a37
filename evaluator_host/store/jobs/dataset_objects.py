"""Datasets' rows in an S3-compatible bucket (issue 54), used when ``EVALUATOR_HOST_BLOB_URL`` is set.

Contract (the layout of ``store/jobs/dataset_chunks.py``, in two objects a dataset instead of table rows):

* ``datasets/<id>/rows``: the rows' JSON lines cut into **blocks** as the database's chunks are
  (:func:`~evaluator_host.store.jobs.dataset_chunks.chunked`: at most ``CHUNK_ROWS`` rows and ``CHUNK_BYTES`` of
  lines, a bigger single row a block of its own), each compressed with zlib on its own, the blocks concatenated.
* ``datasets/<id>/head.json``: ``{"rows": n, "blocks": [[first_row, offset], ...], "end": size, "filled":
  {...}}`` — where each block starts, in rows and in bytes of ``rows``, and the column fill counts. It is
  written **after** ``rows``, so it marks that the dataset is complete (:meth:`BucketRows.exists`): a reader
  that finds it finds every row.
* Reading row ``i`` reads the head, then ``rows`` by byte range from the block holding ``i`` (a bisection of
  the head's first rows): a page reads the one or two blocks it shows; a job reads 1, 2, 4 … up to 16 blocks a
  request, never the whole object at once, and holds no connection between requests.
* Rows are stored before the dataset's record (as files and chunks are): objects no record names, older than a
  grace period, are removed by :meth:`BucketRows.sweep_orphans` (a service killed in between).
* The prefix belongs to one database: ``owner.json`` holds the database's mark (``blob_store``, made on first
  use). Before its first write or sweep, :meth:`BucketRows.claim` writes the mark when the prefix has none and
  refuses (:class:`~evaluator_host.errors.BucketInUse`) a prefix holding another's — so a deployment never writes
  into, nor sweeps as orphans, another deployment's rows (a scratch database pointed at a production bucket
  would otherwise sweep every dataset).
* Every failure of the bucket is :class:`~evaluator_host.errors.StorageUnavailable` (``store/bucket.py``).
  Call from a thread: every method blocks.
"""

from __future__ import annotations

import bisect
import json
import tempfile
import uuid
import zlib
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from evaluator_host.errors import BucketInUse
from evaluator_host.store.bucket import Bucket
from evaluator_host.store.db import BlobStoreRow, DatasetRow
from evaluator_host.store.jobs.dataset_chunks import chunked

__all__ = ["BucketRows"]

_ROWS, _HEAD, _OWNER = "rows", "head.json", "owner.json"
_MOST_BLOCKS = 16  # blocks read in one ranged GET, at most


class BucketRows:
    """Datasets' rows as objects of ``bucket`` (module docstring); ``engine`` names the recorded datasets
    (for the orphans' sweep)."""

    def __init__(self, bucket: Bucket, engine: Engine) -> None:
        self.bucket = bucket
        self.engine = engine
        self._claimed = False

    def claim(self) -> None:
        """Make sure the prefix is this database's (module docstring), once: write the database's mark to
        ``owner.json`` when the prefix has none; :class:`BucketInUse` when it holds another's."""
        if self._claimed:
            return
        doing = "checking that the bucket's prefix is this database's"
        mark = database_mark(self.engine)
        found = self.bucket.get_bytes(_OWNER, doing)
        if found is None:
            self.bucket.put_bytes(_OWNER, json.dumps({"database": mark}).encode(), doing)
            found = self.bucket.get_bytes(_OWNER, doing)  # two deployments at once: the last write wins
        try:
            owner = json.loads(found or b"{}").get("database")
        except (ValueError, AttributeError):
            owner = None
        if owner != mark:
            raise BucketInUse(
                f"the datasets' bucket {self.bucket.url} holds another database's rows (its owner.json names "
                f"{str(owner)[:64]!r}, this database is {mark!r}): nothing was written or swept there; give this "
                "deployment a prefix of its own (EVALUATOR_HOST_BLOB_URL)"
            )
        self._claimed = True

    @property
    def where(self) -> str:
        """Where the rows are, for logs and messages."""
        return self.bucket.url

    @staticmethod
    def _name(dataset_id: str, part: str) -> str:
        return f"datasets/{dataset_id}/{part}"

    def store(self, dataset_id: str, lines: Iterable[bytes], filled: dict[str, int] | None) -> None:
        """Store ``lines`` (JSON lines, each ending with ``\\n``, in row order) with the column fill counts:
        the blocks first (spooled to a scratch file, then uploaded), the head last (replacing what the id had)."""
        doing = "storing the dataset's rows"
        self.claim()
        self.bucket.delete([self._name(dataset_id, _HEAD)], doing)  # a rewrite is incomplete until its head
        blocks: list[list[int]] = []
        count = 0
        with tempfile.SpooledTemporaryFile(max_size=8 << 20) as spool:
            for first, rows, data in chunked(lines):
                blocks.append([first, spool.tell()])
                spool.write(data)
                count = first + rows
            end = spool.tell()
            spool.seek(0)
            self.bucket.put_file(self._name(dataset_id, _ROWS), spool, doing)
        head = {"rows": count, "blocks": blocks, "end": end, "filled": filled}
        self.bucket.put_bytes(self._name(dataset_id, _HEAD), json.dumps(head).encode(), doing)

    def _head(self, dataset_id: str, doing: str) -> dict[str, Any] | None:
        data = self.bucket.get_bytes(self._name(dataset_id, _HEAD), doing)
        if data is None:
            return None
        head = json.loads(data)
        return head if isinstance(head, dict) else None

    def exists(self, dataset_id: str) -> bool:
        """Whether the dataset's rows are all stored here."""
        return self.bucket.exists(self._name(dataset_id, _HEAD), "looking for the dataset's rows")

    def filled(self, dataset_id: str) -> dict[str, int] | None:
        """The column fill counts stored with the dataset (None: unknown, or no such dataset)."""
        head = self._head(dataset_id, "reading the dataset's columns")
        counts = head.get("filled") if head else None
        return counts if isinstance(counts, dict) else None

    def lines(self, dataset_id: str, start: int = 0) -> Iterator[tuple[int, bytes]]:
        """(index, JSON line without newline) for every row from ``start``, in order (module docstring);
        nothing for a dataset that is not stored."""
        doing = "reading the dataset's rows"
        head = self._head(dataset_id, doing)
        if head is None:
            return
        start = max(start, 0)
        blocks: list[list[int]] = head["blocks"]
        if not blocks or start >= head["rows"]:
            return
        at = bisect.bisect_right([first for first, _ in blocks], start) - 1
        batch = 1
        while at < len(blocks):
            upto = min(at + batch, len(blocks))
            begin = blocks[at][1]
            finish = blocks[upto][1] if upto < len(blocks) else head["end"]
            data = self.bucket.get_range(self._name(dataset_id, _ROWS), begin, finish, doing)
            for first, offset in blocks[at:upto]:
                stop = blocks[at + 1][1] if at + 1 < len(blocks) else head["end"]
                lines = zlib.decompress(data[offset - begin : stop - begin]).split(b"\n")
                lines.pop()  # what follows the last newline: nothing
                skip = max(start - first, 0)
                yield from zip(range(first + skip, first + len(lines)), lines[skip:], strict=True)
                at += 1
            batch = min(batch * 2, _MOST_BLOCKS)

    def delete(self, dataset_id: str) -> None:
        """Remove the dataset's objects (none is fine): the head first, so it is never half there."""
        doing = "deleting the dataset's rows"
        self.bucket.delete([self._name(dataset_id, _HEAD)], doing)
        self.bucket.delete([self._name(dataset_id, _ROWS)], doing)

    def sweep_orphans(self, grace: timedelta = timedelta(hours=1)) -> int:
        """Remove the objects of datasets no record names, none of them written in the last ``grace`` (a
        killed service's); the number of datasets whose objects went."""
        doing = "sweeping rows no dataset names"
        self.claim()
        newest: dict[str, datetime] = {}
        for name, modified in self.bucket.listing("datasets/", doing):
            parts = name.split("/")
            if len(parts) == 3:
                newest[parts[1]] = max(modified, newest.get(parts[1], modified))
        old = utcnow() - grace
        candidates = [dataset_id for dataset_id, when in newest.items() if when < old]
        recorded: set[str] = set()
        with self.engine.connect() as conn:
            for at in range(0, len(candidates), 500):
                batch = candidates[at : at + 500]
                recorded.update(conn.execute(select(DatasetRow.id).where(DatasetRow.id.in_(batch))).scalars())
        orphans = [dataset_id for dataset_id in candidates if dataset_id not in recorded]
        for dataset_id in orphans:
            self.delete(dataset_id)
        return len(orphans)


def database_mark(engine: Engine) -> str:
    """The database's mark (``blob_store``, id 1), made on first use."""
    with engine.connect() as conn:
        found = conn.execute(select(BlobStoreRow.mark).where(BlobStoreRow.id == 1)).scalar()
    if found is not None:
        return str(found)
    try:
        with engine.begin() as conn:
            conn.execute(insert(BlobStoreRow).values(id=1, mark=uuid.uuid4().hex))
    except IntegrityError:
        pass  # another service made it meanwhile
    with engine.connect() as conn:
        return str(conn.execute(select(BlobStoreRow.mark).where(BlobStoreRow.id == 1)).scalar_one())


def utcnow() -> datetime:
    """Now, aware (the bucket's times are)."""
    return datetime.now(UTC)


_MOVE_LOCK = 0x0E4A_0054  # pg_advisory_lock key: one service at a time moves chunks into the bucket


def move_chunks_in(rows: BucketRows) -> int:
    """Move the rows a PostgreSQL database holds as chunks (``dataset_chunks``: stored before the bucket was
    set) into the bucket, each dataset's chunks removed only once its head is in the bucket; the number of
    datasets moved. One service at a time (an advisory lock held meanwhile): a second starting beside it waits,
    then finds nothing left. On SQLite there are no chunks: 0."""
    from sqlalchemy import func

    from evaluator_host.store.db import DatasetChunkRow
    from evaluator_host.store.jobs.dataset_chunks import DatasetChunks

    if rows.engine.dialect.name != "postgresql":
        return 0
    chunks = DatasetChunks(rows.engine)
    moved = 0
    with rows.engine.connect() as lock:
        lock.execute(select(func.pg_advisory_lock(_MOVE_LOCK)))
        try:
            with rows.engine.connect() as conn:
                ids = (
                    conn.execute(select(DatasetChunkRow.dataset_id).where(DatasetChunkRow.first_row == -1))
                    .scalars()
                    .all()
                )
            for dataset_id in ids:
                if not rows.exists(dataset_id):
                    lines = (line + b"\n" for _, line in chunks.lines(dataset_id))
                    rows.store(dataset_id, lines, chunks.filled(dataset_id))
                chunks.delete(dataset_id)
                moved += 1
        finally:
            lock.execute(select(func.pg_advisory_unlock(_MOVE_LOCK)))
            lock.commit()
    return moved
