"""Shared fixtures: a real service (lifespan started) per backend, on a private data dir.

The docker backend joins every backend-parametrized test when an engine answers and
the base image exists (``make images``). ``EVALUATOR_HOST_TEST_DOCKER=required`` (set
by ``.ci/run``) turns "no engine" into a failure instead of a skip.

PostgreSQL: a throwaway server (``tests/pg.py``) serves the session. ``database_url`` gives a
test an empty SQLite database and an empty PostgreSQL database in turn; a test (or module)
marked ``databases`` gets a third ``client``: the process backend on PostgreSQL.
``EVALUATOR_HOST_TEST_POSTGRES=required`` (set by ``.ci/run``) turns "no PostgreSQL" into a failure.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.sandbox.docker.engine import unusable_reason
from evaluator_host.settings import Settings
from tests.pg import POSTGRES_MISSING, POSTGRES_REQUIRED, Cluster

REPO = Path(__file__).resolve().parents[1]
# The test services are reached by TestClient's name "testserver" (and by 127.0.0.1): the session
# declares that name, as an operator adds the names a service is reached by (api/hosts.py).
# tests/api/test_hosts.py sets allowed_hosts itself to check the defaults.
os.environ.setdefault("EVALUATOR_HOST_ALLOWED_HOSTS", "testserver")
DOCKER_REQUIRED = os.environ.get("EVALUATOR_HOST_TEST_DOCKER") == "required"


DOCKER_MISSING = unusable_reason(Settings(), timeout_s=5)
docker_only = pytest.mark.skipif(
    DOCKER_MISSING is not None and not DOCKER_REQUIRED, reason=f"no usable Docker engine: {DOCKER_MISSING}"
)
BACKENDS: list[Any] = ["process", pytest.param("docker", marks=[pytest.mark.docker, docker_only])]
postgres_only = pytest.mark.skipif(
    POSTGRES_MISSING is not None and not POSTGRES_REQUIRED, reason=f"no PostgreSQL: {POSTGRES_MISSING}"
)
DATABASES: list[Any] = ["sqlite", pytest.param("postgres", marks=[postgres_only])]


def managed_containers(owner: str | None = None) -> set[str]:
    """Ids of every container evaluator-host (the service of data dir ``owner``) created that still exists."""
    import docker

    labels = ["evaluator-host.managed=1", *([f"evaluator-host.owner={owner}"] if owner else [])]
    client = docker.from_env(timeout=10)
    try:
        # the low-level list: no inspect per container (one may go between the list and its inspect)
        return {c["Id"] for c in client.api.containers(all=True, filters={"label": labels})}
    finally:
        client.close()


@pytest.fixture(scope="session", autouse=True)
def no_container_left_behind() -> Iterator[None]:
    """Every container the test session's services started is gone when it ends."""
    if DOCKER_MISSING is not None:
        if DOCKER_REQUIRED:
            pytest.fail(f"EVALUATOR_HOST_TEST_DOCKER=required but Docker is not usable: {DOCKER_MISSING}")
        yield
        return
    before = managed_containers()
    yield
    left = managed_containers() - before
    assert not left, f"{len(left)} sandbox containers were left behind: {sorted(left)[:5]}"


def make_settings(data_dir: Path, **overrides: object) -> Settings:
    """Settings for a test service on ``data_dir``."""
    return Settings(data_dir=data_dir, **overrides)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("evaluator-host-data")


@pytest.fixture(scope="session")
def postgres() -> Iterator[Cluster]:
    """The session's PostgreSQL server (started on first use, stopped and removed at the end)."""
    if POSTGRES_MISSING is not None:
        pytest.fail(f"EVALUATOR_HOST_TEST_POSTGRES=required but PostgreSQL is not usable: {POSTGRES_MISSING}")
    cluster = Cluster()
    yield cluster
    cluster.stop()


@pytest.fixture(params=DATABASES)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database: a SQLite file in ``tmp_path``, then a PostgreSQL database of its own."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'test.db'}"
    cluster: Cluster = request.getfixturevalue("postgres")
    return cluster.database()


_POSTGRES = pytest.param("postgres", marks=[postgres_only])


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``client`` runs on every backend; tests marked ``databases`` also on PostgreSQL (``client`` and
    ``process_client``). A module that defines its own ``client`` decides for itself."""
    on_postgres = metafunc.definition.get_closest_marker("databases") is not None
    if "client" in metafunc.fixturenames and not hasattr(metafunc.module, "client") and not _given(metafunc):
        params = [*BACKENDS, _POSTGRES] if on_postgres else BACKENDS
        metafunc.parametrize("client", params, indirect=True, scope="session")
    if "process_client" in metafunc.fixturenames and on_postgres:
        metafunc.parametrize("process_client", ["sqlite", _POSTGRES], indirect=True, scope="module")


def _given(metafunc: pytest.Metafunc) -> bool:
    """Whether the test parametrizes ``client`` itself (``@pytest.mark.parametrize("client", …, indirect=True)``)."""
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0]
        if "client" in ([n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)):
            return True
    return False


def _database(request: pytest.FixtureRequest, name: str) -> str | None:
    """The URL of a new PostgreSQL database for ``name`` ``postgres``; None (the data dir's SQLite file) else."""
    return request.getfixturevalue("postgres").database() if name == "postgres" else None


@pytest.fixture(scope="session")
def client(request: pytest.FixtureRequest, data_dir: Path) -> Iterator[TestClient]:
    """A started service on each backend (and on PostgreSQL); shared by the session (warm pool and all)."""
    backend = "process" if request.param == "postgres" else request.param
    url = _database(request, request.param)
    settings = make_settings(data_dir / request.param, backend=backend, database_url=url)
    with TestClient(create_app(settings)) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def process_client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """A started service of the test module's own: process backend, a fresh data dir (and, marked
    ``databases``, once more on a fresh PostgreSQL database)."""
    url = _database(request, getattr(request, "param", "sqlite"))
    settings = make_settings(tmp_path_factory.mktemp("module-service"), backend="process", database_url=url)
    with TestClient(create_app(settings)) as test_client:
        yield test_client


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
) -> Iterator[tuple[httpx.Client, subprocess.Popen[bytes]]]:
    """The real service (``evaluator-host serve``) on ``data_dir``, healthy; terminated (or reaped) afterwards.

    ``backend`` None leaves the choice to the service (``auto``); ``pass_fds`` are descriptors it
    inherits (as from a shell's ``exec 7<file``); ``database_url`` None is the data dir's SQLite
    file; ``env`` adds environment variables (settings). The caller may kill the process.
    """
    env = {**os.environ, "EVALUATOR_HOST_DATA_DIR": str(data_dir), **(env or {})}
    if backend is not None:
        env["EVALUATOR_HOST_BACKEND"] = backend
    if database_url is not None:
        env["EVALUATOR_HOST_DATABASE_URL"] = database_url
    port = free_port()
    argv = [sys.executable, "-m", "evaluator_host.cli", "serve", "--port", str(port), "--log-level", "warning"]
    proc = subprocess.Popen(argv, cwd=REPO, env=env, pass_fds=pass_fds)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, f"the service exited with {proc.returncode}"
            try:
                if client.get("/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the service did not start"
            time.sleep(0.1)
        yield client, proc
    finally:
        client.close()
        if proc.poll() is None:
            proc.terminate()
        proc.wait(timeout=60)
