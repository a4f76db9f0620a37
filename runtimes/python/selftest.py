"""Self-test of the Python harness: start it bare, run cases over the framed protocol.

``python runtimes/python/selftest.py`` exits 0 when the harness loads code from a file,
answers in order, awaits coroutines, reports user line numbers, interrupts a case at its
timeout and keeps prints out of the reply channel. Standard library only, like the harness.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CODE = """import asyncio
print('{"status": "ok", "value": 99}')

async def evaluate(inputs, outputs, trace):
    await asyncio.sleep(0)
    if outputs == "slow":
        await asyncio.sleep(30)
    if outputs == "boom":
        raise ValueError("boom")
    return outputs == inputs["expected"]
"""


def _frame(message: dict[str, object]) -> bytes:
    data = json.dumps(message).encode()
    return struct.pack(">I", len(data)) + data


def _read(stream: object) -> dict[str, object]:
    read = stream.read  # type: ignore[attr-defined]
    (size,) = struct.unpack(">I", read(4))
    message: dict[str, object] = json.loads(read(size))
    return message


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "evaluator.py")
        with open(path, "w") as fh:
            fh.write(CODE)
        config = {"code_path": path, "entrypoint": "evaluate", "interface": "evaluate"}
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", os.path.join(HERE, "harness.py"), json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdin is not None and proc.stdout is not None
        ready = _read(proc.stdout)
        assert ready == {"type": "ready", "load_error": None, "soft_timeouts": True}, ready
        cases = [{"inputs": {"expected": "a"}, "outputs": o} for o in ("a", "b", "boom")]
        proc.stdin.write(_frame({"op": "run", "cases": cases}))
        proc.stdin.flush()
        replies = [_read(proc.stdout) for _ in cases]
        assert [r["index"] for r in replies] == [0, 1, 2]
        assert replies[0]["status"] == "ok" and replies[0]["value"] is True, replies[0]
        assert replies[1]["value"] is False
        error = replies[2]["error"]
        assert replies[2]["status"] == "error" and isinstance(error, dict) and error["line"] == 9, replies[2]
        proc.stdin.write(_frame({"op": "run", "timeout_s": 0.2, "cases": [{"inputs": {}, "outputs": "slow"}]}))
        proc.stdin.flush()
        slow = _read(proc.stdout)
        timeout = slow["error"]
        assert slow["status"] == "timeout" and isinstance(timeout, dict), slow
        assert timeout["type"] == "Timeout" and slow.get("retire") is True, slow  # an interrupted loop retires
        proc.stdin.write(_frame({"op": "exit"}))
        proc.stdin.close()
        assert proc.wait(timeout=10) == 0
    sys.stdout.write("python harness self-test: ok\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
