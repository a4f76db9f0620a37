"""Where datasets' rows live besides a data dir: one small interface, chosen once at start-up (issue 54).

:class:`RowStore` is what ``jobs/datasets/files.py DatasetFiles`` needs of a place that holds datasets' rows
for every service: store a dataset's JSON lines whole, say whether they are all there, read them from a row on,
delete them, sweep what a killed service left. Three places implement it:

* the data dir (the default on SQLite): ``DatasetFiles``' own ``.jsonl`` + block index + fill counts, renamed
  into place from the parse's scratch file (no copy; :func:`shared_rows` answers None for it);
* the database when it is PostgreSQL: :class:`~evaluator_host.store.jobs.dataset_chunks.DatasetChunks`;
* an S3-compatible bucket when ``EVALUATOR_HOST_BLOB_URL`` is set (whatever the database):
  :class:`~evaluator_host.store.jobs.dataset_objects.BucketRows`.

:func:`shared_rows` chooses once, from the settings and the database, when the service assembles itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Protocol

from sqlalchemy.engine import Engine

from evaluator_host.settings import Settings
from evaluator_host.store.jobs.dataset_chunks import DatasetChunks

__all__ = ["RowStore", "describe", "move_chunks_in", "shared_rows"]


class RowStore(Protocol):
    """Datasets' rows in a place every service sharing the database reads (module docstring). Every method
    blocks (call from a thread); a dataset's rows are all there or none is."""

    def store(self, dataset_id: str, lines: Iterable[bytes], filled: dict[str, int] | None) -> None:
        """Store ``lines`` (JSON lines, each ending with ``\\n``, in row order) and the column fill counts,
        replacing what the id had."""

    def exists(self, dataset_id: str) -> bool:
        """Whether the dataset's rows are all stored."""

    def filled(self, dataset_id: str) -> dict[str, int] | None:
        """The column fill counts stored with the dataset (None: unknown or none)."""

    def lines(self, dataset_id: str, start: int = 0) -> Iterator[tuple[int, bytes]]:
        """(index, JSON line without newline) for every row from ``start``, in order."""

    def delete(self, dataset_id: str) -> None:
        """Remove the dataset's rows (none is fine)."""

    def sweep_orphans(self, grace: timedelta = ...) -> int:
        """Remove rows no dataset record names, stored more than ``grace`` ago; how many datasets' went."""


def shared_rows(settings: Settings, engine: Engine) -> RowStore | None:
    """The place of datasets' rows for this service: the bucket of ``blob_url`` when set, else the database when
    it is PostgreSQL, else None (the data dir)."""
    if settings.blob_url:
        from evaluator_host.store.bucket import Bucket
        from evaluator_host.store.jobs.dataset_objects import BucketRows

        return BucketRows(Bucket.from_settings(settings), engine)
    if engine.dialect.name == "postgresql":
        return DatasetChunks(engine)
    return None


def describe(rows: RowStore | None) -> str:
    """Where ``rows`` keeps datasets' rows, in words (logs, ``evaluator-host`` messages)."""
    if rows is None:
        return "the data dir"
    if isinstance(rows, DatasetChunks):
        return "the database"
    return str(getattr(rows, "where", type(rows).__name__))


def move_chunks_in(rows: RowStore | None) -> int:
    """With a bucket on PostgreSQL: move the rows the database holds as chunks (stored before the bucket was
    set) into the bucket (``store.jobs.dataset_objects.move_chunks_in``); else 0."""
    if rows is None or isinstance(rows, DatasetChunks):
        return 0
    from evaluator_host.store.jobs.dataset_objects import BucketRows, move_chunks_in

    return move_chunks_in(rows) if isinstance(rows, BucketRows) else 0
