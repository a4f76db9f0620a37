"""Raw output reaches the reply of the case that wrote it, on the real backends (the race behind the
flaky ``test_secrets[docker]``: docker relays a container's stdout and stderr apart, so a reply frame
could arrive before the fd-2 output written ahead of it, which then went to the next call or nowhere;
on main this probe misattributed 6 and 31 of 300 calls under load). The sync marks
(``runtimes/PROTOCOL.md``, "Raw output sync") make every call's stderr exactly its own raw output on docker;
on the process backend the raw pipe orders them itself (``sandbox/process/raw_pipe.py``: no marks), which a
call whose raw output is larger than one read of the pipe proves too, in both languages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.sandbox.docker.engine import unusable_reason
from evaluator_host.settings import Settings

CALLS = 150
CODE = {
    "python": (
        "import os, sys\n\ndef evaluate(inputs, outputs, trace):\n"
        "    os.write(2, b'x' * inputs['pad'])\n"
        "    os.write(2, ('raw %d\\n' % inputs['i']).encode())\n"
        "    os.write(1, ('out %d\\n' % inputs['i']).encode())\n"
        "    return inputs['i']\n"
    ),
    "javascript": (
        "const fs = require('fs')\n"
        "function evaluate(inputs, outputs, trace) {\n"
        "  fs.writeSync(2, 'x'.repeat(inputs.pad))\n"
        "  fs.writeSync(2, `raw ${inputs.i}\\n`)\n"
        "  fs.writeSync(1, `out ${inputs.i}\\n`)\n"
        "  return inputs.i\n}\n"
    ),
}
NO_DOCKER = unusable_reason(Settings(), timeout_s=5)


DOCKER = [pytest.mark.docker, pytest.mark.skipif(NO_DOCKER is not None, reason=str(NO_DOCKER))]


@pytest.mark.parametrize(
    ("backend", "language", "pad"),
    [
        ("process", "python", 0),
        ("process", "python", 200_000),  # past a pipe's 64 KiB: the reply is read while the raw output is not
        ("process", "javascript", 200_000),
        pytest.param("docker", "python", 0, marks=DOCKER),
    ],
)
def test_every_call_gets_exactly_the_raw_output_it_wrote(backend: str, language: str, pad: int, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, backend=backend)
    with TestClient(create_app(settings)) as client:
        created = client.post("/v1/evaluators", json={"name": "raw", "language": language, "code": CODE[language]})
        assert created.status_code == 201, created.text
        ev = created.json()["id"]
        wrong: list[dict[str, Any]] = []
        for i in range(CALLS if not pad else CALLS // 3):
            result = client.post(f"/v1/evaluators/{ev}/evaluate", json={"inputs": {"i": i, "pad": pad}}).json()
            if result.get("status") != "ok" or result.get("stderr") != "x" * pad + f"raw {i}\nout {i}\n":
                wrong.append({"call": i, **{k: v for k, v in result.items() if k != "stderr"}})
        assert wrong == [], f"{len(wrong)} of {CALLS} calls got another call's raw output: {wrong[:3]}"
        assert client.get("/healthz").status_code == 200
