"""Properties of the dataset parsers and the field mapping, over generated uploads (Hypothesis).

Any rows written as JSON lines, CSV or a JSON array — with or without a UTF-8 BOM, with
``\\n``, ``\\r\\n`` or blank lines between them, with any Unicode in keys and values — read
back exactly, in order, from any start row. Any bytes at all (bad UTF-8, truncated
documents, NUL, lone surrogates' encodings) are a stored dataset or a :class:`DatasetError`,
nothing else, and a refused upload leaves no file behind. A field past ``max_row_bytes``
is refused naming its line. The field mapping reads dotted paths and refuses unknown columns.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from evaluator_host.errors import DatasetError, FieldMappingError
from evaluator_host.jobs.datasets.files import DatasetFiles, Format, Limits, sniff_format
from evaluator_host.jobs.datasets.mapping import RowMapper
from evaluator_host.jobs.datasets.uploads import format_of
from evaluator_host.jobs.models import FieldMapping

LIMITS = Limits(max_rows=100_000, max_row_bytes=1 << 16)
BOM = codecs.BOM_UTF8
FORMATS: list[Format] = ["jsonl", "csv", "json"]
FILES_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
ROUND_TRIP_SETTINGS = settings(FILES_SETTINGS, max_examples=60)

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
ROWS = st.lists(st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=5), max_size=12)
NEWLINES = st.sampled_from(["\n", "\r\n"])


def _store(tmp_path: Path, body: bytes, fmt: Format, limits: Limits = LIMITS) -> list[dict[str, Any]]:
    files = DatasetFiles(tmp_path / "datasets")
    info = files.write("ds", io.BytesIO(body), fmt, limits)
    rows = [json.loads(line) for _, line in files.lines("ds")]
    assert info.row_count == len(rows)
    return rows


def _no_files_left(tmp_path: Path) -> bool:
    root = tmp_path / "datasets"
    return not root.exists() or not any(root.iterdir())


@ROUND_TRIP_SETTINGS
@given(rows=ROWS, newline=NEWLINES, bom=st.booleans(), blanks=st.lists(st.booleans(), min_size=13, max_size=13))
def test_jsonl_rows_read_back_exactly(
    tmp_path_factory: pytest.TempPathFactory, rows: list[dict[str, Any]], newline: str, bom: bool, blanks: list[bool]
) -> None:
    lines = []
    for row, blank in zip(rows, blanks, strict=False):
        lines.append(json.dumps(row, ensure_ascii=bool(len(lines) % 2)) + newline)
        if blank:
            lines.append(newline if len(lines) % 3 else "   " + newline)
    body = (BOM if bom else b"") + "".join(lines).encode()
    assert _store(tmp_path_factory.mktemp("jsonl"), body, "jsonl") == rows


@ROUND_TRIP_SETTINGS
@given(rows=ROWS, bom=st.booleans(), indent=st.none() | st.integers(0, 3))
def test_json_array_rows_read_back_exactly(
    tmp_path_factory: pytest.TempPathFactory, rows: list[dict[str, Any]], bom: bool, indent: int | None
) -> None:
    body = (BOM if bom else b"") + json.dumps(rows, indent=indent, ensure_ascii=False).encode()
    assert _store(tmp_path_factory.mktemp("json"), body, "json") == rows


HEADER = st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=5, unique=True)


@FILES_SETTINGS
@given(header=HEADER, data=st.data(), newline=NEWLINES, bom=st.booleans())
def test_csv_rows_read_back_as_strings_exactly(
    tmp_path_factory: pytest.TempPathFactory, header: list[str], data: st.DataObject, newline: str, bom: bool
) -> None:
    cell = st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"))
    records = data.draw(st.lists(st.lists(cell, min_size=len(header), max_size=len(header)), max_size=10))
    records = [r for r in records if any(r) or len(r) > 1]  # a single empty field is a blank line in CSV
    out = io.StringIO(newline="")
    # a minimal quoting quotes the characters of its own line terminator only: with "\n" a bare "\r"
    # would end the record for any reader, so everything is quoted then
    quoting = csv.QUOTE_MINIMAL if newline == "\r\n" else csv.QUOTE_ALL
    writer = csv.writer(out, lineterminator=newline, quoting=quoting)
    writer.writerow(header)
    writer.writerows(records)
    body = (BOM if bom else b"") + out.getvalue().encode()
    stored = _store(tmp_path_factory.mktemp("csv"), body, "csv")
    assert stored == [dict(zip(header, r, strict=True)) for r in records]


@FILES_SETTINGS
@given(body=st.binary(max_size=600), fmt=st.sampled_from(FORMATS))
@example(body=b'{"a": "\xff"}\n', fmt="jsonl")
@example(body=b'[{"a": "\xc3"}]', fmt="json")
@example(body=b"a,b\n\xfe,1\n", fmt="csv")
@example(body=b'{"a": 1}\n{"a": NaN}\n', fmt="jsonl")
@example(body=b'[{"a": 1e999}]', fmt="json")
@example(body=b"\x00\x00\x00", fmt="csv")
@example(body=b'[{"a": 1}, ', fmt="json")
@example(body=b"a,a\n1,2\n", fmt="csv")
def test_any_bytes_are_a_dataset_or_a_dataset_error_and_a_refusal_leaves_nothing(
    tmp_path_factory: pytest.TempPathFactory, body: bytes, fmt: Format
) -> None:
    tmp_path = tmp_path_factory.mktemp("bytes")
    try:
        rows = _store(tmp_path, body, fmt)
    except DatasetError as exc:
        assert exc.message and (exc.line is None or exc.line >= 1)
        assert _no_files_left(tmp_path)
        return
    assert all(isinstance(row, dict) for row in rows)
    json.dumps(rows, allow_nan=False)


@FILES_SETTINGS
@given(rows=st.lists(st.fixed_dictionaries({"k": st.text(max_size=5)}), min_size=1, max_size=6), data=st.data())
def test_bad_utf8_in_a_jsonl_line_is_refused_naming_that_line(
    tmp_path_factory: pytest.TempPathFactory, rows: list[dict[str, Any]], data: st.DataObject
) -> None:
    bad = data.draw(st.integers(0, len(rows) - 1))
    lines = [json.dumps(row, ensure_ascii=False).encode() for row in rows]
    lines[bad] = lines[bad][:-2] + data.draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80"])) + b'"}'
    tmp_path = tmp_path_factory.mktemp("utf8")
    with pytest.raises(DatasetError) as caught:
        _store(tmp_path, b"\n".join(lines) + b"\n", "jsonl")
    assert caught.value.line == bad + 1
    assert _no_files_left(tmp_path)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fmt=st.sampled_from(FORMATS), size=st.integers(1, 3), newline=NEWLINES)
def test_a_field_past_max_row_bytes_is_refused_naming_its_line(
    tmp_path_factory: pytest.TempPathFactory, fmt: Format, size: int, newline: str
) -> None:
    limits = Limits(max_rows=100, max_row_bytes=4096)
    huge = "x" * (limits.max_row_bytes * size + 10)
    if fmt == "jsonl":
        body = f'{{"a": "ok"}}{newline}{{"a": "{huge}"}}{newline}'
    elif fmt == "json":
        body = f'[{{"a": "ok"}},{newline}{{"a": "{huge}"}}]'
    else:
        body = f"a{newline}ok{newline}{huge}{newline}"
    tmp_path = tmp_path_factory.mktemp("huge")
    with pytest.raises(DatasetError) as caught:
        _store(tmp_path, body.encode(), fmt, limits)
    assert caught.value.line in (2, 3, None) and (
        "bytes" in caught.value.message or "characters" in caught.value.message
    )
    assert _no_files_left(tmp_path)


@given(
    head=st.binary(max_size=64), content_type=st.none() | st.text(max_size=30), name=st.none() | st.text(max_size=20)
)
def test_the_format_of_any_upload_is_one_of_the_three(head: bytes, content_type: str | None, name: str | None) -> None:
    assert sniff_format(head) in FORMATS
    assert format_of(None, content_type, name, head) in FORMATS


NESTED = st.recursive(
    st.text(max_size=4) | st.integers(), lambda inner: st.dictionaries(st.sampled_from("abc"), inner, max_size=3)
)


@given(
    row=st.dictionaries(st.sampled_from(["r", "s"]), NESTED, min_size=1),
    path=st.lists(st.sampled_from("abc"), max_size=3),
)
def test_a_dotted_path_reads_the_nested_value_or_null(row: dict[str, Any], path: list[str]) -> None:
    head = next(iter(row))
    column = ".".join([head, *path])
    mapper = RowMapper(FieldMapping(outputs=column), list(row))
    expected: Any = row
    for key in [head, *path]:
        expected = expected.get(key) if isinstance(expected, dict) else None
    assert mapper.case(row)["outputs"] == expected
    assert mapper.case(row)["inputs"] is row


@given(columns=st.lists(st.text(max_size=6), unique=True, max_size=6), name=st.text(min_size=1, max_size=6))
def test_mapping_to_a_column_the_dataset_lacks_is_refused(columns: list[str], name: str) -> None:
    if name in columns or name.partition(".")[0] in columns:
        return
    with pytest.raises(FieldMappingError):
        RowMapper(FieldMapping(outputs=name), columns)
