"""Every error answer is the JSON envelope, even for a defect of ours."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.api.deps import get_services
from tests.conftest import make_settings


def test_an_unexpected_exception_is_a_json_500_and_the_service_stays_up(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path, backend="process"))

    def broken() -> None:
        raise RuntimeError("a defect")

    with TestClient(app, raise_server_exceptions=False) as client:
        app.dependency_overrides[get_services] = broken
        answer = client.get("/v1/evaluators")
        assert answer.status_code == 500
        assert answer.headers["content-type"] == "application/json"
        assert answer.json()["error"]["type"] == "InternalError" and "a defect" not in answer.text
        app.dependency_overrides.clear()
        assert client.get("/healthz").json()["status"] == "ok"
