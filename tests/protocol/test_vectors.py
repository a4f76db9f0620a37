"""The wire protocol as a contract: the same frame vectors against every implementation of a worker.

``tests/protocol/vectors.json`` lists request frames and the replies they must get (runtimes/PROTOCOL.md).
Each vector runs against the Python harness and the Node harness (started bare, unbound, as the
backends start them, with ``sync`` on) and against the fake backend's worker
(``evaluator_host/testing/fake.py``, whose handler runs the vector's Python evaluator in-process).
Every frame sent and received is validated against ``runtimes/protocol.schema.json``; for the
harnesses, every reply tagged ``seq`` has its sync mark on the raw output, after the raw output its
case wrote (what the host's :class:`RawSync` relies on), and the raw output stripped of the marks is
exactly what the code wrote.

``tests/protocol/rows.json`` is the row → case rule's vectors: the Python rule (the harness's, which
the host's RowMapper and the fake use), the host's ``RowMapper.case``, the Node rule, and both harnesses
over a ``run`` frame carrying the row.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import io
import json
import os
import select
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from evaluator_host.definitions.languages import RUNTIMES_DIR, node_executable
from evaluator_host.errors import FieldMappingError
from evaluator_host.jobs.datasets.mapping import RowMapper, picked_cases, rows_rule
from evaluator_host.jobs.models import FieldMapping
from evaluator_host.sandbox.base import RuntimeKey
from evaluator_host.sandbox.protocol import SYNC_PREFIX, RawSync, encode_frame, read_frame
from evaluator_host.testing.fake import FakeBackend

HERE = Path(__file__).parent
VECTORS = json.loads((HERE / "vectors.json").read_text())
ROWS = json.loads((HERE / "rows.json").read_text())
SCHEMA = json.loads((RUNTIMES_DIR / "protocol.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())
HEADER = struct.Struct(">I")
DEADLINE_S = 60.0


def _valid(frame: dict[str, Any]) -> dict[str, Any]:
    errors = sorted(VALIDATOR.iter_errors(frame), key=str)
    assert not errors, f"{frame} does not match the schema: {[e.message for e in errors]}"
    return frame


def _load_frame(language: str, evaluator: str, request: dict[str, Any], work: Path) -> dict[str, Any]:
    """A vector's load request with the evaluator's code and the language's settings (as the host sends)."""
    code = VECTORS["evaluators"][evaluator][language]
    frame = {"code": code, "interface": "evaluate", "entrypoint": "evaluate", "policy": "standard", **request}
    if language == "python":
        frame["filename"] = "evaluator.py"
    else:  # what the host's inspector found for a CommonJS file with a top-level function
        frame.update(language="javascript", module="cjs", entry={"kind": "binding", "name": "evaluate"})
        frame.update(node_modules=None, work_dir=str(work))
    return frame


def _expand(frame: dict[str, Any]) -> list[dict[str, Any]]:
    """A reply as the per-case replies it stands for (a ``results`` frame: one ok reply per value)."""
    if frame.get("type") != "results":
        return [frame]
    first = frame["index"]
    return [
        {"type": "result", "id": frame["id"], "index": first + k, "status": "ok", "value": value, "stdout": ""}
        for k, value in enumerate(frame["values"])
    ]


def _matches(expected: Any, actual: Any) -> bool:
    """``expected`` is ``actual``: a dict (a frame, an error) names the keys compared, others are not;
    a returned value (``value``) is compared whole, as JSON."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            k in actual and (_same(v, actual[k]) if k == "value" else _matches(v, actual[k]))
            for k, v in expected.items()
        )
    return _same(expected, actual)


def _same(expected: Any, actual: Any) -> bool:
    return json.dumps(expected, sort_keys=True) == json.dumps(actual, sort_keys=True)


class Exchange:
    """What one worker answered a vector: its frames, in order, whether it ended, and its raw output."""

    def __init__(self, frames: list[dict[str, Any]], ended: bool, raw: bytes | None) -> None:
        self.frames = frames
        self.ended = ended
        self.raw = raw


class Bare:
    """A bare harness subprocess, unbound, with the channel the backends give it and ``sync`` on."""

    def __init__(self, language: str, work: Path) -> None:
        config = {"work_dir": str(work), "sync": True, "output_limit": 1 << 20, "result_limit": 1 << 20}
        if language == "python":
            command = [sys.executable, "-I", "-S", str(RUNTIMES_DIR / "python" / "harness.py"), json.dumps(config)]
        else:  # the channel on fds 3 and 4, as the backends' launchers leave it
            launch = 'exec "$0" "$1" "$2" 3<&0 4>&1 </dev/null 1>&2'
            command = ["sh", "-c", launch, node_executable(), str(RUNTIMES_DIR / "node" / "harness.mjs")]
            command.append(json.dumps(config))
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._buf = b""

    def exchange(self, requests: list[dict[str, Any]], replies: int, eof: bool) -> Exchange:
        assert self.proc.stdin is not None and self.proc.stdout is not None and self.proc.stderr is not None
        self.proc.stdin.write(b"".join(encode_frame(_valid(r)) for r in requests))
        self.proc.stdin.flush()
        frames: list[dict[str, Any]] = []
        deadline = time.monotonic() + DEADLINE_S
        while sum(len(_expand(f)) for f in frames) < replies:
            frame = self._frame(deadline)
            assert frame is not None, f"the worker ended after {frames}"
            frames.append(frame)
        if not eof:
            self.proc.stdin.close()  # EOF on its channel: it leaves
        while (frame := self._frame(deadline)) is not None:
            frames.append(frame)  # nothing more may come: compared by the caller
        self.proc.wait(timeout=DEADLINE_S)
        raw = self.proc.stderr.read()
        return Exchange(frames, True, raw)

    def _frame(self, deadline: float) -> dict[str, Any] | None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while True:
            if len(self._buf) >= 4:
                (size,) = HEADER.unpack_from(self._buf)
                if len(self._buf) >= 4 + size:
                    body, self._buf = self._buf[4 : 4 + size], self._buf[4 + size :]
                    frame: dict[str, Any] = json.loads(body)
                    return frame
            left = deadline - time.monotonic()
            assert left > 0, "no reply in time"
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    assert not self._buf, f"a partial frame at EOF: {self._buf!r}"
                    return None
                self._buf += chunk

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


class InProcessEvaluator:
    """The fake backend's handler and load hook: the vector's Python evaluator, run in this process
    (its returned value made JSON-safe by the harness's own ``values.py``)."""

    def __init__(self) -> None:
        self.values = _harness_module("values")
        self.modules: dict[str, dict[str, Any] | BaseException] = {}

    def _module(self, code: str) -> dict[str, Any]:
        if code not in self.modules:
            namespace: dict[str, Any] = {}
            try:
                exec(compile(code, "evaluator.py", "exec"), namespace)  # noqa: S102 - the vectors' own code
                self.modules[code] = namespace
            except Exception as exc:  # noqa: BLE001 - a failing import is the vector's load_error
                self.modules[code] = exc
        module = self.modules[code]
        if isinstance(module, BaseException):
            raise module
        return module

    def load(self, frame: dict[str, Any]) -> dict[str, Any] | None:
        try:
            self._module(frame["code"])
        except Exception as exc:  # noqa: BLE001
            return {"type": type(exc).__name__, "message": str(exc), "line": None, "traceback": ""}
        return None

    def handle(self, load: dict[str, Any], case: dict[str, Any]) -> Any:
        evaluate = self._module(load["code"])["evaluate"]
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            value = evaluate(case.get("inputs"), case.get("outputs"), case.get("trace"))
        if inspect.isawaitable(value):  # an async evaluator: awaited (the fake answers one row at a time)
            return self._awaited(value, printed)
        return {"value": self.values.to_wire(value), "stdout": printed.getvalue(), "stderr": "", "truncated": False}

    async def _awaited(self, value: Any, printed: io.StringIO) -> dict[str, Any]:
        with contextlib.redirect_stdout(printed):
            value = await value
        return {"value": self.values.to_wire(value), "stdout": printed.getvalue(), "stderr": "", "truncated": False}


def _harness_module(name: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        f"protocol_test_{name}", RUNTIMES_DIR / "python" / "evaluator_harness" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_exchange(requests: list[dict[str, Any]], replies: int) -> Exchange:
    """The vector against a fake worker, spoken to over its in-memory channel as the pool does."""

    async def go() -> Exchange:
        evaluator = InProcessEvaluator()
        backend = FakeBackend(evaluator.handle, load=evaluator.load)
        worker = await backend.start_worker(RuntimeKey("python", None, 256))
        try:
            for request in requests:
                worker.writer.write(encode_frame(_valid(request)))
            frames: list[dict[str, Any]] = []
            async with asyncio.timeout(DEADLINE_S):
                while sum(len(_expand(f)) for f in frames) < replies:
                    frames.append(await read_frame(worker.reader, 1 << 30))
                if worker.alive:
                    worker.writer.write_eof()
                while True:
                    try:
                        frames.append(await read_frame(worker.reader, 1 << 30))
                    except asyncio.IncompleteReadError as exc:
                        assert not exc.partial
                        break
                await worker.wait()
            assert not backend.errors, backend.errors
            return Exchange(frames, True, None)
        finally:
            await backend.close()

    return asyncio.run(go())


IMPLEMENTATIONS = ["python", "node", "fake"]


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=[v["name"] for v in VECTORS["vectors"]])
def test_every_worker_answers_the_vectors_alike(vector: dict[str, Any], implementation: str, tmp_path: Path) -> None:
    language = "python" if implementation in ("python", "fake") else "javascript"
    requests = [
        _load_frame(language, vector["evaluator"], r, tmp_path / "work") if r["op"] == "load" else r
        for r in vector["requests"]
    ]
    expected = vector["replies"]
    if implementation == "fake":
        answer = _fake_exchange(requests, len(expected))
    else:
        bare = Bare(language, tmp_path / "work")
        try:
            answer = bare.exchange(requests, len(expected), bool(vector.get("eof")))
        finally:
            bare.close()
    for frame in answer.frames:
        _valid(frame)
    replies = [reply for frame in answer.frames for reply in _expand(frame)]
    assert len(replies) == len(expected), f"{len(replies)} replies, {len(expected)} expected: {answer.frames}"
    for got, want in zip(replies, expected, strict=True):
        assert _matches(want, got), f"expected {want}, got {got}"
    if answer.raw is not None:
        _check_sync(answer, vector.get("raw", []))


def _check_sync(answer: Exchange, written: list[str]) -> None:
    """Every frame's ``seq`` has its mark on the raw output, after the raw output its case wrote; the raw
    output without the marks is exactly what the code wrote."""
    raw = answer.raw
    assert raw is not None
    for frame in answer.frames:
        assert isinstance(frame.get("seq"), int), f"a harness with sync tags every frame: {frame}"
        assert SYNC_PREFIX + str(frame["seq"]).encode() + b"\0" in raw, frame
    sync = RawSync()
    kept = sync.strip(raw) + sync.close()
    assert kept.decode() == "".join(written)
    for index, text in enumerate(written):
        seq = next(f["seq"] for f in answer.frames if f.get("index") == index and f["type"] in ("result", "results"))
        assert raw.index(text.encode()) < raw.index(SYNC_PREFIX + str(seq).encode() + b"\0")


# -- the row → case rule ---------------------------------------------------------------------------
EVERYWHERE = [v for v in ROWS["vectors"] if not v.get("host_only")]


@pytest.mark.parametrize("vector", ROWS["vectors"], ids=[v["name"] for v in ROWS["vectors"]])
def test_the_python_rule_and_the_host_mapper_make_the_vectors_cases(vector: dict[str, Any]) -> None:
    mapping = vector["mapping"]
    columns = vector.get("columns") or (sorted(vector["row"]) if isinstance(vector["row"], dict) else [])
    if not vector.get("host_only"):
        assert list(picked_cases([vector["row"]], mapping)) == [vector["case"]]  # the fake's and the harness's
        rule = rows_rule()
        copied = list(rule.picked_cases([vector["row"]], mapping, _harness_module("values").own))
        assert copied == [vector["case"]]  # with the harness's copies
    if isinstance(vector["row"], dict):  # the host's rows are objects
        fields = _field_mapping(mapping)
        named = [fields.outputs, fields.trace, fields.app_params, *(fields.inputs or [])]
        missing = [n for n in named if n and n not in columns and n.partition(".")[0] not in columns]
        if missing:  # the host refuses a mapping to a column the dataset lacks, when the job is created
            with pytest.raises(FieldMappingError):
                RowMapper(_field_mapping(mapping), columns)
        else:
            assert RowMapper(_field_mapping(mapping), columns).case(vector["row"]) == vector["case"]


def _field_mapping(mapping: dict[str, Any]) -> FieldMapping:
    """A vector's mapping as a job's field_mapping (the pick form's default names are the defaults)."""
    fields = {
        "inputs": mapping.get("inputs"),
        "outputs": mapping.get("outputs"),
        "trace": None if mapping.get("trace") == "trace" else mapping.get("trace"),
        "app_params": None if mapping.get("app_params") == "app_params" else mapping.get("app_params"),
    }
    return FieldMapping(**{k: v for k, v in fields.items() if v is not None})


def test_the_node_rule_makes_the_vectors_cases() -> None:
    script = (
        "import { caseOf } from " + json.dumps((RUNTIMES_DIR / "node" / "rows.mjs").as_uri()) + ";\n"
        "let text = ''; process.stdin.on('data', (d) => { text += d; });\n"
        "process.stdin.on('end', () => { const vectors = JSON.parse(text);\n"
        "  process.stdout.write(JSON.stringify(vectors.map((v) => caseOf(v.row, v.mapping, (x) => "
        "JSON.parse(JSON.stringify(x)))))); });\n"
    )
    answer = subprocess.run(
        [node_executable(), "--input-type=module", "-e", script],
        input=json.dumps(EVERYWHERE),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(answer.stdout) == [v["case"] for v in EVERYWHERE]


@pytest.mark.parametrize("language", ["python", "javascript"])
def test_both_harnesses_pick_the_vectors_cases_from_a_run_frame(language: str, tmp_path: Path) -> None:
    """Every pick-form vector's row sent in a ``run`` frame, to an evaluator echoing its case (the legacy
    interface sees app_params, the evaluate interface the trace: both are run)."""
    echo = {
        ("python", "evaluate"): "def evaluate(inputs, outputs, trace):\n    return [inputs, outputs, trace]\n",
        ("python", "legacy"): "def evaluate(app_params, inputs, output, correct_answer):\n"
        "    return [inputs, output, app_params]\n",
        (
            "javascript",
            "evaluate",
        ): "function evaluate(inputs, outputs, trace) {\n  return [inputs, outputs, trace];\n}\n",
        ("javascript", "legacy"): "function evaluate(app_params, inputs, output, correct) {\n"
        "  return [inputs, output, app_params];\n}\n",
    }
    for interface, fields in (("evaluate", "trace"), ("legacy", "app_params")):
        VECTORS["evaluators"]["_echo_case"] = {language: echo[language, interface]}
        try:
            load = _load_frame(language, "_echo_case", {"op": "load", "interface": interface}, tmp_path / "work")
        finally:
            del VECTORS["evaluators"]["_echo_case"]
        runs = [
            {"op": "run", "id": f"v{i}", "rows": [v["row"]], "pick": v["mapping"]} for i, v in enumerate(EVERYWHERE)
        ]
        bare = Bare(language, tmp_path / interface)
        try:
            answer = bare.exchange([load, *runs], 1 + len(runs), False)
        finally:
            bare.close()
        for vector, frame in zip(EVERYWHERE, answer.frames[1:], strict=True):
            case = vector["case"]
            third = case[fields] if fields == "trace" else (case["app_params"] or {})
            assert frame["value"] == [case["inputs"], case["outputs"], third], vector["name"]
