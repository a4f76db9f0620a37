"""evaluator_host.jobs.results.exports.ResultReader: a job's stored results as JSON pages, NDJSON and CSV.

Built on the real pieces in ``tmp_path``: a dataset written by ``DatasetFiles``, an
evaluator revision in ``EvaluatorStore``, a job and its rows committed out of order with
``JobStore.commit_rows`` the way the runner stores them (``stored_form``: the shared fields left out).
Proves input order, paging with ``next_offset`` (row gaps, the exact end, the byte cap of
a page), that ``interface``/``runtime``/``evaluator_id``/``revision`` are spliced back
(``runtime.id`` per row), NDJSON lines of ``{index,row,result}`` equal to the pages, and
the CSV header and cells (non-string columns as JSON, ``details``, ``outputs.<name>``).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from evaluator_host.evaluation.models import ErrorInfo, EvaluationResult
from evaluator_host.jobs.datasets.files import DatasetFiles, Limits
from evaluator_host.jobs.models import JobResult
from evaluator_host.jobs.results import exports
from evaluator_host.jobs.results.exports import CSV_RESULT_COLUMNS, ResultReader
from evaluator_host.jobs.stored_form import stored_form
from evaluator_host.store import EvaluatorStore, RevisionRecord
from evaluator_host.store.db import DEFAULT_WORKSPACE, make_engine, utcnow
from evaluator_host.store.jobs.repository import DatasetRecord, JobRecord, JobStore

ROWS: list[dict[str, Any]] = [
    {"q": "what is 2+2?", "a": "4", "n": 1},
    {"q": 'héllo, "quoted"\nnew line', "a": "x", "n": 2.5},
    {"q": "nested", "a": None, "meta": {"k": [1, 2]}},
    {"q": "日本語 🎉", "a": "y"},
    {"q": "bool", "a": True},
    {"q": "last"},
]
COLUMNS = ["q", "a", "n", "meta"]
PACKAGES = {"numpy": "2.0.0"}


def result_of(idx: int) -> EvaluationResult:
    """A varied result per row: an error row, a failed row with no details, the rest ok."""
    common: dict[str, Any] = {"interface": "evaluate", "runtime": {"id": "ignored"}, "duration_ms": 1.5 + idx}
    if idx == 2:
        error = ErrorInfo(type="ValueError", message='bad, "thing"', line=3)
        return EvaluationResult(status="error", error=error, stderr="trace", **common)
    if idx == 4:
        return EvaluationResult(status="ok", score=0.0, passed=False, **common)
    outputs = {"f1": idx / 10} if idx != 5 else {}
    return EvaluationResult(status="ok", score=idx / 4, passed=True, outputs=outputs, details={"i": idx}, **common)


def runtime_of(idx: int) -> str:
    return "py-rt-2" if idx == 5 else "py-rt"  # a resumed job may run its last rows on a rebuilt runtime


@dataclass
class World:
    reader: ResultReader
    jobs: JobStore
    job_id: str
    revision: RevisionRecord

    def job(self) -> JobRecord:
        return self.jobs.get_job(self.job_id)


def build(tmp_path: Path, chunks: list[list[int]], rows: list[dict[str, Any]] = ROWS) -> World:
    engine = make_engine(f"sqlite:///{tmp_path}/x.db")
    jobs, files = JobStore(engine), DatasetFiles(tmp_path / "datasets")
    info = files.write_rows("ds_1", rows, Limits(max_rows=10_000, max_row_bytes=1 << 20))
    jobs.add_dataset(DatasetRecord("ds_1", "d", "jsonl", info.row_count, info.columns, info.bytes, False, utcnow()))
    evaluator = {"name": "e", "description": "", "language": "python", "interface": "evaluate", "code": "x"}
    revision = EvaluatorStore(engine).create(
        DEFAULT_WORKSPACE, **evaluator, packages=PACKAGES, settings={}, runtime_id="py-rt"
    )
    job = jobs.create_job(
        **{"id": "job_1", "evaluator_id": revision.id, "revision": revision.revision, "runtime_id": "py-rt"},
        **{"dataset_id": "ds_1", "field_mapping": {}, "parallelism": 1, "total": len(rows), "warnings": []},
    )
    done = 0
    for chunk in chunks:  # as JobRunner._commit stores them
        rows = [(job.id, i, result_of(i).status, 1, runtime_of(i), stored_form(result_of(i))) for i in chunk]
        done += len(rows)
        jobs.commit_rows(job.id, rows, done=done, failed=0, acc_state={}, active_s=0.0)
    return World(ResultReader(jobs, files), jobs, job.id, revision)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return build(tmp_path, [[3, 1], [0, 5, 2], [4]])


def all_pages(world: World, limit: int) -> list[list[JobResult]]:
    pages, offset = [], 0
    while offset is not None:
        page = world.reader.page(world.job(), world.revision, offset, limit)
        assert (page.offset, page.limit, page.total) == (offset, limit, world.job().total)
        pages.append(page.data)
        offset = page.next_offset
    return pages


def ndjson(world: World) -> list[dict[str, Any]]:
    body = b"".join(world.reader.ndjson(world.job(), world.revision))
    assert body.endswith(b"\n")
    return [json.loads(line) for line in body.decode().splitlines()]


# --------------------------------------------------------------------------- pages


def test_page_has_every_row_in_index_order_whatever_the_commit_order(world: World) -> None:
    page = world.reader.page(world.job(), world.revision, 0, 100)
    assert [item.index for item in page.data] == list(range(len(ROWS)))
    assert [item.row for item in page.data] == ROWS
    assert page.next_offset is None


def test_page_splices_the_jobs_shared_fields_into_every_result(world: World) -> None:
    for item in world.reader.page(world.job(), world.revision, 0, 100).data:
        expected = result_of(item.index).model_copy(
            update={
                "runtime": {"id": runtime_of(item.index), "language": "python", "packages": PACKAGES},
                "evaluator_id": world.revision.id,
                "revision": 1,
            }
        )
        assert item.result == expected


def test_following_next_offset_visits_every_row_once(world: World) -> None:
    pages = all_pages(world, limit=2)
    assert [[item.index for item in data] for data in pages] == [[0, 1], [2, 3], [4, 5]]


def test_a_page_holding_exactly_the_last_rows_has_no_next_offset(world: World) -> None:
    page = world.reader.page(world.job(), world.revision, 2, 4)
    assert [item.index for item in page.data] == [2, 3, 4, 5] and page.next_offset is None
    assert world.reader.page(world.job(), world.revision, 2, 3).next_offset == 5


def test_rows_without_a_result_are_skipped_and_next_offset_follows_the_last_index(tmp_path: Path) -> None:
    world = build(tmp_path, [[4, 0], [2]])
    first = world.reader.page(world.job(), world.revision, 0, 2)
    assert [item.index for item in first.data] == [0, 2] and first.next_offset == 3
    second = world.reader.page(world.job(), world.revision, 3, 2)
    assert [(item.index, item.row) for item in second.data] == [(4, ROWS[4])] and second.next_offset is None


def test_a_page_past_the_last_row_is_empty(world: World) -> None:
    page = world.reader.page(world.job(), world.revision, 99, 10)
    assert page.data == [] and page.next_offset is None


@pytest.mark.parametrize("cap", [1, 250, 500])
def test_a_page_ends_on_the_row_that_takes_it_past_the_byte_cap(
    world: World, cap: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = dict(world.reader.files.lines("ds_1"))
    sizes = {r.idx: len(lines[r.idx]) + len(r.result) for r in world.jobs.results(world.job_id, 0, 100)}
    monkeypatch.setattr(exports, "_PAGE_BYTES", cap)
    pages = all_pages(world, limit=100)
    assert [item.index for data in pages for item in data] == list(range(len(ROWS)))
    assert len(pages) > 1
    for data in pages[:-1]:  # every page but the last ended early: within one row past the cap
        used = [sizes[item.index] for item in data]
        assert sum(used[:-1]) <= cap < sum(used)
    assert len(pages[0]) == 1 if cap == 1 else len(pages[0]) > 1


def test_many_sparse_results_are_read_across_fetches_and_dataset_blocks(tmp_path: Path) -> None:
    rows = [{"q": f"row {i}"} for i in range(1100)]  # more than one 1024-row block of the dataset index
    kept = list(range(0, 1100, 3))
    world = build(tmp_path, [kept[::-1]], rows)  # more results than the first fetch of 16
    assert [line["index"] for line in ndjson(world)] == kept
    assert all(line["row"] == rows[line["index"]] for line in ndjson(world))
    page = world.reader.page(world.job(), world.revision, 1030, 20)
    assert [item.index for item in page.data] == kept[kept.index(1032) :][:20] and page.next_offset == 1090
    assert all(item.row == rows[item.index] for item in page.data)
    assert [item.index for data in all_pages(world, 100) for item in data] == kept


# --------------------------------------------------------------------------- NDJSON


def test_ndjson_has_one_line_per_row_equal_to_the_page_items(world: World) -> None:
    page = world.reader.page(world.job(), world.revision, 0, 100)
    lines = ndjson(world)
    assert [list(line) for line in lines] == [["index", "row", "result", "worker"]] * len(ROWS)
    assert {line["worker"] for line in lines} == {None}  # the service ran them (no queue)
    assert lines == [item.model_dump(mode="json") for item in page.data]
    assert lines[3]["row"]["q"] == "日本語 🎉"
    assert {line["result"]["runtime"]["id"] for line in lines} == {"py-rt", "py-rt-2"}


def test_ndjson_in_tiny_blocks_yields_one_line_per_block(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = ndjson(world)
    monkeypatch.setattr(exports, "_BLOCK_BYTES", 1)
    blocks = list(world.reader.ndjson(world.job(), world.revision))
    assert len(blocks) == len(ROWS) and all(b.count(b"\n") == 1 for b in blocks)
    assert ndjson(world) == whole


def test_ndjson_of_a_job_without_results_is_empty(tmp_path: Path) -> None:
    world = build(tmp_path, [])
    assert b"".join(world.reader.ndjson(world.job(), world.revision)) == b""


# --------------------------------------------------------------------------- CSV


def csv_rows(world: World, outputs: list[str]) -> list[list[str]]:
    body = b"".join(world.reader.csv(world.job(), COLUMNS, outputs)).decode()
    return list(csv.reader(io.StringIO(body)))


def test_csv_header_is_index_columns_result_fields_and_outputs(world: World) -> None:
    assert world.jobs.get_dataset("ds_1").columns == COLUMNS  # what the API passes as ``columns``
    header = csv_rows(world, ["f1", "absent"])[0]
    assert header == ["index", *COLUMNS, *CSV_RESULT_COLUMNS, "outputs.f1", "outputs.absent"]


def test_csv_cells_follow_the_rows_and_results(world: World) -> None:
    header, *body = csv_rows(world, ["f1"])
    cells = [dict(zip(header, line, strict=True)) for line in body]
    assert [c["index"] for c in cells] == ["0", "1", "2", "3", "4", "5"]
    assert cells[0] == {
        **{"index": "0", "q": "what is 2+2?", "a": "4", "n": "1", "meta": ""},
        **{"status": "ok", "score": "0.0", "passed": "true", "label": "", "reason": "", "duration_ms": "1.5"},
        **{"error_type": "", "error_message": "", "error_line": "", "details": '{"i": 0}', "outputs.f1": "0.0"},
    }
    assert (cells[1]["q"], cells[1]["n"], cells[1]["outputs.f1"]) == ('héllo, "quoted"\nnew line', "2.5", "0.1")
    assert (cells[2]["a"], cells[2]["meta"]) == ("", '{"k": [1, 2]}')
    error = {k: cells[2][k] for k in ("status", "score", "passed", "error_type", "error_message", "error_line")}
    assert error == {
        **{"status": "error", "score": "", "passed": ""},
        **{"error_type": "ValueError", "error_message": 'bad, "thing"', "error_line": "3"},
    }
    assert (cells[2]["details"], cells[2]["outputs.f1"]) == ("", "")
    assert (cells[4]["a"], cells[4]["passed"], cells[4]["details"]) == ("true", "false", "")
    assert (cells[5]["a"], cells[5]["outputs.f1"]) == ("", "")


def test_csv_in_tiny_blocks_has_the_header_once_and_the_same_content(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = csv_rows(world, ["f1"])
    monkeypatch.setattr(exports, "_BLOCK_BYTES", 1)
    blocks = list(world.reader.csv(world.job(), COLUMNS, ["f1"]))
    assert len(blocks) >= len(ROWS)
    assert csv_rows(world, ["f1"]) == whole and whole[0][0] == "index"


BASE = {"interface": "evaluate", "runtime": {"id": "rt", "language": "python", "packages": {}}}


@pytest.mark.parametrize("text", ["x", "é", "\u2603", "\n"])
@pytest.mark.parametrize(("out", "err"), [(100_000, 100_000), (100_000, 10), (0, 100_000)])
def test_a_stored_result_is_cut_to_its_cap_stdout_and_stderr_first(text: str, out: int, err: int) -> None:
    result = EvaluationResult(**BASE, status="ok", score=0.5, stdout=text * out, stderr=text * err, details={"k": "v"})
    stored = stored_form(result, 10_240)
    assert len(stored.encode()) <= 10_240
    back = json.loads(stored)
    assert back["truncated"] is True and back["score"] == 0.5 and back["details"] == {"k": "v"}
    assert any("max_stored_result_bytes" in w for w in back["warnings"])
    assert len(back["stdout"]) + len(back["stderr"]) > 1000  # what fits is kept, not thrown away


def test_a_stored_result_that_fits_is_stored_whole() -> None:
    result = EvaluationResult(**BASE, status="ok", score=1.0, stdout="hello\n")
    assert json.loads(stored_form(result, 10_240))["stdout"] == "hello\n"


def test_details_too_large_for_the_cap_are_dropped_last() -> None:
    result = EvaluationResult(**BASE, status="ok", score=1.0, details={"blob": "x" * 50_000})
    back = json.loads(stored_form(result, 10_240))
    assert back["details"] == {"truncated": True} and back["score"] == 1.0
