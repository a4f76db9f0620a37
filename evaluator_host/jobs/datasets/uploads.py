"""Datasets: uploads (raw body or multipart file) and jobs' inline rows → stored datasets.

An upload is streamed to a temporary file first (never held in memory), then parsed in a
thread into the dataset's files (:mod:`evaluator_host.jobs.datasets.files`); only then is the
dataset recorded, so a dataset that exists is always complete. A full disk at any step is
:class:`~evaluator_host.errors.StorageFull` (507) with nothing kept; the temporary files a
killed service left behind (``.upload-*``, ``.*.tmp``, and rows no record names) are removed
when the next one starts (:meth:`DatasetCatalog.sweep`).

On PostgreSQL a dataset's rows are in the database, and with ``EVALUATOR_HOST_BLOB_URL`` in an S3-compatible
bucket (``jobs.datasets.files``, chosen once: ``store.jobs.row_stores.shared_rows``): every service sharing it reads
every dataset, and the folder holds only an upload's scratch files; the files of datasets stored before (and,
with a bucket, the database's chunks) are moved there at start-up (:meth:`DatasetCatalog.move_files_in`). On SQLite the
datasets folder may be shared by several services (one filesystem mounted at each one's
``data_dir/datasets``, so any of them can adopt any job: docs/operations.md, *Job leases*). A dataset
being stored is therefore marked by an exclusive ``flock`` on ``.<id>.lock``, held from its first byte until
its record is stored (or it is refused): a starting service's sweep leaves the files of a dataset whose lock
another live service holds, and the kernel releases a killed service's lock with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

from evaluator_host.errors import (
    BucketInUse,
    ConflictError,
    DatasetError,
    LimitError,
    NotFoundError,
    StorageUnavailable,
)
from evaluator_host.jobs.datasets.files import DatasetFiles, DatasetInfo, Format, Limits, sniff_format
from evaluator_host.jobs.models import Dataset
from evaluator_host.settings import Settings
from evaluator_host.storage import on_full_disk
from evaluator_host.store.db import utcnow
from evaluator_host.store.jobs.repository import DatasetRecord, JobStore
from evaluator_host.store.jobs.row_stores import describe, move_chunks_in, shared_rows
from evaluator_host.tenancy.quotas import QuotaGuard

__all__ = ["DatasetCatalog", "format_of", "to_model"]

log = logging.getLogger(__name__)

_BY_TYPE: dict[str, Format] = {
    "application/jsonl": "jsonl",
    "application/x-jsonl": "jsonl",
    "application/jsonlines": "jsonl",
    "application/x-jsonlines": "jsonl",
    "application/x-ndjson": "jsonl",
    "application/ndjson": "jsonl",
    "text/jsonl": "jsonl",
    "text/csv": "csv",
    "application/csv": "csv",
    "application/json": "json",
}
_BY_SUFFIX: dict[str, Format] = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".json": "json"}


def format_of(explicit: str | None, content_type: str | None, filename: str | None, head: bytes) -> Format:
    """The upload's format: ``?format=``, the file name's suffix, the content type, then a sniff.

    ``application/json`` whose first character is ``{`` is JSON lines (a one-object JSON
    document is a one-row JSONL file, too).
    """
    if explicit:
        if explicit not in ("jsonl", "csv", "json"):
            raise DatasetError(f"unknown format {explicit!r}; use jsonl, csv or json")
        return explicit  # type: ignore[return-value]
    if filename and (by_suffix := _BY_SUFFIX.get(Path(filename).suffix.lower())):
        guessed = by_suffix
    else:
        guessed = _BY_TYPE.get((content_type or "").split(";")[0].strip().lower(), sniff_format(head))
    if guessed == "json" and sniff_format(head) == "jsonl":
        return "jsonl"
    return guessed


def _dataset_of(name: str) -> str:
    """The dataset id a file of the datasets folder belongs to (``.upload-<id>``, ``.<id>.tmp``,
    ``.<id>.lock``, ``<id>.jsonl`` ...)."""
    if name.startswith(".upload-"):
        return name.removeprefix(".upload-")
    return name.lstrip(".").split(".", 1)[0]


def to_model(record: DatasetRecord) -> Dataset:
    """The API shape of a dataset (the record's fields are the model's, plus ``inline``)."""
    fields = dataclasses.asdict(record)
    del fields["workspace_id"]
    return Dataset.model_validate(fields)


class DatasetCatalog:
    """Creates and reads datasets; each belongs to one workspace (another's is not found)."""

    def __init__(self, settings: Settings, store: JobStore, quotas: QuotaGuard) -> None:
        self.settings = settings
        self.store = store
        self.quotas = quotas
        self.files = DatasetFiles(settings.data_dir / "datasets", shared_rows(settings, store.engine))
        self.limits = Limits(max_rows=settings.max_dataset_rows, max_row_bytes=settings.max_row_bytes)

    @property
    def where(self) -> str:
        """Where datasets' rows are kept, in words (the data dir, the database, the bucket's URL)."""
        return describe(self.files.rows)

    def _new_id(self) -> str:
        return f"ds_{uuid.uuid4().hex[:20]}"

    async def _room(self, workspace: str) -> int | None:
        """Bytes ``workspace`` may still store (None: no quota): its datasets and job results count."""
        if self.quotas.dataset_room(workspace, 0) is None:
            return None
        return self.quotas.dataset_room(workspace, await asyncio.to_thread(self.store.storage_bytes, workspace))

    async def _record(
        self, workspace: str, dataset_id: str, name: str, fmt: str, info: DatasetInfo, inline: bool
    ) -> DatasetRecord:
        room = await self._room(workspace)
        if room is not None and info.bytes > room:
            self.files.delete(dataset_id)
            raise self.quotas.over_dataset_bytes(workspace, info.bytes, room)
        record = DatasetRecord(
            id=dataset_id,
            name=name,
            format=fmt,
            row_count=info.row_count,
            columns=info.columns,
            bytes=info.bytes,
            inline=inline,
            created_at=utcnow(),
            workspace_id=workspace,
        )
        try:
            await asyncio.to_thread(self.store.add_dataset, record)
        except BaseException:
            self.files.delete(dataset_id)
            raise
        return record

    async def upload_stream(
        self,
        workspace: str,
        chunks: AsyncIterator[bytes],
        *,
        name: str | None,
        fmt: str | None,
        content_type: str | None,
    ) -> DatasetRecord:
        """Store a raw request body (streamed to a temporary file, then parsed) in ``workspace``; without
        ``name`` it is named for when it came (``upload 2026-11-23 17:01:32 UTC``), a file by its name."""
        dataset_id = self._new_id()
        tmp = self.files.root / f".upload-{dataset_id}"
        size = 0
        room = await self._room(workspace)
        with self._writing(dataset_id, "storing the upload"):
            try:
                with on_full_disk("storing the upload"), open(tmp, "wb", buffering=1 << 20) as out:
                    async for data in chunks:
                        size += len(data)
                        if size > self.settings.max_dataset_bytes:
                            raise LimitError(f"the dataset exceeds max_dataset_bytes={self.settings.max_dataset_bytes}")
                        if room is not None and size > room:
                            raise self.quotas.over_dataset_bytes(workspace, size, room)
                        out.write(data)
                with open(tmp, "rb") as src:
                    default = f"upload {utcnow():%Y-%m-%d %H:%M:%S} UTC"  # no file name: when it came
                    return await self._parse(workspace, dataset_id, src, name or default, fmt, content_type, None)
            finally:
                tmp.unlink(missing_ok=True)

    async def upload_file(
        self,
        workspace: str,
        src: BinaryIO,
        *,
        filename: str | None,
        name: str | None,
        fmt: str | None,
        content_type: str | None,
    ) -> DatasetRecord:
        """Store a multipart file (already spooled by the form parser) in ``workspace``."""
        size = await asyncio.to_thread(lambda: src.seek(0, os.SEEK_END))
        if size > self.settings.max_dataset_bytes:
            raise LimitError(f"the dataset exceeds max_dataset_bytes={self.settings.max_dataset_bytes}")
        room = await self._room(workspace)
        if room is not None and size > room:
            raise self.quotas.over_dataset_bytes(workspace, size, room)
        src.seek(0)
        default = Path(filename).stem if filename else "dataset"
        dataset_id = self._new_id()
        with self._writing(dataset_id, "storing the dataset"):
            return await self._parse(workspace, dataset_id, src, name or default, fmt, content_type, filename)

    async def _parse(
        self,
        workspace: str,
        dataset_id: str,
        src: BinaryIO,
        name: str,
        fmt: str | None,
        content_type: str | None,
        filename: str | None,
    ) -> DatasetRecord:
        if "\x00" in name:  # before the rows are parsed: a database keeps no NUL in text
            raise DatasetError("the dataset's name must not contain NUL characters (U+0000)")
        head = src.read(4096)
        src.seek(0)
        chosen = format_of(fmt, content_type, filename, head)
        with on_full_disk("storing the dataset"):
            info = await asyncio.to_thread(self.files.write, dataset_id, src, chosen, self.limits)
        return await self._record(workspace, dataset_id, name[:200], chosen, info, inline=False)

    async def from_rows(self, workspace: str, rows: Iterable[dict[str, Any]]) -> DatasetRecord:
        """Store a job's inline rows as a dataset of ``workspace`` of their own."""
        dataset_id = self._new_id()
        with self._writing(dataset_id, "storing the job's rows"):
            with on_full_disk("storing the job's rows"):
                info = await asyncio.to_thread(self.files.write_rows, dataset_id, rows, self.limits)
            return await self._record(workspace, dataset_id, "inline rows", "json", info, inline=True)

    def _lock_path(self, dataset_id: str) -> Path:
        return self.files.root / f".{dataset_id}.lock"

    @contextlib.contextmanager
    def _writing(self, dataset_id: str, what: str) -> Iterator[None]:
        """Hold the dataset's write lock (the module docstring) while it is stored; the lock file goes after.
        A full disk is :class:`StorageFull` saying ``what`` was being done."""
        path = self._lock_path(dataset_id)
        with on_full_disk(what):
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            path.unlink(missing_ok=True)
            os.close(fd)

    def _being_written(self, dataset_id: str) -> bool:
        """Whether a live service (this one or another sharing the folder) holds the dataset's write lock."""
        try:
            fd = os.open(self._lock_path(dataset_id), os.O_RDWR)
        except OSError:
            return False  # no lock file: nobody is storing it
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing releases a lock taken here
        return False

    def sweep(self) -> int:
        """Remove what a killed service left in the datasets folder (at start-up, before any upload):
        temporary files, and rows no dataset record names (killed between writing and recording) — but
        never the files of a dataset another live service sharing the folder is storing (its write lock
        is held). Returns how many files went."""
        removed = 0
        for path in self.files.root.iterdir():
            name = path.name
            if self._being_written(_dataset_of(name)):
                continue
            if name.startswith("."):
                orphan = name.startswith(".upload-") or name.endswith((".tmp", ".lock"))
            elif path.suffix in (".jsonl", ".idx", ".cols"):
                try:
                    self.store.get_dataset(path.stem)
                    orphan = False
                except NotFoundError:
                    orphan = True
            else:
                orphan = False
            if orphan:
                path.unlink(missing_ok=True)
                removed += 1
        if self.files.rows is not None:  # rows stored by a service killed before it recorded them
            try:
                removed += self.files.rows.sweep_orphans()
            except BucketInUse:
                raise  # another deployment's prefix: refuse to start
            except StorageUnavailable as exc:  # the bucket away: the next start-up sweeps; uploads answer 503
                log.warning("could not sweep datasets' rows no record names: %s", exc)
        return removed

    def move_files_in(self) -> int:
        """Move the rows of datasets stored as files before (a data dir of an earlier release) into the shared
        place of rows when there is one — the database on PostgreSQL, the bucket of ``EVALUATOR_HOST_BLOB_URL``
        — (at start-up, after the sweep), each under its write lock; with a bucket, the database's chunks too
        (``store.jobs.dataset_objects.move_chunks_in``). The number of datasets moved. Files no record names stay
        for the sweep."""
        if self.files.rows is None:
            return 0
        moved = 0
        moved += move_chunks_in(self.files.rows)
        for path in sorted(self.files.root.glob("*.jsonl")):
            try:
                self.store.get_dataset(path.stem)
            except NotFoundError:
                continue
            with self._writing(path.stem, f"moving the dataset's rows into {self.where}"):
                moved += self.files.move_in(path.stem)
        return moved

    async def discard(self, record: DatasetRecord) -> None:
        """Remove a dataset nothing refers to (inline rows of a job that was refused)."""
        await asyncio.to_thread(self.store.delete_dataset, record.id)
        self.files.delete(record.id)

    async def delete(self, workspace: str, dataset_id: str) -> None:
        """Remove a dataset, its metadata and its files; 404 when unknown, ``ConflictError`` (409) while
        jobs run on it (their results and resumption need its rows: delete those jobs first)."""
        record = await self.get(workspace, dataset_id)
        users = await asyncio.to_thread(self.store.jobs_of_dataset, record.id)
        if users:
            shown = ", ".join(users[:5]) + (f" and {len(users) - 5} more" if len(users) > 5 else "")
            raise ConflictError(
                f"dataset {record.id!r} is used by {len(users)} job(s) ({shown}); delete them first "
                "(DELETE /v1/jobs/{id})"
            )
        await self.discard(record)

    async def get(self, workspace: str, dataset_id: str) -> DatasetRecord:
        """One dataset of ``workspace`` (404 when unknown or another workspace's)."""
        return await asyncio.to_thread(self.store.get_dataset, dataset_id, workspace)

    async def rows(self, workspace: str, dataset_id: str, offset: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        """At most ``limit`` rows from index ``offset``, as ``(index, row)`` (404 when the dataset is unknown
        or another workspace's)."""
        await self.get(workspace, dataset_id)

        def read() -> list[tuple[int, dict[str, Any]]]:
            found: list[tuple[int, dict[str, Any]]] = []
            for index, line in self.files.lines(dataset_id, offset):
                if len(found) >= limit:
                    break
                found.append((index, json.loads(line)))
            return found

        return await asyncio.to_thread(read)

    async def list_all(
        self, workspace: str, *, limit: int | None = None, before: tuple[datetime, str] | None = None
    ) -> list[DatasetRecord]:
        """Uploaded datasets of ``workspace``, newest first (ties: greater id first): every one, or at most
        ``limit`` after ``before`` (a ``(created_at, id)``) in that order, read a page at a time."""
        return await asyncio.to_thread(self.store.list_datasets, workspace, limit=limit, before=before)
