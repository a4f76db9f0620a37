"""The versions a running service reports: ``/healthz`` (``version``, ``api_version``) and the OpenAPI document
(``info.version``, ``info.x-api-version``), all from evaluator_host/__init__.py."""

from __future__ import annotations

from fastapi.testclient import TestClient

import evaluator_host


def test_healthz_and_openapi_carry_the_versions(process_client: TestClient) -> None:
    health = process_client.get("/healthz").json()
    assert health["version"] == evaluator_host.__version__
    assert health["api_version"] == evaluator_host.API_VERSION
    info = process_client.get("/openapi.json").json()["info"]
    assert info["version"] == evaluator_host.__version__ and info["x-api-version"] == evaluator_host.API_VERSION
