"""evaluator_host.jobs.datasets.files and catalog.format_of: uploads parsed into JSON lines plus a row index.

Covers the three upload formats (JSONL, CSV, JSON array, including a JSON array read across
the 64 KiB chunk boundary and through short reads), ``Limits``, the column union, reading back
from any row with ``lines`` (block index boundaries), ``write_rows`` for inline rows, that a
failed write leaves nothing behind, ``delete``, ``sniff_format`` and ``format_of``.
"""

from __future__ import annotations

import codecs
import io
import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from evaluator_host.errors import DatasetError
from evaluator_host.jobs.datasets.files import BLOCK, DatasetFiles, DatasetInfo, Format, Limits, sniff_format
from evaluator_host.jobs.datasets.uploads import format_of

LIMITS = Limits(max_rows=1_000_000, max_row_bytes=1 << 20)
CHUNK = 1 << 16  # the JSON array reader's first read size
BOM = codecs.BOM_UTF8


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def files(tmp_path: Path) -> DatasetFiles:
    return DatasetFiles(tmp_path / "datasets")


def compact(row: dict[str, Any]) -> bytes:
    return json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode()


def write(
    files: DatasetFiles, body: bytes, fmt: Format, limits: Limits = LIMITS, dataset_id: str = "ds"
) -> DatasetInfo:
    return files.write(dataset_id, io.BytesIO(body), fmt, limits)


def read_rows(files: DatasetFiles, dataset_id: str = "ds", start: int = 0) -> list[dict[str, Any]]:
    return [json.loads(line) for _, line in files.lines(dataset_id, start)]


def encode(fmt: Format, rows: Sequence[dict[str, Any]]) -> bytes:
    """``rows`` as an upload body in ``fmt`` (CSV rows must share their keys, values strings)."""
    if fmt == "jsonl":
        return b"".join(compact(row) + b"\n" for row in rows)
    if fmt == "json":
        return json.dumps(list(rows), ensure_ascii=False).encode()
    out = io.StringIO()
    header = list(rows[0])
    out.write(",".join(header) + "\n")
    for row in rows:
        out.write(",".join(row[h] for h in header) + "\n")
    return out.getvalue().encode()


def leftovers(files: DatasetFiles) -> list[str]:
    return sorted(p.name for p in files.root.iterdir())


class Counting(io.BytesIO):
    """A BytesIO that counts the bytes handed out by ``read``."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.consumed = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.consumed += len(data)
        return data


class ShortReads(io.BufferedIOBase):
    """A stream whose ``read`` returns fewer bytes than asked (cycling through ``sizes``), like a pipe."""

    def __init__(self, data: bytes, sizes: Sequence[int]) -> None:
        super().__init__()
        self.data = data
        self.pos = 0
        self.sizes = sizes
        self.calls = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        step = self.sizes[self.calls % len(self.sizes)]
        self.calls += 1
        if size is not None and size >= 0:
            step = min(step, size)
        data = self.data[self.pos : self.pos + step]
        self.pos += len(data)
        return data


# --------------------------------------------------------------------------- JSONL


def test_jsonl_rows_in_order(files: DatasetFiles) -> None:
    rows = [{"a": 1, "b": "x"}, {"a": 2, "nested": {"k": [1, 2, None, True]}}, {"é": "漢字 😀"}]
    info = write(files, encode("jsonl", rows), "jsonl")
    assert info.row_count == 3
    assert read_rows(files) == rows
    assert [idx for idx, _ in files.lines("ds")] == [0, 1, 2]


def test_jsonl_blank_lines_skipped_and_numbering_is_physical(files: DatasetFiles) -> None:
    body = b'\n{"a":1}\n\n   \n\t\n{"a":2}\n\n'
    assert write(files, body, "jsonl").row_count == 2
    assert read_rows(files) == [{"a": 1}, {"a": 2}]
    with pytest.raises(DatasetError) as err:
        write(files, b'{"a":1}\n\n\nnot json\n', "jsonl", dataset_id="bad")
    assert err.value.line == 4
    assert "line 4" in err.value.message


@pytest.mark.parametrize(
    "body",
    [
        BOM + b'{"a":1}\n{"a":2}\n',
        BOM + b'{"a":1}\r\n{"a":2}\r\n',
        b'{"a":1}\r\n{"a":2}',  # no final newline
        b'{"a":1}\r\n\r\n{"a":2}\r\n\r\n',
        b'  {"a": 1}  \n\t{"a" : 2}\t\n',
    ],
    ids=["bom", "bom-crlf", "crlf-no-final-newline", "crlf-blank-lines", "surrounding-whitespace"],
)
def test_jsonl_bom_crlf_whitespace(files: DatasetFiles, body: bytes) -> None:
    info = write(files, body, "jsonl")
    assert info.row_count == 2
    assert info.columns == ["a"]
    lines = [line for _, line in files.lines("ds")]
    assert [json.loads(line) for line in lines] == [{"a": 1}, {"a": 2}]
    for line in lines:
        assert b"\r" not in line and b"\n" not in line
        assert not line.startswith(BOM)


def test_jsonl_empty_file(files: DatasetFiles) -> None:
    for body in (b"", b"\n\n", BOM, b"\r\n  \r\n"):
        info = write(files, body, "jsonl")
        assert (info.row_count, info.columns, info.bytes) == (0, [], 0)
        assert list(files.lines("ds")) == []


@pytest.mark.parametrize(
    ("body", "line"),
    [
        (b"not json\n", 1),
        (b'{"a":1}\n{"a":\n', 2),
        (b'{"a":1}\n{"a":1}{"b":2}\n', 2),  # two objects on one line
        (b'{"a":1}\n{"a":1} trailing\n', 2),
        (b"{'a': 1}\n", 1),
        (b'{"a":1}\n\n{"a": "\xff\xfe"}\n', 3),  # not UTF-8
    ],
)
def test_jsonl_line_not_json(files: DatasetFiles, body: bytes, line: int) -> None:
    with pytest.raises(DatasetError) as err:
        write(files, body, "jsonl")
    assert err.value.line == line
    assert f"line {line}" in err.value.message


@pytest.mark.parametrize("value", [b"[1, 2]", b"1", b'"text"', b"null", b"true", b"[]"])
def test_jsonl_non_object_line(files: DatasetFiles, value: bytes) -> None:
    with pytest.raises(DatasetError) as err:
        write(files, b'{"a":1}\n\n' + value + b"\n", "jsonl")
    assert err.value.line == 3
    assert "not an object" in err.value.message


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
def test_jsonl_nan_and_infinity_refused(files: DatasetFiles, constant: bytes) -> None:
    with pytest.raises(DatasetError) as err:
        write(files, b'{"a":1}\n{"a":' + constant + b"}\n", "jsonl")
    assert err.value.line == 2
    assert constant.decode().lstrip("-") in err.value.message


# --------------------------------------------------------------------------- CSV


def test_csv_header_and_rows(files: DatasetFiles) -> None:
    info = write(files, b"question,answer\nwhat?,yes\nwhy?,no\n", "csv")
    assert info.row_count == 2
    assert info.columns == ["question", "answer"]
    assert read_rows(files) == [{"question": "what?", "answer": "yes"}, {"question": "why?", "answer": "no"}]


def test_csv_quoting(files: DatasetFiles) -> None:
    body = b'id,text,other\n1,"hello, world",x\n2,"she said ""hi""",y\n3,"line one\nline two",z\n4,"a,\n""b"",\nc",w\n'
    assert write(files, body, "csv").row_count == 4
    assert read_rows(files) == [
        {"id": "1", "text": "hello, world", "other": "x"},
        {"id": "2", "text": 'she said "hi"', "other": "y"},
        {"id": "3", "text": "line one\nline two", "other": "z"},
        {"id": "4", "text": 'a,\n"b",\nc', "other": "w"},
    ]


def test_csv_crlf_and_embedded_crlf(files: DatasetFiles) -> None:
    body = b'a,b\r\n1,"x\r\ny"\r\n2,3\r\n'
    assert write(files, body, "csv").row_count == 2
    assert read_rows(files) == [{"a": "1", "b": "x\r\ny"}, {"a": "2", "b": "3"}]


def test_csv_bom_is_not_part_of_the_first_column(files: DatasetFiles) -> None:
    info = write(files, BOM + b"a,b\r\n1,2\r\n", "csv")
    assert info.columns == ["a", "b"]
    assert read_rows(files) == [{"a": "1", "b": "2"}]


def test_csv_no_final_newline_and_blank_lines(files: DatasetFiles) -> None:
    assert write(files, b"a,b\n\n1,2\n\n\n3,4", "csv").row_count == 2
    assert read_rows(files) == [{"a": "1", "b": "2"}, {"a": "3", "b": "4"}]


def test_csv_values_stay_strings(files: DatasetFiles) -> None:
    write(files, b'n,f,b,z,e,q\n1,1.5,true,null,,""\n', "csv")
    assert read_rows(files) == [{"n": "1", "f": "1.5", "b": "true", "z": "null", "e": "", "q": ""}]


def test_csv_unicode(files: DatasetFiles) -> None:
    write(files, "名前,text\n漢字,😀 é\n".encode(), "csv")
    assert read_rows(files) == [{"名前": "漢字", "text": "😀 é"}]


@pytest.mark.parametrize(
    ("body", "line", "fields"),
    [
        (b"a,b\n1,2\n1,2,3\n", 3, 3),
        (b"a,b\n1,2\n\n1\n", 4, 1),
        (b'a,b\n"x\ny",1\n"p\nq\nr",2\n1,2,3\n', 7, 3),  # physical line, after multi-line records
        (b"a,b\r\n1,2\r\n1,2,3\r\n", 3, 3),
    ],
)
def test_csv_field_count_mismatch_names_the_line(files: DatasetFiles, body: bytes, line: int, fields: int) -> None:
    with pytest.raises(DatasetError) as err:
        write(files, body, "csv")
    assert err.value.line == line
    assert f"line {line}" in err.value.message
    assert f"{fields} fields" in err.value.message
    assert leftovers(files) == []


@pytest.mark.parametrize("header", [b"a,a", b"a,b,a", b"a,,b", b"a,b,", b",a"])
def test_csv_duplicate_or_empty_header_names(files: DatasetFiles, header: bytes) -> None:
    with pytest.raises(DatasetError) as err:
        write(files, header + b"\n1,2,3\n", "csv")
    assert err.value.line == 1
    assert "header" in err.value.message


def test_csv_empty_file(files: DatasetFiles) -> None:
    for body in (b"", BOM):
        info = write(files, body, "csv")
        assert (info.row_count, info.columns, info.bytes) == (0, [], 0)
        assert list(files.lines("ds")) == []


def test_csv_header_only(files: DatasetFiles) -> None:
    assert write(files, b"a,b\n", "csv").row_count == 0
    assert list(files.lines("ds")) == []


def test_csv_not_utf8(files: DatasetFiles) -> None:
    with pytest.raises(DatasetError):
        write(files, b"a,b\n1,\xff\xfe\n", "csv")
    assert leftovers(files) == []


# --------------------------------------------------------------------------- JSON array


def test_json_pretty_printed_and_nested(files: DatasetFiles) -> None:
    rows = [
        {"a": 1, "nested": {"deep": {"list": [1, [2, [3]], {"x": None}]}}},
        {"b": "text with ] and } and , inside", "c": [True, False, None, -1.5e-3]},
        {"unicode": "é漢😀", "escaped": '\u2028\n\t"\\'},
    ]
    body = json.dumps(rows, indent=4, ensure_ascii=False).encode()
    info = write(files, body, "json")
    assert info.row_count == 3
    assert read_rows(files) == rows


@pytest.mark.parametrize("body", [b"[]", b"  [ ]  ", b"\n[\n\n]\n", BOM + b"[]", b"[]\n\n"])
def test_json_empty_array(files: DatasetFiles, body: bytes) -> None:
    info = write(files, body, "json")
    assert (info.row_count, info.columns, info.bytes) == (0, [], 0)
    assert list(files.lines("ds")) == []


def test_json_bom_and_whitespace(files: DatasetFiles) -> None:
    write(files, BOM + b' \r\n\t[ {"a":1} ,\r\n {"a":2}\t]\r\n ', "json")
    assert read_rows(files) == [{"a": 1}, {"a": 2}]


@pytest.mark.parametrize(
    ("body", "line"),
    [
        (b'[{"a":1},]', 2),  # trailing comma
        (b'[{"a":1},\n  ]', 2),
        (b"[,]", 1),
        (b'[{"a":1},,{"a":2}]', 2),
        (b'[{"a":1} {"a":2}]', 1),  # missing comma
        (b'[{"a":1};{"a":2}]', 1),
        (b'[{"a":1}', 1),  # unterminated
        (b'[{"a":1},', 2),
        (b"[", 1),
        (b'[{"a":1}, {"a":', 2),
        (b'[{"a":1}, {"a":NaN}]', 2),
        (b'[{"a":Infinity}]', 1),
        (b'[{"a":-Infinity}]', 1),
    ],
)
def test_json_malformed_names_the_element(files: DatasetFiles, body: bytes, line: int) -> None:
    with pytest.raises(DatasetError) as err:
        write(files, body, "json")
    assert err.value.line == line
    assert str(line) in err.value.message
    assert leftovers(files) == []


@pytest.mark.parametrize(
    "body",
    [b'[{"a":1}] x', b'[{"a":1}][]', b'[{"a":1}]{"b":2}', b"[]]", b'[{"a":1}]\n\n,', b"[] []"],
)
def test_json_trailing_garbage(files: DatasetFiles, body: bytes) -> None:
    with pytest.raises(DatasetError) as err:
        write(files, body, "json")
    assert "after the JSON array" in err.value.message
    assert leftovers(files) == []


@pytest.mark.parametrize("body", [b"", b"   ", b'{"a":1}', b'"x"', b"1", b"null", BOM])
def test_json_not_an_array(files: DatasetFiles, body: bytes) -> None:
    with pytest.raises(DatasetError) as err:
        write(files, body, "json")
    assert "array" in err.value.message


@pytest.mark.parametrize(("element", "kind"), [(b"1", "int"), (b'"s"', "str"), (b"null", "NoneType"), (b"[1]", "list")])
def test_json_non_object_element(files: DatasetFiles, element: bytes, kind: str) -> None:
    with pytest.raises(DatasetError) as err:
        write(files, b'[{"a":1}, ' + element + b"]", "json")
    assert err.value.line == 2
    assert kind in err.value.message
    assert "not an object" in err.value.message


def test_json_not_utf8(files: DatasetFiles) -> None:
    with pytest.raises(DatasetError) as err:
        write(files, b'[{"a":"\xff"}]', "json")
    assert "UTF-8" in err.value.message
    assert leftovers(files) == []


def big_rows(count: int) -> list[dict[str, Any]]:
    return [
        {
            "i": i,
            "text": "é漢😀" * (i % 7) + "x" * (i % 53),
            "n": i * 1.25 - 1000,
            "nested": {"list": [i, None, True, {"deep": "]},[{"}], "s": "a,b" * (i % 5)},
        }
        for i in range(count)
    ]


@pytest.mark.parametrize("indent", [None, 2], ids=["compact", "pretty"])
def test_json_large_array_across_chunks(files: DatasetFiles, indent: int | None) -> None:
    rows = big_rows(2500)
    body = json.dumps(rows, ensure_ascii=False, indent=indent).encode()
    assert len(body) > 3 * CHUNK + 10_000  # several chunk boundaries, the chunk size doubling on the way
    info = write(files, body, "json")
    assert info.row_count == len(rows)
    assert info.columns == ["i", "text", "n", "nested"]
    assert read_rows(files) == rows


ELEMENT = compact({"k": "é😀漢", "n": 123456789, "f": -0.5e-7, "t": True, "z": None, "l": [1, "]"]})
PERIOD = len(ELEMENT) + 1  # element plus ","


@pytest.mark.parametrize("offset", range(PERIOD))
def test_json_element_split_at_every_byte_of_the_chunk_boundary(files: DatasetFiles, offset: int) -> None:
    # element k starts at 1 + pad + k * PERIOD; pick pad so that one starts at CHUNK - offset, i.e. the
    # first 64 KiB read ends ``offset`` bytes into it (offset == len(ELEMENT): just before its comma)
    pad = (CHUNK - 1 - offset) % PERIOD
    assert (CHUNK - offset - 1 - pad) % PERIOD == 0
    count = CHUNK // PERIOD + 3
    body = b"[" + b" " * pad + b",".join([ELEMENT] * count) + b"]"
    info = write(files, body, "json")
    assert info.row_count == count
    expected = json.loads(ELEMENT)
    assert all(row == expected for row in read_rows(files))


@pytest.mark.parametrize("sizes", [[1], [2], [3, 1, 4, 1, 5, 9, 2, 6], [7, 64, 13]])
def test_json_short_reads(files: DatasetFiles, sizes: list[int]) -> None:
    rows = big_rows(40)
    body = BOM + json.dumps(rows, ensure_ascii=False, indent=1).encode()
    info = files.write("ds", ShortReads(body, sizes), "json", LIMITS)  # type: ignore[arg-type]
    assert info.row_count == 40
    assert read_rows(files) == rows


@pytest.mark.parametrize("element", [b"12.5", b"-123456", b"1e5", b"true", b"null", b'"text"', b"[1, 2]"])
def test_json_scalar_split_across_reads_is_still_refused(files: DatasetFiles, element: bytes) -> None:
    with pytest.raises(DatasetError) as err:
        files.write("ds", ShortReads(b'[{"a":1},' + element + b"]", [1]), "json", LIMITS)  # type: ignore[arg-type]
    assert err.value.line == 2
    assert leftovers(files) == []


def test_json_element_longer_than_the_first_chunk(files: DatasetFiles) -> None:
    big = {"big": "y" * (5 * CHUNK), "more": list(range(1000))}
    rows = [{"a": 1}, big, {"a": 2}]
    info = write(files, json.dumps(rows).encode(), "json", Limits(max_rows=10, max_row_bytes=1 << 20))
    assert info.row_count == 3
    assert read_rows(files) == rows


def test_json_element_over_max_row_bytes(files: DatasetFiles) -> None:
    limits = Limits(max_rows=10, max_row_bytes=100)
    with pytest.raises(DatasetError) as err:
        write(files, json.dumps([{"a": 1}, {"a": "x" * 200}]).encode(), "json", limits)
    assert err.value.line == 2
    assert "limit is 100" in err.value.message


def test_json_huge_element_errors_without_reading_the_whole_file(files: DatasetFiles) -> None:
    body = b'[{"a":1}, {"big":"' + b"x" * 8_000_000 + b'"}, {"a":2}]'
    src = Counting(body)
    with pytest.raises(DatasetError) as err:
        files.write("ds", src, "json", Limits(max_rows=10, max_row_bytes=1000))
    assert err.value.line == 2
    assert src.consumed <= 4 * CHUNK
    assert leftovers(files) == []


def test_json_huge_unterminated_element_errors_early(files: DatasetFiles) -> None:
    src = Counting(b"[" + b"[" * 10 + b"1," * 4_000_000)
    with pytest.raises(DatasetError):
        files.write("ds", src, "json", Limits(max_rows=10, max_row_bytes=1000))
    assert src.consumed <= 4 * CHUNK


# --------------------------------------------------------------------------- limits and columns


FORMATS: list[Format] = ["jsonl", "csv", "json"]
HEADER_LINES = {"jsonl": 0, "csv": 1, "json": 0}  # the line of row i is i + 1 + this


@pytest.mark.parametrize("fmt", FORMATS)
def test_max_rows(files: DatasetFiles, fmt: Format) -> None:
    rows = [{"v": str(i)} for i in range(4)]
    limits = Limits(max_rows=4, max_row_bytes=1000)
    assert write(files, encode(fmt, rows), fmt, limits).row_count == 4
    with pytest.raises(DatasetError) as err:
        write(files, encode(fmt, [*rows, {"v": "4"}]), fmt, limits, dataset_id="over")
    assert err.value.line == 5 + HEADER_LINES[fmt]
    assert "more than 4 rows" in err.value.message
    assert files.rows_path("over").exists() is False


@pytest.mark.parametrize("fmt", FORMATS)
def test_max_row_bytes(files: DatasetFiles, fmt: Format) -> None:
    row = {"text": "é" * 20 + "x" * 30}
    size = len(compact(row))  # bytes, not characters
    rows = [{"text": "a"}, row]
    assert write(files, encode(fmt, rows), fmt, Limits(max_rows=10, max_row_bytes=size)).row_count == 2
    with pytest.raises(DatasetError) as err:
        write(files, encode(fmt, rows), fmt, Limits(max_rows=10, max_row_bytes=size - 1), dataset_id="over")
    assert err.value.line == 2 + HEADER_LINES[fmt]
    assert f"{size} bytes" in err.value.message


def test_max_row_bytes_write_rows(files: DatasetFiles) -> None:
    row = {"text": "x" * 50}
    size = len(compact(row))
    assert files.write_rows("ok", [row], Limits(max_rows=10, max_row_bytes=size)).row_count == 1
    with pytest.raises(DatasetError) as err:
        files.write_rows("over", [{"a": 1}, row], Limits(max_rows=10, max_row_bytes=size - 1))
    assert err.value.line == 2


@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_max_columns_counts_distinct_columns_over_all_rows(files: DatasetFiles, fmt: Format) -> None:
    limits = Limits(max_rows=100, max_row_bytes=1000, max_columns=3)
    ok_rows = [{"a": 1, "b": 2}, {"b": 3, "c": 4}, {"a": 5, "c": 6}]
    assert write(files, encode(fmt, ok_rows), fmt, limits).columns == ["a", "b", "c"]
    with pytest.raises(DatasetError) as err:
        write(files, encode(fmt, [*ok_rows, {"a": 7, "d": 8}]), fmt, limits, dataset_id="over")
    assert err.value.line == 4
    assert "more than 3" in err.value.message


def test_max_columns_csv_and_inline(files: DatasetFiles) -> None:
    limits = Limits(max_rows=100, max_row_bytes=1000, max_columns=2)
    with pytest.raises(DatasetError) as err:
        write(files, b"a,b,c\n1,2,3\n", "csv", limits)
    assert err.value.line == 2
    with pytest.raises(DatasetError) as err:
        files.write_rows("inline", [{"a": 1}, {"b": 2}, {"c": 3}], limits)
    assert err.value.line == 3
    assert leftovers(files) == []


def test_limits_default_max_columns() -> None:
    assert Limits(max_rows=1, max_row_bytes=1).max_columns == 10_000


@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_columns_union_in_first_seen_order(files: DatasetFiles, fmt: Format) -> None:
    rows = [{"b": 1, "a": 2}, {"a": 3, "c": 4}, {}, {"d": 5, "b": 6, "c": 7}, {"e": None}]
    info = write(files, encode(fmt, rows), fmt)
    assert info.columns == ["b", "a", "c", "d", "e"]
    assert files.write_rows("inline", rows, LIMITS).columns == ["b", "a", "c", "d", "e"]


def test_info_bytes_is_the_stored_size(files: DatasetFiles) -> None:
    info = write(files, json.dumps(big_rows(300), indent=2).encode(), "json")
    assert info.bytes == files.rows_path("ds").stat().st_size
    assert info.row_count == 300


# --------------------------------------------------------------------------- lines(start)


ROWS_N = 3 * BLOCK + 5


def numbered_rows(count: int) -> list[dict[str, Any]]:
    return [{"i": i, "pad": "é" * (i % 13), "x": [i] * (i % 3)} for i in range(count)]


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> DatasetFiles:
    files = DatasetFiles(tmp_path_factory.mktemp("many"))
    rows = numbered_rows(ROWS_N)
    body = b"\n\n".join(compact(row) for row in rows)  # blank lines do not shift row indexes
    assert files.write("upload", io.BytesIO(body), "jsonl", LIMITS).row_count == ROWS_N
    assert files.write_rows("inline", iter(rows), LIMITS).row_count == ROWS_N
    return files


@pytest.mark.parametrize("dataset_id", ["upload", "inline"])
@pytest.mark.parametrize(
    "start",
    [
        0,
        1,
        500,
        BLOCK - 1,
        BLOCK,
        BLOCK + 1,
        2 * BLOCK - 1,
        2 * BLOCK,
        3 * BLOCK,
        3 * BLOCK + 1,
        ROWS_N - 1,
        ROWS_N,
        ROWS_N + 1,
        4 * BLOCK,
        4 * BLOCK + 7,
        100 * BLOCK,
    ],
)
def test_lines_from_start(many: DatasetFiles, dataset_id: str, start: int) -> None:
    rows = numbered_rows(ROWS_N)
    got = [(idx, json.loads(line)) for idx, line in many.lines(dataset_id, start)]
    assert got == [(i, rows[i]) for i in range(start, ROWS_N)]


def test_lines_default_start_is_zero(many: DatasetFiles) -> None:
    assert [idx for idx, _ in many.lines("upload")] == list(range(ROWS_N))


def test_lines_yield_lines_without_newline(many: DatasetFiles) -> None:
    for _, line in many.lines("upload", BLOCK - 2):
        assert not line.endswith(b"\n")
        assert line.startswith(b"{") and line.endswith(b"}")


def test_lines_is_lazy(many: DatasetFiles) -> None:
    it: Iterator[tuple[int, bytes]] = many.lines("inline", 2 * BLOCK + 3)
    assert next(it)[0] == 2 * BLOCK + 3
    assert next(it)[0] == 2 * BLOCK + 4


@pytest.mark.parametrize("count", [1, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK])
def test_lines_at_exact_block_multiples(files: DatasetFiles, count: int) -> None:
    rows = [{"i": i} for i in range(count)]
    files.write_rows("ds", rows, LIMITS)
    assert files.rows_path("ds").with_suffix(".idx").stat().st_size == 8 * math.ceil(count / BLOCK)
    for start in {0, count - 1, count, count + 1, BLOCK, BLOCK - 1}:
        assert [idx for idx, _ in files.lines("ds", start)] == list(range(start, count))
    assert read_rows(files, "ds", count - 1) == [rows[-1]]


def test_lines_empty_dataset(files: DatasetFiles) -> None:
    files.write_rows("ds", [], LIMITS)
    assert list(files.lines("ds")) == []
    assert list(files.lines("ds", 5)) == []


# --------------------------------------------------------------------------- failed writes, write_rows, delete


FAILING: list[tuple[Format, bytes]] = [
    ("jsonl", b'{"a":1}\nnope\n'),
    ("jsonl", b'{"a":1}\n[1]\n'),
    ("jsonl", b"".join(compact({"i": i}) + b"\n" for i in range(3 * BLOCK)) + b"{oops\n"),  # after whole blocks
    ("csv", b"a,b\n1,2\n1\n"),
    ("csv", b"a,a\n1,2\n"),
    ("json", b'[{"a":1},]'),
    ("json", json.dumps([{"i": i} for i in range(2 * BLOCK + 1)]).encode() + b"x"),
    ("json", b'[{"a":1}, 2]'),
]


@pytest.mark.parametrize(("fmt", "body"), FAILING)
def test_failed_write_leaves_no_files(files: DatasetFiles, fmt: Format, body: bytes) -> None:
    with pytest.raises(DatasetError):
        write(files, body, fmt)
    assert leftovers(files) == []
    assert not files.rows_path("ds").exists()


def test_failed_write_over_limit_after_many_rows_leaves_no_files(files: DatasetFiles) -> None:
    body = encode("jsonl", [{"i": i} for i in range(3 * BLOCK)])
    with pytest.raises(DatasetError):
        write(files, body, "jsonl", Limits(max_rows=2 * BLOCK + 10, max_row_bytes=100))
    assert leftovers(files) == []


def test_failed_write_rows_leaves_no_files(files: DatasetFiles) -> None:
    def rows() -> Iterator[dict[str, Any]]:
        yield from ({"i": i} for i in range(BLOCK + 3))
        yield {"bad": math.nan}

    with pytest.raises(DatasetError) as err:
        files.write_rows("ds", rows(), LIMITS)
    assert err.value.line == BLOCK + 4
    assert leftovers(files) == []


def test_successful_write_leaves_only_its_three_files(files: DatasetFiles) -> None:
    """The rows, their index, and (issue 48 point 4) the per-column counts of rows holding a value."""
    write(files, b'{"a":1}\n', "jsonl", dataset_id="one")
    assert leftovers(files) == ["one.cols", "one.idx", "one.jsonl"]
    assert files.rows_path("one") == files.root / "one.jsonl"
    files.delete("one")
    assert leftovers(files) == []


def test_the_rows_holding_a_value_are_counted_per_column_in_every_format(files: DatasetFiles) -> None:
    rows = [{"q": "a", "response": "x"}, {"q": "b", "response": None}, {"q": "c"}, {"extra": [1]}]
    for fmt in ("jsonl", "json"):
        write(files, encode(fmt, rows), fmt, dataset_id=fmt)
        assert files.filled(fmt) == {"q": 3, "response": 1, "extra": 1}
    write(files, b"q,response\na,x\nb,\n", "csv", dataset_id="csv")
    assert files.filled("csv") == {"q": 2, "response": 2}  # a CSV cell is a string, the empty one too
    assert files.filled("never-stored") is None


def test_write_replaces_a_previous_version(files: DatasetFiles) -> None:
    write(files, encode("jsonl", [{"i": i} for i in range(BLOCK + 5)]), "jsonl")
    write(files, b'{"new":1}\n', "jsonl")
    assert list(files.lines("ds")) == [(0, b'{"new":1}')]
    assert list(files.lines("ds", BLOCK)) == []


def test_constructor_creates_the_directory(tmp_path: Path) -> None:
    root = tmp_path / "a" / "b" / "datasets"
    DatasetFiles(root)
    assert root.is_dir()
    DatasetFiles(root)  # existing is fine


def test_write_rows_inline(files: DatasetFiles) -> None:
    rows = [{"question": "2+2?", "outputs": "4"}, {"question": "é漢😀", "outputs": None, "meta": {"k": [1, 2.5]}}]
    info = files.write_rows("inline", rows, LIMITS)
    assert info.row_count == 2
    assert info.columns == ["question", "outputs", "meta"]
    assert info.bytes == files.rows_path("inline").stat().st_size
    assert read_rows(files, "inline") == rows


def test_write_rows_accepts_any_iterable(files: DatasetFiles) -> None:
    assert files.write_rows("gen", ({"i": i} for i in range(5)), LIMITS).row_count == 5
    assert read_rows(files, "gen") == [{"i": i} for i in range(5)]


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_write_rows_refuses_nan_and_infinity(files: DatasetFiles, value: float) -> None:
    with pytest.raises(DatasetError) as err:
        files.write_rows("ds", [{"a": 1}, {"a": {"deep": [value]}}], LIMITS)
    assert err.value.line == 2
    assert "row 2" in err.value.message
    assert leftovers(files) == []


@pytest.mark.parametrize("row", [[1, 2], "text", 3, None])
def test_write_rows_refuses_non_objects(files: DatasetFiles, row: Any) -> None:
    with pytest.raises(DatasetError) as err:
        files.write_rows("ds", [{"a": 1}, row], LIMITS)
    assert err.value.line == 2
    assert "not an object" in err.value.message


def test_write_rows_max_rows(files: DatasetFiles) -> None:
    with pytest.raises(DatasetError) as err:
        files.write_rows("ds", [{"i": i} for i in range(4)], Limits(max_rows=3, max_row_bytes=100))
    assert err.value.line == 4
    assert leftovers(files) == []


def test_delete(files: DatasetFiles) -> None:
    files.write_rows("gone", [{"a": 1}], LIMITS)
    files.write_rows("kept", [{"a": 2}], LIMITS)
    files.delete("gone")
    assert leftovers(files) == ["kept.cols", "kept.idx", "kept.jsonl"]  # the per-column counts go with the rows
    files.delete("gone")  # missing files are fine
    files.delete("never-existed")
    with pytest.raises(FileNotFoundError):
        list(files.lines("gone"))
    assert read_rows(files, "kept") == [{"a": 2}]


# --------------------------------------------------------------------------- sniff_format, format_of


@pytest.mark.parametrize(
    ("head", "fmt"),
    [
        (b'[{"a":1}]', "json"),
        (b"  \n\t[", "json"),
        (BOM + b"[", "json"),
        (BOM + b"\r\n [", "json"),
        (b'{"a":1}\n{"a":2}', "jsonl"),
        (b"\n\n  {", "jsonl"),
        (BOM + b"{", "jsonl"),
        (b"a,b\n1,2", "csv"),
        (b"", "csv"),
        (b"   ", "csv"),
        (BOM, "csv"),
        (b'"a","b"', "csv"),
        (b"1,2", "csv"),
    ],
)
def test_sniff_format(head: bytes, fmt: Format) -> None:
    assert sniff_format(head) == fmt


@pytest.mark.parametrize("explicit", ["jsonl", "csv", "json"])
def test_format_of_explicit_wins(explicit: str) -> None:
    for content_type, filename, head in [
        ("text/csv", "x.csv", b"a,b"),
        ("application/json", "x.json", b'{"a":1}'),
        ("application/x-ndjson", "x.jsonl", b"["),
        (None, None, b""),
    ]:
        assert format_of(explicit, content_type, filename, head) == explicit


@pytest.mark.parametrize("explicit", ["xml", "JSONL", "ndjson", "tsv", " json"])
def test_format_of_unknown_explicit(explicit: str) -> None:
    with pytest.raises(DatasetError) as err:
        format_of(explicit, "text/csv", "x.csv", b"a,b")
    assert repr(explicit) in err.value.message


@pytest.mark.parametrize(
    ("filename", "fmt"),
    [
        ("data.jsonl", "jsonl"),
        ("data.ndjson", "jsonl"),
        ("data.csv", "csv"),
        ("data.json", "json"),
        ("DATA.JSONL", "jsonl"),
        ("Data.Csv", "csv"),
        ("dir/archive.v2.csv", "csv"),
    ],
)
def test_format_of_suffix_wins_over_content_type(filename: str, fmt: Format) -> None:
    head = b"[" if fmt == "json" else b"x"
    assert format_of(None, "application/octet-stream", filename, head) == fmt
    other = "text/csv" if fmt != "csv" else "application/x-ndjson"
    assert format_of(None, other, filename, head) == fmt


@pytest.mark.parametrize(
    ("content_type", "fmt"),
    [
        ("application/x-ndjson", "jsonl"),
        ("application/ndjson", "jsonl"),
        ("application/jsonl", "jsonl"),
        ("application/x-jsonlines", "jsonl"),
        ("text/jsonl", "jsonl"),
        ("text/csv", "csv"),
        ("text/csv; charset=utf-8", "csv"),
        ("TEXT/CSV", "csv"),
        ("application/csv", "csv"),
        ("application/json", "json"),
        ("Application/JSON ; charset=UTF-8", "json"),
    ],
)
def test_format_of_content_type(content_type: str, fmt: Format) -> None:
    head = {"csv": b'[{"a":1}]', "jsonl": b"a,b\n1,2", "json": b"a,b\n1,2"}[fmt]  # a sniff would say otherwise
    for filename in (None, "upload", "upload.txt", "upload.bin"):
        assert format_of(None, content_type, filename, head) == fmt


@pytest.mark.parametrize("head", [b'{"a":1}\n{"a":2}', b'  \n{"a":1}', BOM + b'{"a":1}'])
def test_format_of_json_object_body_is_jsonl(head: bytes) -> None:
    assert format_of(None, "application/json", None, head) == "jsonl"
    assert format_of(None, "application/json; charset=utf-8", "upload", head) == "jsonl"
    assert format_of(None, None, "data.json", head) == "jsonl"
    assert format_of("json", "application/json", "data.json", head) == "json"  # explicit still wins


@pytest.mark.parametrize(
    ("head", "fmt"),
    [(b'[{"a":1}]', "json"), (b'{"a":1}', "jsonl"), (b"a,b\n1,2", "csv"), (b"", "csv"), (BOM + b" [", "json")],
)
def test_format_of_sniffs_when_nothing_else_says(head: bytes, fmt: Format) -> None:
    for content_type in (None, "", "application/octet-stream", "text/plain", "multipart/form-data; boundary=x"):
        for filename in (None, "", "upload", "upload.txt", "noext."):
            assert format_of(None, content_type, filename, head) == fmt
    assert format_of("", None, None, head) == fmt  # an empty ?format= is no format


# --------------------------------------------------------------------------- values JSON cannot carry


def test_json_array_out_of_range_number_is_a_dataset_error(files: DatasetFiles) -> None:
    with pytest.raises(DatasetError):
        write(files, b'[{"a": 1e999}]', "json")


@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_deeply_nested_row_is_a_dataset_error(files: DatasetFiles, fmt: Format) -> None:
    row = b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}"
    with pytest.raises(DatasetError):
        write(files, row if fmt == "jsonl" else b"[" + row + b"]", fmt)


def test_jsonl_out_of_range_number_is_a_dataset_error(files: DatasetFiles) -> None:
    with pytest.raises(DatasetError) as info:
        write(files, b'{"a": 1}\n{"a": -1e400}\n', "jsonl")
    assert info.value.line == 2


def test_csv_blank_lines_before_the_header_are_skipped(files: DatasetFiles) -> None:
    info = write(files, b"\n\na,b\n1,2\n", "csv")
    assert info.row_count == 1 and info.columns == ["a", "b"]


def test_lines_with_a_negative_start_start_at_zero(files: DatasetFiles) -> None:
    write(files, b'{"a": 1}\n{"a": 2}\n', "jsonl")
    assert [idx for idx, _ in files.lines("ds", -5)] == [0, 1]


def test_csv_fields_up_to_max_row_bytes_are_accepted(files: DatasetFiles) -> None:
    info = write(files, b"a,b\n" + b"y" * 300_000 + b",1\n", "csv")
    assert info.row_count == 1 and read_rows(files)[0]["a"] == "y" * 300_000


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_line_longer_than_max_row_bytes_is_refused_without_reading_it_whole(files: DatasetFiles, fmt: Format) -> None:
    class Endless(io.RawIOBase):  # 1 GiB of one line, produced on demand: never materialized
        served = 0

        def readable(self) -> bool:
            return True

        def readinto(self, buffer: Any) -> int:
            if self.served > 1 << 30:
                return 0
            buffer[:] = b"x" * len(buffer)
            self.served += len(buffer)
            return len(buffer)

    source = Endless()
    with pytest.raises(DatasetError):
        files.write("ds", io.BufferedReader(source), fmt, Limits(max_rows=10, max_row_bytes=1 << 20))
    assert source.served < 16 << 20
