"""Shared fixtures: a real service (lifespan started) per backend, on a private data dir."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.settings import Settings

REPO = Path(__file__).resolve().parents[1]
BACKENDS = ["process"]


def make_settings(data_dir: Path, **overrides: object) -> Settings:
    """Settings for a test service on ``data_dir``."""
    return Settings(data_dir=data_dir, **overrides)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("evaluator-host-data")


@pytest.fixture(scope="session", params=BACKENDS)
def client(request: pytest.FixtureRequest, data_dir: Path) -> Iterator[TestClient]:
    """A started service on each backend; shared by the session (warm pool and all)."""
    settings = make_settings(data_dir / request.param, backend=request.param)
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
