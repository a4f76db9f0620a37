"""Secrets: set by name, encrypted at rest, given only to evaluators that list them, redacted everywhere.

The last test greps every answer this module received, every log record, and every file of the
service's data dir (the database and its WAL included) for the values.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from tests.support.backends import BACKENDS
from tests.support.service import make_settings
from tests.support.wait import wait_until

SECRET = "sk-test-0123456789abcdefDEADBEEF"
OTHER = 'second-value-with-quote"and\\backslash'
ANSWERS: list[str] = []  # every response body of this module, grepped at the end


class Recording(TestClient):
    def request(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        response = super().request(*args, **kwargs)
        ANSWERS.append(response.text)
        return response


LEAKY_PY = """import os, sys
def evaluate(inputs, outputs, trace):
    value = os.environ["OPENAI_API_KEY"]
    print("stdout:", value)
    sys.stderr.write("stderr: " + value + "\\n")
    os.write(2, ("raw fd 2: " + value + "\\n").encode())
    if inputs.get("raise"):
        raise RuntimeError("failing with " + value)
    return {"score": float(len(value)), "label": value, "details": {"echo": value, value: [value]}}
"""
LEAKY_JS = """export function evaluate(inputs, outputs, trace) {
  const value = process.env.OPENAI_API_KEY
  console.log('stdout:', value)
  console.error('stderr:', value)
  return { score: value.length, label: value, details: { echo: value } }
}
"""
PEEK = (
    "import os\ndef evaluate(inputs, outputs, trace):\n"
    "    return {'score': 1.0, 'label': str(os.environ.get('OPENAI_API_KEY'))}\n"
)


@pytest.fixture(scope="module", params=BACKENDS)
def client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_settings(tmp_path_factory.mktemp(f"secrets-{request.param}"), backend=request.param)
    with Recording(create_app(settings)) as test_client:
        assert test_client.put("/v1/secrets/OPENAI_API_KEY", json={"value": SECRET}).status_code == 204
        yield test_client
    # every answer of the module's tests, whichever order they ran in (pytest-randomly shuffles them), checked once
    # they are all in: no value in any of them, and enough of them that the check compared something
    for value in (SECRET, OTHER):
        assert all(value not in answer for answer in ANSWERS)
    assert len(ANSWERS) > 20


def _evaluator(client: TestClient, code: str, language: str = "python", **fields: Any) -> str:
    body = {"name": "leaky", "language": language, "code": code, **fields}
    response = client.post("/v1/evaluators", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_secrets_are_listed_by_name_only(client: TestClient) -> None:
    listed = client.get("/v1/secrets").json()
    assert [s["name"] for s in listed["data"]] == ["OPENAI_API_KEY"]
    assert set(listed["data"][0]) == {"name", "created_at", "updated_at"}


def test_a_listed_secret_reaches_the_code_and_is_redacted_from_every_field(client: TestClient) -> None:
    ev = _evaluator(client, LEAKY_PY, secrets=["OPENAI_API_KEY"])
    assert client.get(f"/v1/evaluators/{ev}").json()["secrets"] == ["OPENAI_API_KEY"]
    result = client.post(f"/v1/evaluators/{ev}/evaluate", json={"outputs": 1}).json()
    mark = "[secret OPENAI_API_KEY]"
    assert result["status"] == "ok" and result["score"] == float(len(SECRET))  # the value arrived whole
    assert result["label"] == mark
    assert result["details"]["details"] == {"echo": mark, mark: [mark]}
    assert result["stdout"] == f"stdout: {mark}\n"
    assert f"stderr: {mark}" in result["stderr"] and f"raw fd 2: {mark}" in result["stderr"]
    failed = client.post(f"/v1/evaluators/{ev}/evaluate", json={"inputs": {"raise": True}}).json()
    assert failed["status"] == "error"
    assert failed["error"]["message"] == f"failing with {mark}"
    assert mark in failed["error"]["traceback"] and SECRET not in str(failed)


def test_javascript_gets_and_hides_it_too(client: TestClient) -> None:
    ev = _evaluator(client, LEAKY_JS, "javascript", secrets=["OPENAI_API_KEY"])
    result = client.post(f"/v1/evaluators/{ev}/evaluate", json={"outputs": 1}).json()
    assert result["score"] == float(len(SECRET)) and result["label"] == "[secret OPENAI_API_KEY]"
    assert SECRET not in str(result)


def test_an_evaluator_that_does_not_list_a_secret_cannot_read_it(client: TestClient) -> None:
    ev = _evaluator(client, PEEK)
    assert client.post(f"/v1/evaluators/{ev}/evaluate", json={"outputs": 1}).json()["label"] == "None"
    inline = client.post("/v1/evaluate", json={"language": "python", "code": PEEK, "outputs": 1}).json()
    assert inline["label"] == "None"


def test_a_secret_that_is_not_set_is_a_clear_422(client: TestClient) -> None:
    response = client.post(
        "/v1/evaluate", json={"language": "python", "code": PEEK, "secrets": ["NOT_SET"], "outputs": 1}
    )
    assert response.status_code == 422
    assert response.json()["error"]["type"] == "SecretError" and "NOT_SET" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("name", "value"), [("lower-case-dash", "valid-value"), ("PATH", "valid-value"), ("OK_NAME", "abc")]
)
def test_bad_names_and_too_short_values_are_refused(client: TestClient, name: str, value: str) -> None:
    response = client.put(f"/v1/secrets/{name}", json={"value": value})
    assert response.status_code == 422
    assert response.json()["error"]["type"] == "SecretError"


def test_a_changed_value_reaches_the_next_call_and_a_deleted_one_stops_it(client: TestClient) -> None:
    assert client.put("/v1/secrets/ROTATING", json={"value": "first-value"}).status_code == 204
    code = "import os\ndef evaluate(inputs, outputs, trace):\n    return float(len(os.environ['ROTATING']))\n"
    ev = _evaluator(client, code, secrets=["ROTATING"])
    assert client.post(f"/v1/evaluators/{ev}/evaluate", json={}).json()["score"] == len("first-value")
    assert client.put("/v1/secrets/ROTATING", json={"value": OTHER}).status_code == 204
    assert client.post(f"/v1/evaluators/{ev}/evaluate", json={}).json()["score"] == len(OTHER)
    assert client.delete("/v1/secrets/ROTATING").status_code == 204
    assert client.delete("/v1/secrets/ROTATING").status_code == 404
    gone = client.post(f"/v1/evaluators/{ev}/evaluate", json={})
    assert gone.status_code == 422 and gone.json()["error"]["type"] == "SecretError"


def test_escaped_forms_are_redacted(client: TestClient) -> None:
    assert client.put("/v1/secrets/QUOTED", json={"value": OTHER}).status_code == 204
    try:  # the module's service lists OPENAI_API_KEY alone to the listing test, whichever runs first
        code = (
            "import json, os\ndef evaluate(inputs, outputs, trace):\n"
            "    print(json.dumps(os.environ['QUOTED']))\n    return 1.0\n"
        )
        result = client.post(
            "/v1/evaluate", json={"language": "python", "code": code, "secrets": ["QUOTED"], "outputs": 1}
        ).json()
        assert result["stdout"] == '"[secret QUOTED]"\n'
    finally:
        assert client.delete("/v1/secrets/QUOTED").status_code == 204


def test_job_results_are_stored_redacted(client: TestClient) -> None:
    ev = _evaluator(client, LEAKY_PY, secrets=["OPENAI_API_KEY"])
    job = client.post("/v1/jobs", json={"evaluator_id": ev, "rows": [{"outputs": 1}, {"raise": True}]}).json()
    wait_until(lambda: client.get(f"/v1/jobs/{job['id']}").json()["status"] == "succeeded", 60, what="the job")
    for fmt in ("json", "ndjson", "csv"):
        text = client.get(f"/v1/jobs/{job['id']}/results", params={"format": fmt}).text
        assert "[secret OPENAI_API_KEY]" in text and SECRET not in text


def test_a_worker_that_dies_printing_the_secret_is_a_503_without_it(client: TestClient) -> None:
    code = (
        "import os\nos.write(2, os.environ['OPENAI_API_KEY'].encode())\nos._exit(3)\n"
        "def evaluate(i, o, t):\n    return 1\n"
    )
    response = client.post(
        "/v1/evaluate", json={"language": "python", "code": code, "secrets": ["OPENAI_API_KEY"], "outputs": 1}
    )
    assert response.status_code == 503, response.text
    assert "[secret OPENAI_API_KEY]" in response.text and SECRET not in response.text


def test_no_value_is_in_any_answer_log_line_or_file(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    answered = len(ANSWERS)
    with caplog.at_level(logging.DEBUG):
        ev = _evaluator(client, LEAKY_PY, secrets=["OPENAI_API_KEY"])
        client.post(f"/v1/evaluators/{ev}/evaluate", json={"cases": [{"outputs": 1}, {"inputs": {"raise": True}}]})
    logs = "\n".join(f"{r.getMessage()} {r.exc_text or ''} {r.__dict__}" for r in caplog.records)
    data_dir = Path(client.app.state.settings.data_dir)  # type: ignore[attr-defined]
    files = {p: p.read_bytes() for p in data_dir.rglob("*") if p.is_file() and p.name != "service.lock"}
    for value in (SECRET, OTHER):
        assert all(value not in answer for answer in ANSWERS)
        assert value not in logs
        assert not [p for p, content in files.items() if value.encode() in content]
    # this test's own answers are among those checked (the module's whole set is checked again at its end)
    assert len(ANSWERS) >= answered + 2 and any(p.name.startswith("evaluator-host.db") for p in files)


def test_values_survive_a_key_rotation(tmp_path: Path) -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    code = "import os\ndef evaluate(inputs, outputs, trace):\n    return float(len(os.environ['K']))\n"
    body = {"language": "python", "code": code, "secrets": ["K"], "outputs": 1}
    with TestClient(create_app(make_settings(tmp_path, backend="process", secrets_key=[old]))) as client:
        assert client.put("/v1/secrets/K", json={"value": SECRET}).status_code == 204
    # the new key first, the old one still listed: values are re-encrypted under the new key at start-up
    with TestClient(create_app(make_settings(tmp_path, backend="process", secrets_key=[new, old]))) as client:
        assert client.post("/v1/evaluate", json=body).json()["score"] == len(SECRET)
    with TestClient(create_app(make_settings(tmp_path, backend="process", secrets_key=[new]))) as client:
        assert client.post("/v1/evaluate", json=body).json()["score"] == len(SECRET)
