"""Datasets' rows in the database (issue 54): ``dataset_chunks``, used when the database is PostgreSQL.

Contract:

* A dataset's rows are stored as **chunks**: consecutive rows (at most :data:`CHUNK_ROWS` of them, and no
  more than :data:`CHUNK_BYTES` of JSON lines unless one row alone is bigger), each chunk one table row
  ``(dataset_id, first_row, row_count, data)`` whose ``data`` is the rows' JSON lines (each ending with a
  newline) compressed with zlib. Row ``i`` is in the chunk with the greatest ``first_row <= i`` (the
  primary key's index finds it), so reading row ``i`` or a page of rows from it reads one chunk, two when
  the page crosses a boundary — never the rows before it.
* Each dataset also has a **header** chunk at ``first_row = -1`` whose ``data`` is the column fill counts
  (compressed JSON, ``null`` when unknown): it marks that the dataset's rows are all stored
  (:meth:`DatasetChunks.exists`). Every chunk of a dataset, header included, is inserted in **one
  transaction**: a dataset's chunks are all there or none is.
* Chunks are written before the dataset's record (``datasets``), as its files were: a service killed between
  the two leaves chunks no record names; :meth:`DatasetChunks.sweep_orphans` removes those stored more than
  a grace period ago (a dataset being recorded right now is younger than that).
* Reading holds no connection between the chunks it yields (a job reads its rows over minutes): each batch
  of chunks is one short query.
* Call from a thread: every method blocks.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any

from sqlalchemy import and_, delete, exists, func, insert, select
from sqlalchemy.engine import Connection, Engine

from evaluator_host.store.db import DatasetChunkRow, DatasetRow, utcnow

__all__ = ["CHUNK_BYTES", "CHUNK_ROWS", "DatasetChunks", "chunked"]

CHUNK_ROWS = 1024
CHUNK_BYTES = 4 << 20  # uncompressed JSON lines per chunk (a bigger single row is a chunk of its own)
_LEVEL = 1  # zlib: fast; JSON lines still shrink 3-6x
_INSERT_AT_ONCE = 16  # chunks per INSERT (executemany): at most 64 MiB of uncompressed rows in flight
_HEADER = -1


class DatasetChunks:
    """Datasets' rows as compressed chunks in ``engine``'s ``dataset_chunks`` table (module docstring)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def store(self, dataset_id: str, lines: Iterable[bytes], filled: dict[str, int] | None) -> None:
        """Store ``lines`` (JSON lines, each ending with ``\\n``, in row order) as the dataset's chunks, with
        its column fill counts, all in one transaction (replacing any the id had)."""
        now = utcnow()
        with self.engine.begin() as conn:
            conn.execute(delete(DatasetChunkRow).where(DatasetChunkRow.dataset_id == dataset_id))  # a rewrite
            batch: list[dict[str, Any]] = []
            for first, count, data in chunked(lines):
                batch.append({"dataset_id": dataset_id, "first_row": first, "row_count": count, "data": data})
                if len(batch) >= _INSERT_AT_ONCE:
                    _insert(conn, batch, now)
                    batch = []
            header = zlib.compress(json.dumps(filled).encode(), _LEVEL)
            batch.append({"dataset_id": dataset_id, "first_row": _HEADER, "row_count": 0, "data": header})
            _insert(conn, batch, now)

    def exists(self, dataset_id: str) -> bool:
        """Whether the dataset's rows are stored here."""
        with self.engine.connect() as conn:
            found = conn.execute(
                select(DatasetChunkRow.row_count).where(
                    DatasetChunkRow.dataset_id == dataset_id, DatasetChunkRow.first_row == _HEADER
                )
            ).first()
        return found is not None

    def filled(self, dataset_id: str) -> dict[str, int] | None:
        """The column fill counts stored with the dataset (None: unknown, or no such dataset)."""
        with self.engine.connect() as conn:
            data = conn.execute(
                select(DatasetChunkRow.data).where(
                    DatasetChunkRow.dataset_id == dataset_id, DatasetChunkRow.first_row == _HEADER
                )
            ).scalar()
        if data is None:
            return None
        counts = json.loads(zlib.decompress(data))
        return counts if isinstance(counts, dict) else None

    def lines(self, dataset_id: str, start: int = 0) -> Iterator[tuple[int, bytes]]:
        """(index, JSON line without newline) for every row from ``start``, in order; one short query per
        batch of chunks (the first batch is the one chunk holding ``start``: a page reads what it shows)."""
        start = max(start, 0)
        holding = (  # the chunk row ``start`` is in: the greatest first row not after it
            select(func.max(DatasetChunkRow.first_row))
            .where(
                DatasetChunkRow.dataset_id == dataset_id,
                DatasetChunkRow.first_row >= 0,
                DatasetChunkRow.first_row <= start,
            )
            .scalar_subquery()
        )
        begin: Any = holding
        batch = 1
        while True:
            with self.engine.connect() as conn:
                chunks = conn.execute(
                    select(DatasetChunkRow.first_row, DatasetChunkRow.data)
                    .where(DatasetChunkRow.dataset_id == dataset_id, DatasetChunkRow.first_row >= begin)
                    .order_by(DatasetChunkRow.first_row)
                    .limit(batch)
                ).all()
            for first, data in chunks:
                lines = zlib.decompress(data).split(b"\n")
                lines.pop()  # what follows the last newline: nothing
                skip = max(start - first, 0)
                yield from zip(range(first + skip, first + len(lines)), lines[skip:], strict=True)
            if len(chunks) < batch:
                return
            begin = chunks[-1][0] + 1
            batch = min(batch * 2, 16)

    def delete(self, dataset_id: str) -> None:
        """Remove the dataset's chunks (none is fine)."""
        with self.engine.begin() as conn:
            conn.execute(delete(DatasetChunkRow).where(DatasetChunkRow.dataset_id == dataset_id))

    def sweep_orphans(self, grace: timedelta = timedelta(hours=1)) -> int:
        """Remove the chunks of datasets no record names, stored more than ``grace`` ago (a killed service's);
        the number of datasets whose chunks went."""
        recorded = exists().where(DatasetRow.id == DatasetChunkRow.dataset_id)
        with self.engine.begin() as conn:
            orphans = (
                conn.execute(
                    select(DatasetChunkRow.dataset_id).where(
                        and_(
                            DatasetChunkRow.first_row == _HEADER,
                            DatasetChunkRow.stored_at < utcnow() - grace,
                            ~recorded,
                        )
                    )
                )
                .scalars()
                .all()
            )
            if orphans:
                conn.execute(delete(DatasetChunkRow).where(DatasetChunkRow.dataset_id.in_(orphans)))
        return len(orphans)


def _insert(conn: Connection, batch: list[dict[str, Any]], now: Any) -> None:
    conn.execute(insert(DatasetChunkRow), [{**row, "stored_at": now} for row in batch])


def chunked(lines: Iterable[bytes]) -> Iterator[tuple[int, int, bytes]]:
    """(first row, row count, compressed data) of consecutive chunks of ``lines``: at most :data:`CHUNK_ROWS` rows
    and :data:`CHUNK_BYTES` of lines each (a bigger single row a chunk of its own), zlib at level 1. The one cut
    of datasets' rows, for the database's chunks and a bucket's blocks alike."""
    parts: list[bytes] = []
    size = first = number = 0
    for line in lines:
        if parts and (len(parts) >= CHUNK_ROWS or size + len(line) > CHUNK_BYTES):
            yield first, len(parts), zlib.compress(b"".join(parts), _LEVEL)
            parts, size, first = [], 0, number
        parts.append(line)
        size += len(line)
        number += 1
    if parts:
        yield first, len(parts), zlib.compress(b"".join(parts), _LEVEL)
