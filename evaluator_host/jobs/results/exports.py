"""Reading a job's results back: JSON pages and NDJSON / CSV streams, in input order.

Each item is ``{index, row, result, worker}``: the dataset row as uploaded, the full
EvaluationResult and the worker host that ran it (null: the service itself); a model-target job's
items add ``generation`` (the row's model call, ``targets/models.py Generation``). What every row
of a job shares (``interface``, ``runtime``, ``evaluator_id``, ``revision``) is stored once and
spliced back in here, so a stream of a million rows costs a merge of two sorted sequences
(dataset lines, stored results) and string concatenation, with memory bounded by one page.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

from evaluator_host.evaluation.models import EvaluationResult
from evaluator_host.jobs.datasets.files import DatasetFiles
from evaluator_host.jobs.models import JobResult, JobResultPage
from evaluator_host.jobs.stored_form import full_form
from evaluator_host.sinks.models import SinkState
from evaluator_host.store import RevisionRecord
from evaluator_host.store.jobs.generations import GenerationRecord, GenerationStore
from evaluator_host.store.jobs.repository import JobRecord, JobStore, StoredResult
from evaluator_host.store.jobs.sink_deliveries import JobSinkStore
from evaluator_host.targets.models import Generation

__all__ = ["CSV_RESULT_COLUMNS", "ResultReader"]

_FETCH_BYTES = 4 * 1024 * 1024  # stored results fetched per query, about (each is at most ~2 MiB)
_BLOCK_BYTES = 1024 * 1024  # NDJSON / CSV bytes yielded at once, about
_PAGE_BYTES = 16 * 1024 * 1024  # a JSON page ends early (with next_offset) past this
CSV_RESULT_COLUMNS = [
    "status",
    "score",
    "passed",
    "label",
    "reason",
    "error_type",
    "error_message",
    "error_line",
    "duration_ms",
    "details",
]


class ResultReader:
    """Joins stored results with their dataset rows."""

    def __init__(self, store: JobStore, files: DatasetFiles) -> None:
        self.store = store
        self.files = files
        self.generations = GenerationStore(store.engine)

    def _generations(self, job: JobRecord, indices: list[int]) -> dict[int, str]:
        """A model-target job's generations of ``indices`` as JSON (``Generation``); {} for another job."""
        if job.target is None or not indices:
            return {}
        return {idx: generation_json(g) for idx, g in self.generations.of(job.id, indices).items()}

    @staticmethod
    def _shared(revision: RevisionRecord, stored: StoredResult) -> dict[str, Any]:
        """``stored_form.SHARED_FIELDS`` of a row's result (``revision`` is added by the caller); ``runtime.id``
        is the row's own."""
        runtime = {"id": stored.runtime_id, "language": revision.language, "packages": revision.packages}
        return {"interface": revision.interface, "runtime": runtime, "evaluator_id": revision.id}

    def _joined(self, job: JobRecord, start: int, limit: int | None) -> Iterator[tuple[int, bytes, StoredResult]]:
        """(index, row line, stored result) for results with ``index >= start``, at most ``limit``.

        Results are fetched in batches sized to about ``_FETCH_BYTES`` from the sizes seen so
        far (16 rows first), so memory stays bounded even when every row printed a megabyte.
        """
        lines = self.files.lines(job.dataset_id, start)
        produced, cursor, batch = 0, start, 16
        while limit is None or produced < limit:
            page = self.store.results(job.id, cursor, batch if limit is None else min(batch, limit - produced))
            if not page:
                return
            size = 0
            for stored in page:
                size += len(stored.result)
                for idx, line in lines:
                    if idx == stored.idx:
                        yield idx, line, stored
                        break
                produced += 1
            cursor = page[-1].idx + 1
            batch = max(16, min(4096, _FETCH_BYTES * len(page) // max(size, 1)))

    def page(self, job: JobRecord, revision: RevisionRecord, offset: int, limit: int) -> JobResultPage:
        """Results with ``index >= offset`` (at most ``limit``), in input order."""
        data: list[JobResult] = []
        size, more = 0, False
        for idx, line, stored in self._joined(job, offset, limit + 1):
            if len(data) == limit or (data and size > _PAGE_BYTES):
                more = True
                break
            size += len(line) + len(stored.result)
            result = {**json.loads(stored.result), **self._shared(revision, stored), "revision": stored.revision}
            data.append(
                JobResult(
                    index=idx,
                    row=json.loads(line),
                    result=EvaluationResult.model_validate(result),
                    worker=stored.worker,
                )
            )
        if job.sinks:  # a job with sinks: each row's deliveries (none yet: [])
            states = JobSinkStore(self.store.engine).states(job.id, [item.index for item in data])
            for item in data:
                item.sinks = [SinkState(**one) for one in states.get(item.index, [])]
        for idx, text in self._generations(job, [item.index for item in data]).items():
            for item in data:
                if item.index == idx:
                    item.generation = Generation.model_validate_json(text)
        return JobResultPage(
            data=data,
            offset=offset,
            limit=limit,
            next_offset=data[-1].index + 1 if more and data else None,
            total=job.total,
        )

    def ndjson(self, job: JobRecord, revision: RevisionRecord) -> Iterator[bytes]:
        """Every result as one JSON line, in input order (yielded in blocks of lines)."""
        shared: dict[str, str] = {}  # JSON of the shared fields, per runtime id (usually one)
        block: list[str] = []
        indices: list[int] = []
        size = 0
        for idx, line, stored in self._joined(job, 0, None):
            common = shared.get(stored.runtime_id)
            if common is None:
                common = shared[stored.runtime_id] = json.dumps(self._shared(revision, stored), separators=(",", ":"))[
                    1:-1
                ]
            result = f'{full_form(stored.result)[:-1]},{common},"revision":{stored.revision}}}'
            worker = "null" if stored.worker is None else json.dumps(stored.worker)
            block.append(f'{{"index":{idx},"row":{line.decode()},"result":{result},"worker":{worker}')
            indices.append(idx)
            size += len(result) + len(line)
            if size >= _BLOCK_BYTES:
                yield self._ndjson_block(job, block, indices)
                block, indices, size = [], [], 0
        if block:
            yield self._ndjson_block(job, block, indices)

    def _ndjson_block(self, job: JobRecord, block: list[str], indices: list[int]) -> bytes:
        """NDJSON lines of ``block`` (each missing its end), with their generation on a model-target job."""
        if job.target is None:
            return "".join(f"{item}}}\n" for item in block).encode()
        found = self._generations(job, indices)
        return "".join(
            f'{item},"generation":{found.get(idx, "null")}}}\n' for item, idx in zip(block, indices, strict=True)
        ).encode()

    def csv(self, job: JobRecord, columns: list[str], outputs: list[str]) -> Iterator[bytes]:
        """A CSV: ``index``, the dataset's columns (non-strings as JSON), the result's fields, ``outputs.<name>``."""
        buffer = io.StringIO()
        # CRLF ends a record (RFC 4180), so the writer quotes any cell holding a CR or LF: a reader that
        # breaks lines on a bare CR cannot start a new row (a formula cell) inside one
        writer = csv.writer(buffer, lineterminator="\r\n")
        header = ["index", *columns, *CSV_RESULT_COLUMNS, *(f"outputs.{n}" for n in outputs)]
        writer.writerow([neutralized(c) for c in header])
        for idx, line, stored in self._joined(job, 0, None):
            row = json.loads(line)
            result = json.loads(stored.result)
            error = result.get("error") or {}
            values = [row.get(c) for c in columns]
            writer.writerow(
                neutralized(cell)
                for cell in [
                    idx,
                    *(v if isinstance(v, str) else "" if v is None else json.dumps(v) for v in values),
                    result["status"],
                    _cell(result.get("score")),
                    _cell(result.get("passed")),
                    result.get("label") or "",
                    result.get("reason") or "",
                    error.get("type", ""),
                    error.get("message", ""),
                    _cell(error.get("line")),
                    result.get("duration_ms", ""),
                    json.dumps(result["details"]) if result.get("details") else "",
                    *(_cell(result.get("outputs", {}).get(n)) for n in outputs),
                ]
            )
            if buffer.tell() >= _BLOCK_BYTES:
                yield buffer.getvalue().encode()
                buffer.seek(0)
                buffer.truncate()
        yield buffer.getvalue().encode()


def generation_json(g: GenerationRecord) -> str:
    """A stored generation as the API's ``Generation`` JSON (``messages`` spliced in as stored)."""
    usage = {"prompt_tokens": g.prompt_tokens, "completion_tokens": g.completion_tokens, "total_tokens": g.total_tokens}
    rest = json.dumps(
        {
            "text": g.text,
            "finish_reason": g.finish_reason,
            "usage": usage,
            "latency_ms": g.latency_ms,
            "attempts": g.attempts,
            "error": g.error,
        },
        separators=(",", ":"),
    )
    return f'{{"messages":{g.messages},{rest[1:]}'


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def neutralized(cell: Any) -> Any:
    """A CSV cell a spreadsheet will not run: text starting with ``= + - @``, a tab or a carriage
    return gets a leading ``'`` (the OWASP rule); numbers (``-0.5``) stay numbers."""
    if not isinstance(cell, str) or not cell.startswith(_FORMULA_START):
        return cell
    try:
        float(cell)
    except ValueError:
        return "'" + cell
    return cell
