"""POST /v1/evaluate: the contract of docs/api.md for one-off evaluation."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.support.service import evaluate

EXACT = "def evaluate(inputs, outputs, trace):\n    return outputs == inputs.get('correct_answer')\n"


def test_result_has_every_contract_field(client: TestClient) -> None:
    result = evaluate(client, EXACT, inputs={"correct_answer": "Paris"}, outputs="Paris")
    for field in (
        "status",
        "score",
        "passed",
        "outputs",
        "details",
        "error",
        "warnings",
        "stdout",
        "stderr",
        "truncated",
        "duration_ms",
        "interface",
        "runtime",
    ):
        assert field in result
    assert result["runtime"]["language"] == "python" and result["runtime"]["id"].startswith("python-")


def test_cases_answer_results_and_aggregate(client: TestClient) -> None:
    cases = [{"inputs": {"correct_answer": "a"}, "outputs": o} for o in ("a", "b", "a", "a")]
    cases.append({"inputs": {}, "outputs": "z"})
    response = client.post(
        "/v1/evaluate", json={"language": "python", "code": EXACT, "cases": cases, "settings": {"threshold": 0.5}}
    )
    assert response.status_code == 200
    body = response.json()
    assert [r["score"] for r in body["results"]] == [1.0, 0.0, 1.0, 1.0, 0.0]
    agg = body["aggregate"]
    assert agg["count"] == 5 and agg["errors"] == 0
    assert agg["score"]["mean"] == 0.6 and agg["score"]["count"] == 5
    assert agg["pass_rate"] == 0.6


def test_cases_isolate_a_timeout_to_its_row(client: TestClient) -> None:
    code = "def evaluate(inputs, outputs, trace):\n    while outputs == 'hang':\n        pass\n    return 1\n"
    cases = [{"outputs": "ok"}, {"outputs": "hang"}, {"outputs": "ok"}]
    body = client.post(
        "/v1/evaluate", json={"language": "python", "code": code, "cases": cases, "settings": {"timeout_s": 0.5}}
    ).json()
    assert [r["status"] for r in body["results"]] == ["ok", "timeout", "ok"]
    assert body["aggregate"]["errors"] == 1 and body["aggregate"]["score"]["nan_count"] == 1


def test_legacy_correct_answer_key(client: TestClient) -> None:
    code = "def evaluate(app_params, inputs, output, correct_answer):\n    return float(output == correct_answer)\n"
    result = evaluate(client, code, inputs={"expected": "x"}, outputs="x", settings={"correct_answer_key": "expected"})
    assert result["score"] == 1.0 and result["interface"] == "legacy"
    missing = evaluate(client, code, inputs={}, outputs=None)
    assert missing["score"] == 1.0  # correct_answer is None when the key is absent


def test_main_binding_and_missing_parameter(client: TestClient) -> None:
    code = "def main(target, completion, trace, flag=False):\n    return {'score': float(target == completion)}\n"
    assert evaluate(client, code, inputs={"target": "y"}, outputs="y")["score"] == 1.0
    bad = evaluate(client, "def main(nope):\n    return {'score': 1}\n", inputs={"target": "y"})
    assert bad["status"] == "error"
    assert "nope" in bad["error"]["message"] and "target" in bad["error"]["message"]


def test_main_kwargs_receive_all_variables(client: TestClient) -> None:
    code = "def main(**v):\n    return {'score': 1, 'keys': sorted(v)}\n"
    result = evaluate(client, code, inputs={"q": 1})
    assert result["details"]["keys"] == ["completion", "inputs", "output", "outputs", "q", "trace"]


def test_numpy_like_values_and_named_outputs(client: TestClient) -> None:
    code = (
        "from decimal import Decimal\n\ndef evaluate(inputs, outputs, trace):\n"
        "    return {'a': True, 'b': 0.5, 'c': Decimal(2)}\n"
    )
    result = evaluate(client, code)
    assert result["outputs"] == {"a": 1.0, "b": 0.5, "c": 2.0} and result["score"] is None


def test_error_line_and_user_only_traceback(client: TestClient) -> None:
    code = "def helper(x):\n    return x['k']\n\ndef evaluate(inputs, outputs, trace):\n    return helper({})\n"
    result = evaluate(client, code)
    assert result["error"]["line"] == 2
    assert "harness" not in result["error"]["traceback"]
    assert 'File "evaluator.py", line 5' in result["error"]["traceback"]


def test_definition_errors_are_422_with_location(client: TestClient) -> None:
    response = client.post("/v1/evaluate", json={"language": "python", "code": "def evaluate(a, b, c):\n  return (\n"})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["type"] == "SyntaxError" and error["line"] is not None
    both = "def evaluate(a, b, c):\n    return 1\n\ndef main(x):\n    return 1\n"
    response = client.post("/v1/evaluate", json={"language": "python", "code": both})
    assert response.status_code == 422 and "evaluate(inputs, outputs, trace)" in response.json()["error"]["message"]


def test_bad_pins_and_injection_are_422(client: TestClient) -> None:
    for packages in (
        {"six": "latest"},
        {"six; rm -rf /": "1.0"},
        {"six": "1.0 --index-url http://evil"},
        ["six>=1"],
        {"git+https://x/y": "1"},
        {"./local": "1.0"},
    ):
        response = client.post("/v1/evaluate", json={"language": "python", "code": EXACT, "packages": packages})
        assert response.status_code == 422, packages
        assert response.json()["error"]["type"] == "PackageSpecError"


def test_settings_bounds_are_422(client: TestClient) -> None:
    for settings in ({"timeout_s": 0}, {"timeout_s": 121}, {"memory_mb": 16}, {"memory_mb": 5000}, {"bogus": 1}):
        response = client.post("/v1/evaluate", json={"language": "python", "code": EXACT, "settings": settings})
        assert response.status_code == 422, settings


def test_code_size_limit_is_422(client: TestClient) -> None:
    code = EXACT + "#" * (256 * 1024)
    response = client.post("/v1/evaluate", json={"language": "python", "code": code})
    assert response.status_code == 422 and response.json()["error"]["type"] == "LimitError"


def test_body_limit_is_413(client: TestClient) -> None:
    body = b'{"language": "python", "code": "' + b"x" * (17 * 1024 * 1024) + b'"}'
    response = client.post("/v1/evaluate", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert client.get("/healthz").status_code == 200


def test_healthz_reports_backend_and_isolation(client: TestClient) -> None:
    health = client.get("/healthz").json()
    assert health["status"] == "ok" and health["backend"] in ("process", "docker")
    assert isinstance(health["isolation"], str) and health["isolation"]


def test_openapi_is_served(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/v1/evaluate", "/v1/evaluators", "/v1/evaluators/{evaluator_id}/evaluate"} <= set(paths)
    assert client.get("/docs").status_code == 200


def test_the_capability_report_comes_back_from_evaluate_and_is_stored_on_each_revision(client: TestClient) -> None:
    code = "import socket\n\ndef evaluate(inputs, outputs, trace):\n    return 1.0\n"
    answer = client.post("/v1/evaluate", json={"language": "python", "code": code}).json()
    assert answer["capabilities"]["network"] == [{"line": 1, "detail": "import socket"}]
    batch = client.post("/v1/evaluate", json={"language": "python", "code": code, "cases": [{}, {}]}).json()
    assert batch["capabilities"]["network"][0]["line"] == 1
    created = client.post("/v1/evaluators", json={"name": "caps", "language": "python", "code": code}).json()
    assert created["capabilities"]["network"] == [{"line": 1, "detail": "import socket"}]
    plain = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"
    updated = client.put(f"/v1/evaluators/{created['id']}", json={"name": "caps", "language": "python", "code": plain})
    revisions = client.get(f"/v1/evaluators/{created['id']}/revisions").json()["data"]
    assert [r["capabilities"]["network"] for r in revisions] == [[{"line": 1, "detail": "import socket"}], []]
    assert updated.json()["capabilities"]["network"] == []


def test_fields_the_interface_ignores_are_warned_about(client: TestClient) -> None:
    """Regression: app_params sent to a `main` evaluator was dropped without a word (main got None)."""
    main = "def main(app_params=None):\n    return {'score': 1.0 if app_params else 0.5}\n"
    result = evaluate(client, main, app_params={"temperature": 0.2})
    assert result["score"] == 0.5  # the interface still never passes it on ...
    assert any(
        w.startswith("app_params is ignored by the 'main' interface") for w in result["warnings"]
    )  # ... it says so
    assert not evaluate(client, main)["warnings"]
    legacy = "def evaluate(app_params, inputs, output, correct_answer):\n    return 1.0\n"
    assert not evaluate(client, legacy, app_params={"t": 1})["warnings"]  # legacy receives it
    traced = evaluate(client, legacy, trace={"spans": []})
    assert any(w.startswith("trace is ignored by the 'legacy' interface") for w in traced["warnings"])
    batch = client.post(
        "/v1/evaluate",
        json={"language": "python", "code": EXACT, "cases": [{"outputs": "a"}, {"outputs": "a", "app_params": {}}]},
    ).json()
    assert [len(r["warnings"]) for r in batch["results"]] == [0, 1]  # per case, and {} is a value


def test_a_network_call_says_evaluators_have_no_network(client: TestClient) -> None:
    """Regression: a network call failed with only 'Temporary failure in name resolution'."""
    code = (
        "import urllib.request\n\ndef evaluate(inputs, outputs, trace):\n"
        "    return urllib.request.urlopen('http://example.com', timeout=2).status == 200\n"
    )
    result = evaluate(client, code)
    assert result["status"] == "error"
    assert any(w.startswith("evaluators run without network access") for w in result["warnings"]), result
    js = "export async function evaluate(i, o, t) { await fetch('http://example.com'); return 1 }\n"
    result = evaluate(client, js, language="javascript")
    assert result["status"] == "error" and any("without network access" in w for w in result["warnings"]), result
    plain = evaluate(client, "def evaluate(inputs, outputs, trace):\n    raise ValueError('no')\n")
    assert plain["warnings"] == []
