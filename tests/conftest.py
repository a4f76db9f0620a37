"""Shared fixtures: a real service (lifespan started) per backend, on a private data dir.

Fixtures and hooks only: the helpers they are built on live in ``tests/support`` (test modules
import those, never this file). The docker backend joins every backend-parametrized test when an
engine answers and the base image exists (``make images``). ``EVALUATOR_HOST_TEST_DOCKER=required``
(set by ``.ci/run``) turns "no engine" into a failure instead of a skip.

PostgreSQL: a throwaway server (``tests/support/pg.py``) serves the session. ``database_url`` gives a
test an empty SQLite database and an empty PostgreSQL database in turn; a test (or module)
marked ``databases`` gets a third ``client``: the process backend on PostgreSQL.
``EVALUATOR_HOST_TEST_POSTGRES=required`` (set by ``.ci/run``) turns "no PostgreSQL" into a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from evaluator_host.api import create_app
from evaluator_host.store.db import make_engine
from tests.support.backends import (
    BACKENDS,
    DATABASES,
    DOCKER_MISSING,
    DOCKER_REQUIRED,
    managed_containers,
    postgres_only,
)
from tests.support.pg import POSTGRES_MISSING, Cluster
from tests.support.schedule import rank
from tests.support.service import make_settings

# The test services are reached by TestClient's name "testserver" (and by 127.0.0.1): the session
# declares that name, as an operator adds the names a service is reached by (api/hosts.py).
# tests/api/test_hosts.py sets allowed_hosts itself to check the defaults.
os.environ.setdefault("EVALUATOR_HOST_ALLOWED_HOSTS", "testserver")


@pytest.fixture(scope="session", autouse=True)
def no_container_left_behind() -> Iterator[None]:
    """Every container the test session's services started is gone when it ends (theirs only: the
    session's label, ``tests/support/backends.py``; another test run on this engine is not counted)."""
    if DOCKER_MISSING is not None:
        if DOCKER_REQUIRED:
            pytest.fail(f"EVALUATOR_HOST_TEST_DOCKER=required but Docker is not usable: {DOCKER_MISSING}")
        yield
        return
    before = managed_containers(session=True)
    yield
    left = managed_containers(session=True) - before
    assert not left, f"{len(left)} sandbox containers were left behind: {sorted(left)[:5]}"


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


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """An engine on :func:`database_url`'s database, migrated to the newest; disposed afterwards. A module that
    needs another (a given URL, its own options) defines its own ``engine``."""
    made = make_engine(database_url)
    yield made
    made.dispose()


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


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist: the heaviest files first (``tests/support/schedule.py``), so the workers end together;
    the order within a file, and of every other file, stays pytest's. ``--dist loadfile`` hands each worker
    whole files in this order (``tests/tiers.py``)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return  # one process: pytest's own order (its grouping of the session-scoped services) is kept
    items.sort(key=lambda item: rank(item.path))


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
