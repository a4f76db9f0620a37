"""A test's service: its settings, the calls every test makes of a started one, and the real
``evaluator-host serve`` process on a free loopback port."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from fastapi.testclient import TestClient

from evaluator_host.settings import Settings
from tests.support import REPO
from tests.support.wait import wait_until
from tests.support.zygote import CLI, Process, popen


def make_settings(data_dir: Path, **overrides: object) -> Settings:
    """Settings for a test service on ``data_dir``."""
    return Settings(data_dir=data_dir, **overrides)  # type: ignore[arg-type]


def evaluate(client: TestClient, code: str, language: str = "python", **body: object) -> dict:  # type: ignore[type-arg]
    """POST /v1/evaluate and return the JSON body (asserting HTTP 200)."""
    response = client.post("/v1/evaluate", json={"language": language, "code": code, **body})
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def assert_healthy(client: TestClient) -> None:
    """The service answers and still evaluates."""
    assert client.get("/healthz").json()["status"] == "ok"
    result = evaluate(client, "def evaluate(inputs, outputs, trace):\n    return 1.0\n")
    assert result["status"] == "ok" and result["score"] == 1.0


def busy_workers(client: TestClient) -> float:
    """The service's workers bound and not idle now (running a lease, or starting: a saved evaluator's
    pre-warm too), as ``/metrics`` counts them."""
    found = re.search(r'^evaluator_host_pool_workers\{state="busy"\} (\S+)$', client.get("/metrics").text, re.M)
    return float(found.group(1)) if found else 0.0


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(
    data_dir: Path,
    backend: str | None = None,
    pass_fds: tuple[int, ...] = (),
    database_url: str | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[tuple[httpx.Client, Process]]:
    """The real service (``evaluator-host serve``) on ``data_dir``, healthy; terminated (or reaped) afterwards.

    ``backend`` None leaves the choice to the service (``auto``); ``pass_fds`` are descriptors it
    inherits (as from a shell's ``exec 7<file``); ``database_url`` None is the data dir's SQLite
    file; ``env`` adds environment variables (settings). The caller may kill the process. Started as
    ``python -m evaluator_host.cli serve`` would be, forked from the test process's zygote
    (``tests/support/zygote.py``: the same command without the import).
    """
    env = {**os.environ, "EVALUATOR_HOST_DATA_DIR": str(data_dir), **(env or {})}
    if backend is not None:
        env["EVALUATOR_HOST_BACKEND"] = backend
    if database_url is not None:
        env["EVALUATOR_HOST_DATABASE_URL"] = database_url
    port = free_port()
    proc = popen([*CLI, "serve", "--port", str(port), "--log-level", "warning"], cwd=REPO, env=env, pass_fds=pass_fds)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
    try:

        def healthy() -> bool:
            assert proc.poll() is None, f"the service exited with {proc.returncode}"
            return client.get("/healthz").status_code == 200

        wait_until(healthy, 120, 0.1, what="the service to start", ignoring=(httpx.TransportError,))
        yield client, proc
    finally:
        client.close()
        if proc.poll() is None:
            proc.terminate()
        proc.wait(timeout=60)
