"""A real MLflow 3 tracking server (``mlflow`` from PyPI) for the sink tests, never in the project's lock.

:func:`mlflow_venv` installs the pinned :data:`VERSION` once into a throwaway venv, cached under
``$EVALUATOR_HOST_TEST_MLFLOW_VENV`` or ``~/.cache/evaluator-host-tests/mlflow-<version>`` (a file lock makes
parallel test processes install it once; the first install took about 215 s on the shared machine).
:func:`mlflow_server` starts ``mlflow server`` on loopback with a SQLite backend store (which its OTLP
endpoint, ``/v1/traces``, needs) and stops it afterwards.
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

__all__ = ["VERSION", "mlflow_server", "mlflow_venv"]

VERSION = "3.17.2"


def mlflow_venv() -> Path:
    """The venv holding ``mlflow==VERSION`` (installed on first use)."""
    return tool_venv("mlflow", VERSION, f"mlflow=={VERSION}", "EVALUATOR_HOST_TEST_MLFLOW_VENV")


@contextmanager
def mlflow_server(work: Path, host_name: str = "mlflow.test") -> Iterator[str]:
    """``mlflow server`` on 127.0.0.1 with SQLite under ``work``, taking ``Host: host_name`` too (its
    ``--allowed-hosts``: MLflow refuses other names, against DNS rebinding); its base URL."""
    venv = mlflow_venv()
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(work), "MLFLOW_DISABLE_TELEMETRY": "true"}
    argv = [
        str(venv / "bin" / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port),
        "--backend-store-uri", f"sqlite:///{work / 'mlflow.db'}", "--default-artifact-root", str(work / "artifacts"),
        "--workers", "1", "--allowed-hosts", f"{host_name},{host_name}:{port},127.0.0.1,127.0.0.1:{port}",
    ]  # fmt: skip
    log = open(work / "mlflow.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(argv, env=env, cwd=work, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:

        def up() -> bool:
            assert proc.poll() is None, (work / "mlflow.log").read_text()[-3000:]
            return httpx.get(f"{base}/health", timeout=5).status_code == 200

        wait_until(up, 300, 0.5, what="MLflow to start", ignoring=(httpx.TransportError,))
        yield base
    finally:
        os.killpg(proc.pid, 15)  # its own session: the server and its workers
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        log.close()
