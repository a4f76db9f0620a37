"""The OpenAPI document and /docs: every schema has examples that validate; the docs page works offline."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator

from evaluator_host.api.app import create_app
from tests.support.service import make_settings


@pytest.fixture(scope="module")
def app_client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    settings = make_settings(tmp_path_factory.mktemp("openapi"), backend="process")
    with TestClient(create_app(settings)) as client:
        yield client


def test_every_public_schema_has_an_example_that_validates_against_it(app_client: TestClient) -> None:
    spec = app_client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    missing = [name for name, schema in schemas.items() if not schema.get("examples")]
    assert missing == [], f"schemas without an example: {missing}"
    for name, schema in schemas.items():
        validator = Draft202012Validator({"$ref": f"#/components/schemas/{name}", "components": spec["components"]})
        for example in schema["examples"]:
            problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(example)]
            assert problems == [], f"{name}'s example does not validate: {problems}"


def test_a_request_example_is_accepted_by_the_service(app_client: TestClient) -> None:
    spec = app_client.get("/openapi.json").json()
    example = spec["components"]["schemas"]["EvaluateRequest"]["examples"][0]
    answer = app_client.post("/v1/evaluate", json=example)
    assert answer.status_code == 200 and answer.json()["score"] == 1.0


def test_docs_page_and_its_assets_are_served_here_and_name_no_other_host(app_client: TestClient) -> None:
    page = app_client.get("/docs")
    assert page.status_code == 200 and "swagger-ui" in page.text
    assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", page.text, re.I), page.text
    references = re.findall(r"""(?:src|href)=["']([^"']+)["']|url: ?['"]([^'"]+)['"]""", page.text)
    paths = [a or b for a, b in references]
    assert "/openapi.json" in paths and any(p.endswith("swagger-ui-bundle.js") for p in paths)
    for path in paths:
        assert path.startswith("/"), path
        assert app_client.get(path).status_code == 200, path
    assert '"validatorUrl": null' in page.text  # no badge fetched from validator.swagger.io
    assert app_client.get("/redoc").status_code == 404  # not offered: no offline build


def test_docs_assets_come_from_the_installed_package(tmp_path: Path) -> None:
    from swagger_ui_bundle import swagger_ui_path

    assert (Path(swagger_ui_path) / "swagger-ui-bundle.js").stat().st_size > 100_000
    assert Path(swagger_ui_path).name.startswith("swagger-ui-5.")  # Swagger UI 5 reads OpenAPI 3.1


def test_409_is_documented_where_it_is_answered_and_the_real_answer_has_the_documented_body(
    app_client: TestClient,
) -> None:
    from evaluator_host.errors import ErrorBody

    spec = app_client.get("/openapi.json").json()
    ref = {"$ref": "#/components/schemas/ErrorBody"}
    for path, method in [
        ("/v1/evaluators", "post"),
        ("/v1/jobs", "post"),
        ("/v1/datasets/{dataset_id}", "delete"),
        ("/v1/evaluators/{evaluator_id}/migrate", "post"),
    ]:
        assert spec["paths"][path][method]["responses"]["409"]["content"]["application/json"]["schema"] == ref
    code = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"
    evaluator = app_client.post("/v1/evaluators", json={"name": "e", "language": "python", "code": code}).json()
    dataset = app_client.post(
        "/v1/datasets", content=b'{"outputs": 1}\n', headers={"content-type": "application/jsonl"}
    )
    job = app_client.post("/v1/jobs", json={"evaluator_id": evaluator["id"], "dataset_id": dataset.json()["id"]})
    assert job.status_code == 202
    conflict = app_client.delete(f"/v1/datasets/{dataset.json()['id']}")
    assert conflict.status_code == 409
    assert ErrorBody.model_validate(conflict.json()).error.type == "Conflict"
