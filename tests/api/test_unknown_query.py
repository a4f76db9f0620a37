"""Unknown query parameters are a 422 naming the parameter, the accepted ones and the closest one, on every
route (issue 48: ``GET /v1/runtimes?language=node`` was ignored silently), as unknown body fields are; the
fast path leaves a request with a query string to the app, so its answer is the same."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.api.query import accepted_query_parameters
from tests.support.service import make_settings

ADMIN = "operator-key-unknown-query"
LEGACY = "legacy-key-unknown-query"
OP = {"Authorization": f"Bearer {ADMIN}"}
WS = {"Authorization": f"Bearer {LEGACY}"}
PAGE = {"/", "/assets/{name}"}  # the web page and its bundle take any query string (a link's ?utm_source=…)


def _api_routes(routes: Any, prefix: str) -> Iterator[tuple[str, APIRoute]]:
    """Every APIRoute with its full path (FastAPI keeps an included router as one entry of its own)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield prefix + route.path, route
        elif hasattr(route, "original_router"):
            yield from _api_routes(route.original_router.routes, prefix + route.include_context.prefix)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_settings(tmp_path_factory.mktemp("unknown-query") / "data", admin_key=ADMIN, api_keys=[LEGACY])
    with TestClient(create_app(settings), base_url="http://localhost") as test_client:
        yield test_client


def _unknown(response: Any, name: str) -> dict[str, Any]:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["type"] == "ValidationError"
    (detail,) = [d for d in error["details"] if d["loc"] == ["query", name]]
    assert detail["type"] == "extra_forbidden" and detail["field"] == name
    assert f"query.{name}: unknown query parameter" in error["message"]
    return detail


def _call(client: TestClient, method: str, path: str, query: str) -> Any:
    """``method path?query`` with the key the route takes (a workspace's, else the operator's)."""
    url = re.sub(r"\{[^}]+\}", "xyz", path) + "?" + query
    answer = client.request(method, url, headers=WS)
    if answer.status_code == 403:  # an operator route
        answer = client.request(method, url, headers=OP)
    return answer


def test_every_route_refuses_an_unknown_query_parameter(client: TestClient) -> None:
    walked = 0
    for path, route in _api_routes(client.app.routes, ""):  # type: ignore[attr-defined]
        if path in PAGE:
            continue
        for method in sorted(route.methods - {"HEAD"}):
            detail = _unknown(_call(client, method, path, "no_such_parameter=1"), "no_such_parameter")
            assert detail["accepted"] == accepted_query_parameters(route), (method, path)
            walked += 1
    assert walked > 40  # the walk saw the API, not an empty list


def test_a_near_miss_says_did_you_mean_for_every_route_that_takes_parameters(client: TestClient) -> None:
    checked = []
    for path, route in _api_routes(client.app.routes, ""):  # type: ignore[attr-defined]
        accepted = accepted_query_parameters(route)
        if path in PAGE or not accepted:
            continue
        for method in sorted(route.methods - {"HEAD"}):
            typo = accepted[0] + "x"  # "limitx": one letter off
            detail = _unknown(_call(client, method, path, f"{typo}=1"), typo)
            assert detail["did_you_mean"] == accepted[0], (method, path, detail)
            checked.append(path)
    assert "/v1/runtimes" in checked and "/v1/jobs" in checked


def test_runtimes_language_is_refused_not_ignored_and_the_service_stays_healthy(client: TestClient) -> None:
    answer = client.get("/v1/runtimes?language=node", headers=WS)
    detail = _unknown(answer, "language")
    assert detail["accepted"] == ["limit", "cursor"] and detail["did_you_mean"] is None
    assert client.get("/v1/runtimes?limit=5", headers=WS).status_code == 200
    assert client.get("/healthz").status_code == 200


def test_the_fast_path_leaves_a_query_string_to_the_app(client: TestClient) -> None:
    code = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"
    body = {"language": "python", "code": code, "outputs": "a"}
    _unknown(client.post("/v1/evaluate?dry_run=1", json=body, headers=WS), "dry_run")
    assert client.post("/v1/evaluate", json=body, headers=WS).json()["score"] == 1.0


def test_the_page_takes_any_query_string(client: TestClient) -> None:
    assert client.get("/?utm_source=newsletter").status_code in (200, 503)  # 503: the bundle is not built
