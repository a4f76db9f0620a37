"""Fixtures of the client tests: one real service for the session (``tests/support/client.py``) and a
client of its workspace. Fixtures only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from evaluator_host.client import Client
from tests.support.client import Live, live_service


@pytest.fixture(scope="session")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with live_service(tmp_path_factory.mktemp("client-service")) as service:
        yield service


@pytest.fixture
def api(live: Live) -> Iterator[Client]:
    """A client of the workspace (its key)."""
    with Client(live.url, live.key) as c:
        yield c
