"""Every error answer is the JSON envelope, even for a defect of ours."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.api.deps import get_services
from tests.support.service import make_settings


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


def test_malformed_json_names_line_column_and_shows_the_spot(client: TestClient) -> None:
    """Regression: a body that is not JSON answered "97: JSON decode error"."""
    body = '{"language": "python", "code": "x",\n "inputs": {"a": 1,}}'
    answer = client.post("/v1/evaluate", content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert error["type"] == "ValidationError" and (error["line"], error["column"]) == (2, 20)
    assert error["message"] == (
        "the body is not valid JSON: Expecting property name enclosed in double quotes at line 2, column 20"
    )
    assert error["excerpt"] == ' "inputs": {"a": 1,}}\n                   ^'
    long_line = '{"language": "python", "code": "' + "y" * 100 + '" "x": 1}'
    error = client.post("/v1/evaluators", content=long_line, headers={"content-type": "application/json"}).json()[
        "error"
    ]
    assert error["line"] == 1 and error["excerpt"].startswith("…") and error["excerpt"].endswith("^")
    excerpt, caret = error["excerpt"].split("\n")
    assert excerpt[len(caret) - 1] == '"'  # the caret is under the character the decoder stopped at


def test_openapi_documents_the_error_bodies_the_service_really_answers(tmp_path: Path) -> None:
    """Regression: 422 was documented as FastAPI's {"detail": …} and 401/404/413/503 not at all."""
    from evaluator_host.errors import ErrorBody

    app = create_app(make_settings(tmp_path, backend="process", api_keys=["k"], max_body_bytes=4096))
    with TestClient(app) as client:
        spec = client.get("/openapi.json").json()
        for path, methods in spec["paths"].items():
            if not path.startswith("/v1"):
                continue
            for method, operation in methods.items():
                for code in ("401", "404", "413", "422", "503"):
                    schema = operation["responses"][code]["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (method, path, code)
        assert "HTTPValidationError" not in spec["components"]["schemas"]
        auth = {"authorization": "Bearer k"}
        answers = {
            401: client.get("/v1/jobs"),
            404: client.get("/v1/jobs/job_nope", headers=auth),
            413: client.post("/v1/evaluate", content=b"{" + b" " * 5000 + b"}", headers=auth),
            422: client.post("/v1/evaluate", json={"language": "cobol", "code": ""}, headers=auth),
        }
        for status, answer in answers.items():
            assert answer.status_code == status
            ErrorBody.model_validate(answer.json())  # the documented shape, for real


def test_without_a_key_every_v1_request_is_401_before_its_body_is_read(tmp_path: Path) -> None:
    """Regression (found by the schema fuzzer): a malformed body without a key answered 422, not 401."""
    app = create_app(make_settings(tmp_path, backend="process", api_keys=["k"], max_body_bytes=4096))
    with TestClient(app) as client:
        for body in (b"\x00", b"{" + b" " * 5000 + b"}", b'{"language": "python"}'):
            answer = client.post("/v1/evaluate", content=body, headers={"content-type": "application/json"})
            assert answer.status_code == 401, answer.text
            assert answer.headers["www-authenticate"] == "Bearer"
            assert answer.json()["error"]["type"] == "Unauthorized"
        assert client.get("/healthz").status_code == 200  # outside /v1: open


def test_a_json_body_that_is_not_utf8_is_a_422_naming_the_byte(client: TestClient) -> None:
    """Regression (found by the schema fuzzer): FastAPI's bare 400 "There was an error parsing the body"."""
    answer = client.post("/v1/evaluators", content=b'{"name":\n "p\xff"}', headers={"content-type": "application/json"})
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert error["type"] == "ValidationError" and (error["line"], error["column"]) == (2, 4)
    assert "0xff" in error["message"]


def test_a_revision_past_the_databases_integers_is_a_422_not_a_500(client: TestClient) -> None:
    """Regression (found by the schema fuzzer): OverflowError from SQLite, answered 500."""
    code = "def evaluate(inputs, outputs, trace):\n    return 1\n"
    ev = client.post("/v1/evaluators", json={"name": "big", "language": "python", "code": code}).json()
    for path, body in (
        (f"/v1/evaluators/{ev['id']}/evaluate", {"revision": 2**63}),
        ("/v1/jobs", {"evaluator_id": ev["id"], "revision": 2**40, "rows": [{"a": 1}]}),
    ):
        answer = client.post(path, json=body)
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["type"] == "ValidationError"
