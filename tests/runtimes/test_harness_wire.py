"""The harnesses' side of a job chunk, on the wire: ``results`` frames and ``rows`` + ``pick`` run frames.

Each harness (Python, and Node for JavaScript/TypeScript) is started bare as a subprocess, as the
selftests do, and spoken to over its channel:

* in a ``flush_ms`` run, consecutive plain ok replies (nothing printed, a value of at most 4 KiB of
  JSON) come back as ``results`` frames; a reply that printed, failed or returned a larger value is
  a frame of its own, and every case is answered exactly once, in order, with its own value;
* without ``flush_ms`` (interactive calls) every reply is a frame of its own;
* a run frame carrying ``rows`` and ``pick`` gives the evaluator exactly the case the host's
  :meth:`RowMapper.case` builds from the row, for every mapping the host sends that way, and the
  fields picked share no list or dict with ``inputs``.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evaluator_host.definitions.languages import node_executable
from evaluator_host.jobs.datasets.mapping import RowMapper
from evaluator_host.jobs.models import FieldMapping

ROOT = Path(__file__).resolve().parents[2] / "runtimes"
HEADER = struct.Struct(">I")

PLAIN = {
    "python": (
        "def evaluate(inputs, outputs, trace):\n"
        "    kind = inputs['kind']\n"
        "    if kind == 'print':\n"
        "        print('hello', inputs['i'])\n"
        "    if kind == 'raise':\n"
        "        raise ValueError('no')\n"
        "    if kind == 'big':\n"
        "        return {'score': 1.0, 'reason': 'x' * 5000}\n"
        "    if kind == 'dict':\n"
        "        return {'score': 0.5, 'i': inputs['i']}\n"
        "    return inputs['i'] % 2 == 0\n"
    ),
    "javascript": (
        "function evaluate(inputs, outputs, trace) {\n"
        "  const kind = inputs.kind;\n"
        "  if (kind === 'print') console.log('hello', inputs.i);\n"
        "  if (kind === 'raise') throw new Error('no');\n"
        "  if (kind === 'big') return { score: 1.0, reason: 'x'.repeat(5000) };\n"
        "  if (kind === 'dict') return { score: 0.5, i: inputs.i };\n"
        "  return inputs.i % 2 === 0;\n"
        "}\n"
    ),
}

# Echo the case they were given (as it was on entry), after mutating the picked fields in place.
ECHO = {
    ("python", "evaluate"): (
        "import json\n"
        "def evaluate(inputs, outputs, trace):\n"
        "    seen = json.loads(json.dumps({'inputs': inputs, 'outputs': outputs, 'trace': trace}))\n"
        "    for value in (outputs, trace):\n"
        "        if isinstance(value, list):\n"
        "            value.append('mutated')\n"
        "        elif isinstance(value, dict):\n"
        "            value['mutated'] = True\n"
        "    return {'score': 1.0, 'seen': seen, 'inputs_after': inputs}\n"
    ),
    ("python", "legacy"): (
        "import json\n"
        "def evaluate(app_params, inputs, output, correct_answer):\n"
        "    seen = json.loads(json.dumps({'inputs': inputs, 'outputs': output, 'app_params': app_params}))\n"
        "    for value in (output, app_params):\n"
        "        if isinstance(value, list):\n"
        "            value.append('mutated')\n"
        "        elif isinstance(value, dict):\n"
        "            value['mutated'] = True\n"
        "    return {'score': 1.0, 'seen': seen, 'inputs_after': inputs}\n"
    ),
    ("javascript", "evaluate"): (
        "function evaluate(inputs, outputs, trace) {\n"
        "  const seen = JSON.parse(JSON.stringify({ inputs, outputs: outputs ?? null, trace: trace ?? null }));\n"
        "  for (const value of [outputs, trace]) {\n"
        "    if (Array.isArray(value)) value.push('mutated');\n"
        "    else if (value !== null && typeof value === 'object') value.mutated = true;\n"
        "  }\n"
        "  return { score: 1.0, seen, inputs_after: inputs };\n"
        "}\n"
    ),
    ("javascript", "legacy"): (
        "function evaluate(app_params, inputs, output, correct_answer) {\n"
        "  const seen = JSON.parse(JSON.stringify({ inputs, outputs: output ?? null, app_params }));\n"
        "  for (const value of [output, app_params]) {\n"
        "    if (Array.isArray(value)) value.push('mutated');\n"
        "    else if (value !== null && typeof value === 'object') value.mutated = true;\n"
        "  }\n"
        "  return { score: 1.0, seen, inputs_after: inputs };\n"
        "}\n"
    ),
}


class Harness:
    """One bare harness subprocess and its channel."""

    def __init__(self, language: str, code: str, tmp: Path, interface: str = "evaluate") -> None:
        suffix = ".py" if language == "python" else ".cjs"
        code_path = tmp / f"evaluator{suffix}"
        code_path.write_text(code)
        config: dict[str, Any] = {
            "code_path": str(code_path),
            "entrypoint": "evaluate",
            "interface": interface,
            "work_dir": str(tmp / "work"),
        }
        if language == "python":
            command = [sys.executable, str(ROOT / "python" / "harness.py"), json.dumps(config)]
        else:  # the channel on fds 3 and 4, as the backends' launchers leave it
            config.update(language="javascript", module="cjs", entry={"kind": "binding", "name": "evaluate"})
            config["node_modules"] = None
            launch = 'exec "$0" "$1" "$2" 3<&0 4>&1 </dev/null 1>&2'
            command = ["sh", "-c", launch, node_executable(), str(ROOT / "node" / "harness.mjs"), json.dumps(config)]
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.out, self.into = self.proc.stdout, self.proc.stdin
        ready = self.read()
        assert ready["type"] == "ready" and ready["load_error"] is None, ready

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message).encode()
        self.into.write(HEADER.pack(len(data)) + data)
        self.into.flush()

    def read(self) -> dict[str, Any]:
        (size,) = HEADER.unpack(self.out.read(4))
        message: dict[str, Any] = json.loads(self.out.read(size))
        return message

    def answers(self, n: int) -> Iterator[tuple[int, dict[str, Any], dict[str, Any]]]:
        """(index, that case's reply as a single reply would carry it, the frame it came in), for ``n`` cases."""
        done = 0
        while done < n:
            frame = self.read()
            if frame["type"] == "results":
                assert frame["index"] == done, frame
                assert len(frame["values"]) == len(frame["durations"]) > 0
                for value, ms in zip(frame["values"], frame["durations"], strict=True):
                    assert isinstance(ms, int | float) and ms >= 0
                    yield done, {"status": "ok", "value": value, "stdout": "", "stderr": ""}, frame
                    done += 1
            else:
                assert frame["type"] == "result" and frame["index"] == done, frame
                yield done, frame, frame
                done += 1

    def close(self) -> None:
        self.into.close()
        self.proc.wait(timeout=10)
        self.out.close()


@pytest.fixture(params=["python", "javascript"])
def language(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _plain_cases() -> list[dict[str, Any]]:
    kinds = {100: "print", 200: "raise", 250: "big", 251: "big", 300: "dict"}
    return [{"inputs": {"i": i, "kind": kinds.get(i, "bool")}, "outputs": None, "trace": None} for i in range(400)]


def test_plain_ok_replies_of_a_flush_run_come_back_in_results_frames_each_case_answered_once(
    language: str, tmp_path: Path
) -> None:
    harness = Harness(language, PLAIN[language], tmp_path)
    try:
        harness.send({"op": "run", "id": "r1", "timeout_s": 10, "flush_ms": 50, "cases": _plain_cases()})
        kinds: dict[str, int] = {}
        for index, reply, frame in harness.answers(400):
            kinds[frame["type"]] = kinds.get(frame["type"], 0) + 1
            assert frame["id"] == "r1"
            if index == 100:
                assert frame["type"] == "result" and reply["status"] == "ok" and "hello 100" in reply["stdout"]
            elif index == 200:
                assert frame["type"] == "result" and reply["status"] == "error"
            elif index in (250, 251):  # over 4 KiB of JSON: a frame of its own
                assert frame["type"] == "result" and len(reply["value"]["reason"]) == 5000
            elif index == 300:
                assert reply["value"] == {"score": 0.5, "i": 300}
            else:
                assert reply["status"] == "ok" and reply["value"] is (index % 2 == 0), (index, reply)
        assert kinds.get("results", 0) >= 4  # the runs between the special cases travel in bulk
        assert kinds["result"] == 4  # printed, raised, and the two big values: each a frame of its own
    finally:
        harness.close()


def test_without_flush_ms_every_reply_is_a_frame_of_its_own(language: str, tmp_path: Path) -> None:
    harness = Harness(language, PLAIN[language], tmp_path)
    try:
        harness.send({"op": "run", "id": "r2", "timeout_s": 10, "cases": _plain_cases()[:50]})
        for index, reply, frame in harness.answers(50):
            assert frame["type"] == "result"
            assert reply["value"] is (index % 2 == 0)
    finally:
        harness.close()


ROWS: list[Any] = [
    {"outputs": "a", "output": "b", "trace": {"t": [1, 2]}, "app_params": {"p": 1}, "answer": ["x"]},
    {"output": "only output", "answer": {"nested": [1, {"deep": True}]}},
    {"outputs": None, "output": "ignored: outputs is present", "answer": 3.5},
    {"answer": "ünïcode ✓ 🎉", "trace": ["list", "trace"]},
    {},
    {"i": 7, "answer": None, "app_params": ["params", "as", "a", "list"]},
]
MAPPINGS = [
    FieldMapping(),
    FieldMapping(outputs="answer"),
    FieldMapping(outputs="answer", trace="answer", app_params="output"),
]
COLUMNS = ["outputs", "output", "trace", "app_params", "answer", "i"]


@pytest.mark.parametrize("interface", ["evaluate", "legacy"])
@pytest.mark.parametrize("mapping", MAPPINGS, ids=["default", "outputs", "all-named"])
def test_a_rows_run_gives_the_evaluator_the_case_the_host_builds_and_picked_fields_are_copies(
    language: str, tmp_path: Path, mapping: FieldMapping, interface: str
) -> None:
    mapper = RowMapper(mapping, COLUMNS)
    assert mapper.pick is not None
    harness = Harness(language, ECHO[language, interface], tmp_path, interface=interface)
    try:
        harness.send({"op": "run", "id": "r3", "timeout_s": 10, "flush_ms": 5, "rows": ROWS, "pick": mapper.pick})
        for index, reply, _frame in harness.answers(len(ROWS)):
            assert reply["status"] == "ok", reply
            expected = mapper.case(json.loads(json.dumps(ROWS[index])))
            seen = reply["value"]["seen"]
            assert seen["inputs"] == expected["inputs"]
            assert seen["outputs"] == expected["outputs"]
            if interface == "evaluate":
                assert seen["trace"] == expected["trace"]
            else:
                assert seen["app_params"] == (expected["app_params"] or {})  # legacy: {} for a null app_params
            assert reply["value"]["inputs_after"] == ROWS[index]  # mutating a picked field left inputs alone
    finally:
        harness.close()
