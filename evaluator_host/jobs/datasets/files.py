"""Dataset files: uploads parsed once into JSON lines on disk, then streamed back by row index.

A stored dataset is two files under ``<data_dir>/datasets``:

* ``<id>.jsonl``: one JSON object per line, rows in upload order (row ``i`` is line ``i``);
* ``<id>.idx``: the byte offset of every ``BLOCK``-th row (``array('Q')``), so reading
  from row ``i`` seeks to the block and skips at most ``BLOCK - 1`` lines;
* ``<id>.cols``: how many rows hold a value (not null) in each top-level column (JSON), so a job can say
  which mapped column some rows lack without reading them (:meth:`DatasetFiles.filled`; datasets stored
  before it have none).

When the rows have a shared place (``DatasetFiles(root, rows)``, a :class:`~evaluator_host.store.jobs.row_stores.
RowStore` chosen at start-up: the database when it is PostgreSQL, :mod:`evaluator_host.store.jobs.dataset_chunks`;
an S3-compatible bucket when ``EVALUATOR_HOST_BLOB_URL`` is set, :mod:`evaluator_host.store.jobs.dataset_objects`),
the rows live there instead, so every service sharing it reads every dataset: an upload is still parsed into
``.<id>.tmp`` here (scratch), then stored there whole and the file removed; nothing of the dataset stays in the
folder. A data dir's files from before are moved in by :meth:`DatasetFiles.move_in` (at start-up,
``DatasetCatalog.move_files_in``).

Parsing streams: a JSONL or CSV upload is read line by line and a JSON array element
by element, so memory stays flat however many rows there are. Rows must be JSON
objects (CSV rows become objects of strings, keyed by the header); ``NaN`` and
``Infinity`` are refused because they are not JSON and JavaScript cannot read them.
"""

from __future__ import annotations

import array
import codecs
import csv
import io
import json
import math
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

from evaluator_host.errors import DatasetError
from evaluator_host.store.jobs.row_stores import RowStore

__all__ = ["BLOCK", "DatasetFiles", "DatasetInfo", "Format", "Limits", "sniff_format"]

BLOCK = 1024
Format = Literal["jsonl", "csv", "json"]
_DUMP = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


@dataclass(frozen=True)
class Limits:
    """Bounds on one dataset."""

    max_rows: int
    max_row_bytes: int
    max_columns: int = 10_000


@dataclass(frozen=True)
class DatasetInfo:
    """What parsing found."""

    row_count: int
    columns: list[str]
    bytes: int


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # 1e999: JSON allows the text, but no one can use the value
        raise ValueError(f"{text} is out of the float range")
    return value


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)


def sniff_format(head: bytes) -> Format:
    """Guess the format from the first bytes: ``[`` → JSON array, ``{`` → JSONL, else CSV."""
    text = head.lstrip(codecs.BOM_UTF8).lstrip()
    if text.startswith(b"["):
        return "json"
    if text.startswith(b"{"):
        return "jsonl"
    return "csv"


class _Writer:
    """Appends rows to the ``.jsonl`` file, tracking columns, offsets and limits."""

    def __init__(self, out: BinaryIO, limits: Limits) -> None:
        self.out = out
        self.limits = limits
        self.count = 0
        self.offset = 0
        self.index = array.array("Q")
        self.columns: dict[str, None] = {}
        self.present: Counter[str] = Counter()  # rows that have each column
        self.nulls: Counter[str] = Counter()  # rows whose value of it is null

    def filled(self) -> dict[str, int]:
        """How many rows hold a value (not null) in each column, in column order."""
        return {name: self.present[name] - self.nulls[name] for name in self.columns}

    def add(self, row: Any, where: int, encoded: bytes | None = None) -> None:
        if not isinstance(row, dict):
            raise DatasetError(f"row {self.count + 1} is {type(row).__name__}, not an object", line=where)
        if self.count >= self.limits.max_rows:
            raise DatasetError(f"more than {self.limits.max_rows} rows (max_dataset_rows)", line=where)
        try:
            data = encoded if encoded is not None else _DUMP(row).encode()
        except (ValueError, RecursionError) as exc:
            raise DatasetError(f"row {self.count + 1} is not JSON: {exc}", line=where) from None
        if len(data) > self.limits.max_row_bytes:
            message = f"row {self.count + 1} is {len(data)} bytes; the limit is {self.limits.max_row_bytes}"
            raise DatasetError(message, line=where)
        for key in row:
            if key not in self.columns:
                if len(self.columns) >= self.limits.max_columns:
                    raise DatasetError(f"more than {self.limits.max_columns} distinct columns", line=where)
                self.columns[key] = None
        self.present.update(row.keys())  # C loops: a dict's keys (not the dict: its values would be counts)
        if None in row.values():
            self.nulls.update(key for key, value in row.items() if value is None)
        if not self.count % BLOCK:
            self.index.append(self.offset)
        self.out.write(data)
        self.out.write(b"\n")
        self.offset += len(data) + 1
        self.count += 1


def _bounded_lines(src: BinaryIO, max_bytes: int) -> Iterator[bytes]:
    """The lines of ``src``; a line longer than ``max_bytes`` is an error before it is all in memory."""
    number = 0
    while raw := src.readline(max_bytes + 1):
        number += 1
        if len(raw) > max_bytes and not raw.endswith(b"\n"):
            raise DatasetError(f"line {number} is longer than {max_bytes} bytes (max_row_bytes)", line=number)
        yield raw


def _jsonl(src: BinaryIO, writer: _Writer) -> None:
    slack = 8  # BOM, CR, LF and surrounding blanks around a row of max_row_bytes
    for number, raw in enumerate(_bounded_lines(src, writer.limits.max_row_bytes + slack), 1):
        line = raw.strip()
        if number == 1:
            line = line.removeprefix(codecs.BOM_UTF8)
        if not line:
            continue
        try:
            row = _DECODER.decode(line.decode())
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise DatasetError(f"line {number} is not JSON: {exc}", line=number) from None
        # the line itself is stored when it is a JSON object already (no re-encoding)
        writer.add(row, number, line if b"\n" not in line and b"\r" not in line else None)


def _csv(src: BinaryIO, writer: _Writer) -> None:
    max_bytes = writer.limits.max_row_bytes
    csv.field_size_limit(max(csv.field_size_limit(), max_bytes))  # the module's default is 128 KiB
    text = io.TextIOWrapper(src, encoding="utf-8-sig", newline="")

    def lines() -> Iterator[str]:  # bounded like JSONL: a line without a newline is never read whole
        while line := text.readline(max_bytes + 1):
            if len(line) > max_bytes and not line.endswith(("\n", "\r")):
                raise DatasetError(f"a line is longer than {max_bytes} characters (max_row_bytes)", line=None)
            yield line

    reader = csv.reader(lines())
    try:
        header = next((row for row in reader if row), None)  # blank lines before the header are skipped
        if header is None:
            return
        if len(set(header)) != len(header) or any(not h for h in header):
            raise DatasetError("the CSV header has empty or repeated column names", line=reader.line_num)
        for values in reader:
            if not values:
                continue
            if len(values) != len(header):
                message = f"line {reader.line_num} has {len(values)} fields; the header has {len(header)}"
                raise DatasetError(message, line=reader.line_num)
            writer.add(dict(zip(header, values, strict=True)), reader.line_num)
    except (csv.Error, UnicodeDecodeError) as exc:
        where = reader.line_num or None  # decoding runs ahead of the reader: the line may be unknown
        raise DatasetError(f"line {reader.line_num}: {exc}" if where else str(exc), line=where) from None
    finally:
        text.detach()


def _json_array(src: BinaryIO, max_element: int) -> Iterator[tuple[Any, int]]:
    """Yield (element, 1-based element number) of a top-level JSON array, reading in chunks.

    An element that still does not parse with ``max_element`` characters buffered is an
    error, so a malformed file is never read whole into memory.
    """
    decoder = codecs.getincrementaldecoder("utf-8-sig")()
    buf, pos, eof, chunk = "", 0, False, 1 << 16

    def fill() -> bool:
        nonlocal buf, pos, eof
        data = src.read(chunk)
        eof = not data
        buf = buf[pos:] + decoder.decode(data, final=eof)
        pos = 0
        return not eof

    def skip_ws() -> str:
        nonlocal pos
        while True:
            while pos < len(buf) and buf[pos] in " \t\r\n":
                pos += 1
            if pos < len(buf) or not fill():
                return buf[pos] if pos < len(buf) else ""

    try:
        if skip_ws() != "[":
            raise DatasetError("a JSON dataset must be an array of objects", line=None)
        pos += 1
        number = 0
        if skip_ws() == "]":
            pos += 1
        else:
            while True:
                number += 1
                skip_ws()
                while True:
                    try:
                        value, end = _DECODER.raw_decode(buf, pos)
                    except RecursionError:
                        raise DatasetError(f"element {number} is nested too deeply", line=number) from None
                    except ValueError as exc:
                        if eof or len(buf) - pos > max_element:
                            why = getattr(exc, "msg", str(exc))
                            raise DatasetError(f"element {number} is not JSON: {why}", line=number) from None
                        chunk = min(chunk * 2, 1 << 24)  # an element longer than the buffer
                        fill()
                        continue
                    if end == len(buf) and not eof:  # a number may continue in the next chunk
                        fill()
                        continue
                    break
                pos = end
                yield value, number
                sep = skip_ws()
                pos += 1
                if sep == "]":
                    break
                if sep != ",":
                    raise DatasetError(f"expected ',' or ']' after element {number}", line=number)
        if skip_ws():
            raise DatasetError("unexpected data after the JSON array", line=None)
    except UnicodeDecodeError as exc:
        raise DatasetError(f"the file is not UTF-8: {exc}", line=None) from None


class DatasetFiles:
    """The rows of every dataset: files in ``root``, or in ``rows`` (the database's chunks, a bucket) when
    given (module docstring); ``root`` holds the scratch files of an upload either way."""

    def __init__(self, root: Path, rows: RowStore | None = None) -> None:
        self.root = root
        self.rows = rows
        root.mkdir(parents=True, exist_ok=True, mode=0o700)

    @property
    def chunks(self) -> RowStore | None:
        """The shared place of the rows (its name from when the database's chunks were the only one)."""
        return self.rows

    def exists(self, dataset_id: str) -> bool:
        """Whether the dataset's rows are readable here (a service adopts a job only then)."""
        if self.rows is not None:
            return self.rows.exists(dataset_id)
        return self.rows_path(dataset_id).exists()

    def move_in(self, dataset_id: str) -> bool:
        """Move a dataset's files (stored before its rows went to the database or a bucket) there, then
        remove them; False when there is no shared place to move to, or the files are gone."""
        if self.rows is None:
            return False
        try:
            src = open(self.rows_path(dataset_id), "rb", buffering=1 << 20)  # noqa: SIM115
        except FileNotFoundError:
            return False
        with src:
            if not self.rows.exists(dataset_id):
                self.rows.store(dataset_id, src, self._filled_file(dataset_id))
        for path in (self._index_path(dataset_id), self._filled_path(dataset_id), self.rows_path(dataset_id)):
            path.unlink(missing_ok=True)
        return True

    def rows_path(self, dataset_id: str) -> Path:
        return self.root / f"{dataset_id}.jsonl"

    def _index_path(self, dataset_id: str) -> Path:
        return self.root / f"{dataset_id}.idx"

    def _filled_path(self, dataset_id: str) -> Path:
        return self.root / f"{dataset_id}.cols"

    def filled(self, dataset_id: str) -> dict[str, int] | None:
        """How many of the dataset's rows hold a value (not null) in each top-level column; None for a
        dataset stored before this was counted."""
        if self.rows is not None:
            return self.rows.filled(dataset_id)
        return self._filled_file(dataset_id)

    def _filled_file(self, dataset_id: str) -> dict[str, int] | None:
        try:
            counts = json.loads(self._filled_path(dataset_id).read_bytes())
        except (OSError, ValueError):
            return None
        return counts if isinstance(counts, dict) else None

    def _store(self, dataset_id: str, fill: Any, limits: Limits) -> DatasetInfo:
        tmp = self.root / f".{dataset_id}.tmp"
        try:
            with open(tmp, "wb", buffering=1 << 20) as out:
                writer = _Writer(out, limits)
                fill(writer)
            if self.rows is not None:
                with open(tmp, "rb", buffering=1 << 20) as src:
                    self.rows.store(dataset_id, src, writer.filled())
                return DatasetInfo(row_count=writer.count, columns=list(writer.columns), bytes=writer.offset)
            with open(self._index_path(dataset_id), "wb") as fh:
                writer.index.tofile(fh)
            self._filled_path(dataset_id).write_text(json.dumps(writer.filled()))
            os.replace(tmp, self.rows_path(dataset_id))
        finally:
            tmp.unlink(missing_ok=True)
        return DatasetInfo(row_count=writer.count, columns=list(writer.columns), bytes=writer.offset)

    def write(self, dataset_id: str, src: BinaryIO, fmt: Format, limits: Limits) -> DatasetInfo:
        """Parse ``src`` (``fmt``) into the dataset's files; :class:`DatasetError` names the bad line."""

        def fill(writer: _Writer) -> None:
            if fmt == "jsonl":
                _jsonl(src, writer)
            elif fmt == "csv":
                _csv(src, writer)
            else:
                for value, number in _json_array(src, limits.max_row_bytes + 1024):
                    writer.add(value, number)

        return self._store(dataset_id, fill, limits)

    def write_rows(self, dataset_id: str, rows: Iterable[dict[str, Any]], limits: Limits) -> DatasetInfo:
        """Store rows given as objects (a job's inline rows)."""

        def fill(writer: _Writer) -> None:
            for number, row in enumerate(rows, 1):
                try:
                    writer.add(row, number)
                except ValueError as exc:  # NaN / Infinity
                    raise DatasetError(f"row {number}: {exc}", line=number) from None

        return self._store(dataset_id, fill, limits)

    def lines(self, dataset_id: str, start: int = 0) -> Iterator[tuple[int, bytes]]:
        """(index, JSON line without newline) for every row from ``start``, in order."""
        if self.rows is not None:
            yield from self.rows.lines(dataset_id, start)
            return
        start = max(start, 0)
        index = array.array("Q")
        with open(self._index_path(dataset_id), "rb") as fh:
            index.frombytes(fh.read())
        block = start // BLOCK
        if block >= len(index):
            return
        with open(self.rows_path(dataset_id), "rb", buffering=1 << 20) as fh:
            fh.seek(index[block])
            number = block * BLOCK
            for line in fh:
                if number >= start:
                    yield number, line[:-1]
                number += 1

    def delete(self, dataset_id: str) -> None:
        """Remove the dataset's files or shared rows (missing ones are fine)."""
        if self.rows is not None:
            self.rows.delete(dataset_id)
        self.rows_path(dataset_id).unlink(missing_ok=True)
        self._index_path(dataset_id).unlink(missing_ok=True)
        self._filled_path(dataset_id).unlink(missing_ok=True)
