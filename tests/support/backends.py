"""The backends and databases a test runs on, and the marks that skip those this machine lacks.

The docker backend joins every backend-parametrized test when an engine answers and the base image
exists (``make images``); ``EVALUATOR_HOST_TEST_DOCKER=required`` (set by ``.ci/run``) turns "no
engine" into a failure instead of a skip (the session fixture in ``tests/conftest.py`` fails).
PostgreSQL likewise (``EVALUATOR_HOST_TEST_POSTGRES=required``, see :mod:`tests.support.pg`).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from evaluator_host.sandbox.docker.engine import Engine, unusable_reason
from evaluator_host.settings import Settings
from tests.support.pg import POSTGRES_MISSING, POSTGRES_REQUIRED
from tests.support.wait import wait_until

# Every container a service of this test session starts carries this label (the operator's
# ``container_labels``, set here before any Settings is made; subprocess services inherit it), so the
# session's leftover check counts its own containers, not those of other test runs on this engine.
SESSION_LABEL = "org.evaluator-host.test-session"
# Under pytest-xdist each worker is a session of its own (its own services and leftover check): a worker
# never takes the id its controller's environment handed down, so workers don't count each other's containers.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER:
    os.environ["EVALUATOR_HOST_TEST_SESSION"] = f"{_WORKER}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    os.environ.pop("EVALUATOR_HOST_CONTAINER_LABELS", None)
SESSION_ID = os.environ.setdefault("EVALUATOR_HOST_TEST_SESSION", f"{os.getpid()}-{uuid.uuid4().hex[:12]}")
os.environ.setdefault("EVALUATOR_HOST_CONTAINER_LABELS", json.dumps({SESSION_LABEL: SESSION_ID}))

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


def managed_containers(owner: str | None = None, session: bool = False) -> set[str]:
    """Ids of every container evaluator-host (the service of data dir ``owner``; of this test session's
    services when ``session``) created that still exists."""
    import docker

    labels = ["evaluator-host.managed=1", *([f"evaluator-host.owner={owner}"] if owner else [])]
    labels += [f"{SESSION_LABEL}={SESSION_ID}"] if session else []
    client = docker.from_env(timeout=10)
    try:
        # the low-level list: no inspect per container (one may go between the list and its inspect)
        return {c["Id"] for c in client.api.containers(all=True, filters={"label": labels})}
    finally:
        client.close()


def containers_gone(data_dir: Path, within_s: float = 30) -> None:
    """Wait until no container of the docker-backend service of ``data_dir`` exists (a stopped or killed
    service's, removed by it or by its janitor); fails after ``within_s`` seconds."""
    owner = Engine(Settings(data_dir=data_dir)).owner
    wait_until(lambda: not managed_containers(owner), within_s, what=f"the containers of {data_dir}'s service to go")
