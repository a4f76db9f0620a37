"""Raw output reaches the reply of the case that wrote it, on the real backends (the race behind the
flaky ``test_secrets[docker]``: docker relays a container's stdout and stderr apart, so a reply frame
could arrive before the fd-2 output written ahead of it, which then went to the next call or nowhere;
on main this probe misattributed 6 and 31 of 300 calls under load). The sync marks
(``runtimes/PROTOCOL.md``, "Raw output sync") make every call's stderr exactly its own raw output.
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
CODE = (
    "import os, sys\n\ndef evaluate(inputs, outputs, trace):\n"
    "    os.write(2, ('raw %d\\n' % inputs['i']).encode())\n"
    "    os.write(1, ('out %d\\n' % inputs['i']).encode())\n"
    "    return inputs['i']\n"
)
NO_DOCKER = unusable_reason(Settings(), timeout_s=5)


@pytest.mark.parametrize(
    "backend",
    [
        "process",
        pytest.param(
            "docker", marks=[pytest.mark.docker, pytest.mark.skipif(NO_DOCKER is not None, reason=str(NO_DOCKER))]
        ),
    ],
)
def test_every_call_gets_exactly_the_raw_output_it_wrote(backend: str, tmp_path: Path) -> None:
    with TestClient(create_app(Settings(data_dir=tmp_path, backend=backend))) as client:
        created = client.post("/v1/evaluators", json={"name": "raw", "language": "python", "code": CODE})
        assert created.status_code == 201, created.text
        ev = created.json()["id"]
        wrong: list[dict[str, Any]] = []
        for i in range(CALLS):
            result = client.post(f"/v1/evaluators/{ev}/evaluate", json={"inputs": {"i": i}}).json()
            if result.get("status") != "ok" or result.get("stderr") != f"raw {i}\nout {i}\n":
                wrong.append({"call": i, **result})
        assert wrong == [], f"{len(wrong)} of {CALLS} calls got another call's raw output: {wrong[:3]}"
        assert client.get("/healthz").status_code == 200
