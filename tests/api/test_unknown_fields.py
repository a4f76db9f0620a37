"""Unknown fields in a JSON body are a 422 naming the field, the accepted ones and the closest one, on
every route that takes a body, at the top level and nested; the fast path answers the same (issue 34, 1)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.api.fields import body_model, strict_models
from tests.support.service import make_settings

ADMIN = "operator-key-unknown-fields"
LEGACY = "legacy-key-unknown-fields"
OP = {"Authorization": f"Bearer {ADMIN}"}
WS = {"Authorization": f"Bearer {LEGACY}"}
CODE = "def evaluate(inputs, outputs, trace):\n    return float(outputs == 'a')\n"
# Routes whose body is not one JSON object of ours: rows in any format, and OTLP (whose spec says
# receivers ignore unknown fields).
RAW_BODIES = {("POST", "/v1/datasets"), ("POST", "/v1/traces")}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The same service (keys on) with the fast path and without it, each with one evaluator."""
    clients = []
    for fast in (True, False):
        settings = make_settings(
            tmp_path_factory.mktemp(f"unknown-{fast}"),
            backend="process",
            fast_path=fast,
            admin_key=ADMIN,
            api_keys=[LEGACY],
        )
        clients.append(TestClient(create_app(settings)))
    with clients[0] as fast_client, clients[1] as app_client:
        ids = []
        for client in (fast_client, app_client):
            made = client.post("/v1/evaluators", json={"name": "exact", "language": "python", "code": CODE}, headers=WS)
            assert made.status_code == 201, made.text
            ids.append(made.json()["id"])
        assert ids[0] != ids[1]
        yield {"fast": fast_client, "app": app_client, "ids": ids}


def test_every_json_body_model_is_strict_all_the_way_down() -> None:
    app = create_app(make_settings_for_routes())
    seen = set()
    for path, route in _api_routes(app.routes, ""):
        if not route.methods & {"POST", "PUT", "PATCH"}:
            continue
        model = body_model(route)
        if model is None:
            for method in route.methods:
                assert (method, path) in RAW_BODIES or route.body_field is None, (method, path)
            continue
        loose = [name for name, strict in strict_models(model).items() if not strict]
        assert not loose, (path, loose)
        seen.add(path)
    for path in (
        "/v1/evaluate",
        "/v1/evaluators",
        "/v1/evaluators/{evaluator_id}",
        "/v1/evaluators/{evaluator_id}/evaluate",
        "/v1/evaluators/{evaluator_id}/migrate",
        "/v1/inspect",
        "/v1/migrate",
        "/v1/jobs",
        "/v1/online-rules",
        "/v1/online-rules/{rule_id}",
        "/v1/runtimes",
        "/v1/secrets/{name}",
        "/v1/workspaces",
        "/v1/workspaces/{workspace_id}",
        "/v1/workspaces/{workspace_id}/keys",
    ):
        assert path in seen, path


def _api_routes(routes: Any, prefix: str) -> Iterator[tuple[str, APIRoute]]:
    """Every APIRoute with its full path (FastAPI keeps an included router as one entry of its own)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield prefix + route.path, route
        elif hasattr(route, "original_router"):
            yield from _api_routes(route.original_router.routes, prefix + route.include_context.prefix)


def make_settings_for_routes() -> Any:
    import tempfile
    from pathlib import Path

    return make_settings(Path(tempfile.mkdtemp(prefix="routes-")), backend="process")


def _unknown(response: Any, field: str, guess: str | None) -> dict[str, Any]:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert set(error) >= {"type", "message", "line", "column", "details"}
    assert error["type"] == "ValidationError"
    (detail,) = [d for d in error["details"] if d["type"] == "extra_forbidden"]
    assert detail["field"] == field
    assert detail["did_you_mean"] == guess
    assert f"{field}: unknown field" in error["message"]
    if guess is not None:
        assert f"did you mean '{guess}'?" in error["message"]
        assert guess in detail["accepted"]
    assert field not in detail["accepted"]
    return detail


@pytest.mark.parametrize("route", ["inline", "by-id"])
def test_misspelled_outputs_is_a_422_on_both_evaluate_routes_and_the_fast_path_says_the_same(
    pair: dict[str, Any], route: str
) -> None:
    answers = []
    for client, evaluator_id in ((pair["fast"], pair["ids"][0]), (pair["app"], pair["ids"][1])):
        fast_before = _answered(client)
        if route == "inline":
            body = {"language": "python", "code": CODE, "inputs": {}, "output": "a"}
            response = client.post("/v1/evaluate", json=body, headers=WS)
        else:
            response = client.post(f"/v1/evaluators/{evaluator_id}/evaluate", json={"output": "a"}, headers=WS)
        detail = _unknown(response, "output", "outputs")
        assert {"inputs", "outputs", "trace", "app_params", "cases"} <= set(detail["accepted"])
        assert _answered(client) == fast_before  # the fast path left it to the app
        answers.append(response.json())
    assert answers[0] == answers[1]
    # and the service still answers the right spelling
    good = pair["fast"].post(f"/v1/evaluators/{pair['ids'][0]}/evaluate", json={"outputs": "a"}, headers=WS)
    assert good.status_code == 200 and good.json()["score"] == 1.0, good.text


def _answered(client: TestClient) -> int:
    layer: Any = client.app.middleware_stack  # type: ignore[attr-defined]
    while layer is not None:
        if hasattr(layer, "answered"):
            return int(layer.answered)
        layer = getattr(layer, "app", None)
    return 0


def test_nested_objects_are_strict_too(pair: dict[str, Any]) -> None:
    client = pair["app"]
    body = {"language": "python", "code": CODE, "outputs": "a", "settings": {"timeout": 5}}
    detail = _unknown(client.post("/v1/evaluate", json=body, headers=WS), "timeout", "timeout_s")
    assert detail["loc"] == ["body", "settings", "timeout"]
    cases = {"language": "python", "code": CODE, "cases": [{"outputs": "a"}, {"ouputs": "a"}]}
    detail = _unknown(client.post("/v1/evaluate", json=cases, headers=WS), "ouputs", "outputs")
    assert detail["loc"] == ["body", "cases", 1, "ouputs"]
    entry = {"host": "api.example.com:443", "header": {"X": "y"}}
    networked = {"language": "python", "code": CODE, "network": [entry]}
    response = client.post("/v1/evaluate", json=networked, headers=WS)
    details = [d for d in response.json()["error"]["details"] if d["type"] == "extra_forbidden"]
    assert details and details[0]["did_you_mean"] == "headers", response.text


def test_nothing_close_still_lists_what_is_accepted(pair: dict[str, Any]) -> None:
    body = {"name": "x", "language": "python", "code": CODE, "zzzz": 1}
    detail = _unknown(pair["app"].post("/v1/evaluators", json=body, headers=WS), "zzzz", None)
    assert detail["accepted"][:3] == ["language", "code", "packages"]
    assert "did you mean" not in detail["msg"]
    body = {"name": "x", "language": "python", "code": CODE, "Description": "d"}
    _unknown(pair["app"].post("/v1/evaluators", json=body, headers=WS), "Description", "description")


def test_every_body_route_refuses_an_unknown_field(pair: dict[str, Any]) -> None:
    client: TestClient = pair["app"]
    ev = pair["ids"][1]
    ws = client.post("/v1/workspaces", json={"name": "strict"}, headers=OP).json()["id"]
    rule = client.post("/v1/online-rules", json={"evaluator_id": ev}, headers=WS).json()["id"]
    definition = {"language": "python", "code": CODE}
    calls: list[tuple[str, str, dict[str, Any], dict[str, str], str, str | None]] = [
        ("POST", "/v1/evaluators", {**definition, "name": "n", "secret": []}, WS, "secret", "secrets"),
        ("PUT", f"/v1/evaluators/{ev}", {**definition, "name": "n", "packagse": {}}, WS, "packagse", "packages"),
        ("PATCH", f"/v1/evaluators/{ev}", {"nmae": "n"}, WS, "nmae", "name"),
        ("PATCH", f"/v1/evaluators/{ev}", {"settings": {"timout_s": 3}}, WS, "timout_s", "timeout_s"),
        ("POST", f"/v1/evaluators/{ev}/migrate", {"case": [{}]}, WS, "case", "cases"),
        ("POST", "/v1/inspect", {**definition, "langauge": "python"}, WS, "langauge", "language"),
        ("POST", "/v1/migrate", {**definition, "setting": {}}, WS, "setting", "settings"),
        ("POST", "/v1/jobs", {"evaluator_id": ev, "rows": [{}], "parallel": 2}, WS, "parallel", "parallelism"),
        (
            "POST",
            "/v1/jobs",
            {"evaluator_id": ev, "rows": [{}], "field_mapping": {"output": "a"}},
            WS,
            "output",
            "outputs",
        ),
        ("POST", "/v1/online-rules", {"evaluator_id": ev, "sample_rate": 0.5}, WS, "sample_rate", "sampling_rate"),
        ("PATCH", f"/v1/online-rules/{rule}", {"enable": False}, WS, "enable", "enabled"),
        ("POST", "/v1/runtimes", {"language": "python", "packages": {"six": "1.16.0"}, "pin": 1}, OP, "pin", None),
        ("PUT", "/v1/secrets/TOKEN", {"values": "abc"}, WS, "values", "value"),
        ("POST", "/v1/workspaces", {"name": "w", "names": "x"}, OP, "names", "name"),
        ("PATCH", f"/v1/workspaces/{ws}", {"network": []}, OP, "network", "network_allow"),
        ("POST", f"/v1/workspaces/{ws}/keys", {"nam": "ci"}, OP, "nam", "name"),
    ]
    for method, path, body, headers, field, guess in calls:
        response = client.request(method, path, json=body, headers=headers)
        _unknown(response, field, guess)
    assert client.get("/healthz").status_code == 200
    # nothing was made by the refused calls
    names = [e["name"] for e in client.get("/v1/evaluators", headers=WS).json()["data"]]
    assert names == ["exact"]
    revisions = client.get(f"/v1/evaluators/{ev}/revisions", headers=WS).json()["data"]
    assert [r["revision"] for r in revisions] == [1]  # no refused PUT or PATCH made a revision
