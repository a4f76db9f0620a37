"""Fixtures for queued jobs: a real ``redis-server`` and PostgreSQL, the real service and real
``evaluator-host worker`` processes (process backend), each worker in its own process group and data
dir (they share no disk), as hosts would be (the grid itself: ``tests/support/queue.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.pg import POSTGRES_MISSING, POSTGRES_REQUIRED, Cluster
from tests.support.queue import SECRETS_KEY, Grid
from tests.support.redis_server import REDIS_MISSING, REDIS_REQUIRED, RedisServer

if REDIS_MISSING and REDIS_REQUIRED:
    raise RuntimeError(f"EVALUATOR_HOST_TEST_REDIS=required but {REDIS_MISSING}")
if REDIS_MISSING or (POSTGRES_MISSING and not POSTGRES_REQUIRED):
    pytest.skip(
        f"queued jobs need redis-server and PostgreSQL: {REDIS_MISSING or POSTGRES_MISSING}", allow_module_level=True
    )


@pytest.fixture
def grid_factory(tmp_path: Path, postgres: Cluster) -> Iterator[Callable[..., Grid]]:
    """Make a :class:`Grid` (a redis-server of its own; ``database_url`` default: a fresh PostgreSQL schema)."""
    made: list[Grid] = []
    servers: list[RedisServer] = []

    def make(database_url: str | None = None, **settings: str) -> Grid:
        redis = RedisServer()
        servers.append(redis)
        url = database_url or postgres.database(driver="postgresql")
        env = {
            "EVALUATOR_HOST_QUEUE_URL": redis.url,
            "EVALUATOR_HOST_DATABASE_URL": url,
            "EVALUATOR_HOST_BACKEND": "process",
            "EVALUATOR_HOST_LOG_FORMAT": "text",
            "EVALUATOR_HOST_QUEUE_VISIBILITY_S": "4",
            "EVALUATOR_HOST_QUEUE_STALL_S": "5",
            "EVALUATOR_HOST_SPARE_WORKERS": "0",
            # shared by the service and every host, as docs/operations.md requires: chunk tasks are signed with it
            "EVALUATOR_HOST_SECRETS_KEY": SECRETS_KEY,
            **{f"EVALUATOR_HOST_{k.upper()}": v for k, v in settings.items()},
        }
        grid = Grid(tmp_path, redis, url, env)
        made.append(grid)
        return grid

    yield make
    for grid in made:
        grid.close()
    for server in servers:
        server.close()


@pytest.fixture
def grid(grid_factory: Callable[..., Grid]) -> Grid:
    """A service on the queue with two worker hosts, ``a`` and ``b`` (two lanes each)."""
    made = grid_factory()
    made.serve()
    made.add_host("a")
    made.add_host("b")
    return made
