"""A real Phoenix server (``arize-phoenix`` from PyPI) for the sink tests, never in the project's lock.

:func:`phoenix_venv` installs the pinned :data:`VERSION` once into a throwaway venv of its own, cached
under ``$EVALUATOR_HOST_TEST_PHOENIX_VENV`` or ``~/.cache/evaluator-host-tests/phoenix-<version>`` (a file
lock makes parallel test processes install it once; a finished install leaves ``.installed``). The first
install takes minutes (measured: about 220 s on the shared 2-core machine); later runs reuse it.
:func:`phoenix_server` starts ``phoenix serve`` on loopback ports with SQLite in a temporary working dir
and stops it afterwards.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.service import free_port
from tests.support.tool_venvs import tool_venv
from tests.support.wait import wait_until

__all__ = ["VERSION", "phoenix_server", "phoenix_venv"]

VERSION = "20.26.1"


def phoenix_venv() -> Path:
    """The venv holding ``arize-phoenix==VERSION`` (installed on first use)."""
    return tool_venv("phoenix", VERSION, f"arize-phoenix=={VERSION}", "EVALUATOR_HOST_TEST_PHOENIX_VENV")


@contextmanager
def phoenix_server(work: Path) -> Iterator[str]:
    """``phoenix serve`` on 127.0.0.1 with SQLite under ``work``; its base URL (REST API at ``/v1``)."""
    venv = phoenix_venv()
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(work),
        "PHOENIX_WORKING_DIR": str(work),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),
        "PHOENIX_SQL_DATABASE_URL": f"sqlite:///{work / 'phoenix.db'}",
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = open(work / "phoenix.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([str(venv / "bin" / "phoenix"), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:

        def up() -> bool:
            assert proc.poll() is None, (work / "phoenix.log").read_text()[-3000:]
            return httpx.get(f"{base}/healthz", timeout=5).status_code == 200

        wait_until(up, 300, 0.5, what="Phoenix to start", ignoring=(httpx.TransportError,))
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
