"""The names the service answers to (``api/hosts.py``): a page that rebinds its own name to 127.0.0.1
(DNS rebinding) sends its own name as ``Host`` and is answered 421 on every route, the fast path and the
web page included; a page of another site posting to the service (``Origin``) is answered 403."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.api.middleware.hosts import host_of
from tests.support.metrics import sample
from tests.support.service import make_settings, serving

CODE = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"
REBOUND = "attacker.example:8000"  # what a browser sends after the page's name resolved to 127.0.0.1


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """A service with the default names only (the session's "testserver" taken away): open, no keys."""
    settings = make_settings(tmp_path_factory.mktemp("hosts"), backend="process", allowed_hosts=[])
    with TestClient(create_app(settings), base_url="http://localhost:8000") as client:
        yield client


def _routes(client: TestClient) -> list[tuple[str, str, dict[str, object] | None]]:
    ev = client.post("/v1/evaluators", json={"name": "h", "language": "python", "code": CODE}).json()
    return [
        ("POST", "/v1/evaluate", {"language": "python", "code": CODE}),  # the fast path
        ("POST", f"/v1/evaluators/{ev['id']}/evaluate", {"inputs": {}}),  # the fast path
        ("GET", "/v1/jobs/job_missing", None),  # the fast path's GET
        ("GET", f"/v1/evaluators/{ev['id']}", None),  # reading code
        ("GET", "/v1/evaluators", None),
        ("GET", "/v1/secrets", None),
        ("GET", "/", None),  # the web page
        ("GET", "/healthz", None),
        ("GET", "/metrics", None),
        ("GET", "/openapi.json", None),
        ("GET", "/docs", None),
    ]


def _evaluate_200s(service: TestClient) -> float:
    """How many ``POST /v1/evaluate`` the service answered 200 so far (its request histogram's count)."""
    labels = {"http_route": "/v1/evaluate", "http_response_status_code": "200"}
    return sample(service.get("/metrics").text, "http_server_request_duration_seconds_count", **labels)


def test_a_rebound_host_is_answered_421_on_every_route(service: TestClient) -> None:
    answered = _evaluate_200s(service)  # the module's other tests (in any order) may have evaluated already
    for method, path, body in _routes(service):
        answer = service.request(method, path, json=body, headers={"Host": REBOUND})
        assert answer.status_code == 421, (method, path, answer.status_code)
        error = answer.json()["error"]
        assert error["type"] == "HostNotAllowed" and "EVALUATOR_HOST_ALLOWED_HOSTS" in error["message"]
        assert "attacker.example" in error["message"]
    # nothing ran: no evaluate route answered 200 meanwhile; the one below is counted (the count is the right one)
    assert _evaluate_200s(service) == answered
    assert service.post("/v1/evaluate", json={"language": "python", "code": CODE}).json()["score"] == 1.0
    assert _evaluate_200s(service) == answered + 1


@pytest.mark.parametrize("host", ["localhost:8000", "localhost", "127.0.0.1:8000", "[::1]:8000", "LOCALHOST."])
def test_the_loopback_names_are_answered(service: TestClient, host: str) -> None:
    answer = service.post("/v1/evaluate", json={"language": "python", "code": CODE}, headers={"Host": host})
    assert answer.status_code == 200 and answer.json()["score"] == 1.0
    assert service.get("/", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize("host", ["testserver", "127.0.0.1.attacker.example", "localhost.attacker.example", "[::2]"])
def test_names_that_only_look_local_are_refused(service: TestClient, host: str) -> None:
    assert service.get("/v1/evaluators", headers={"Host": host}).status_code == 421


def test_a_page_of_another_site_cannot_post_even_with_the_right_host(service: TestClient) -> None:
    """A form post (multipart, no preflight) from a page elsewhere: Host is localhost, Origin names the page."""
    files = {"file": ("rows.jsonl", b'{"a": 1}\n', "application/x-ndjson")}
    for origin in ("http://attacker.example", "null", "http://localhost.attacker.example:8000"):
        answer = service.post("/v1/datasets", files=files, headers={"Origin": origin})
        assert answer.status_code == 403, origin
        assert answer.json()["error"]["type"] == "OriginNotAllowed"
    same = service.post(
        "/v1/evaluate", json={"language": "python", "code": CODE}, headers={"Origin": "http://localhost:8000"}
    )
    assert same.status_code == 200
    assert service.post("/v1/datasets", files=files, headers={"Origin": "http://127.0.0.1:8000"}).status_code == 201


def test_keys_do_not_turn_the_check_off_and_allowed_hosts_adds_names(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path, backend="process", api_keys=["k"], allowed_hosts=["evals.example.com", "*.corp.example"]
    )
    key = {"Authorization": "Bearer k"}
    body = {"language": "python", "code": CODE}
    with TestClient(create_app(settings), base_url="http://localhost") as client:
        assert client.post("/v1/evaluate", json=body, headers={**key, "Host": REBOUND}).status_code == 421
        for host in ("evals.example.com", "EVALS.example.com:443", "a.corp.example", "localhost"):
            assert client.post("/v1/evaluate", json=body, headers={**key, "Host": host}).status_code == 200, host
        for host in ("corp.example", "evals.example.com.attacker.example"):
            assert client.get("/healthz", headers={"Host": host}).status_code == 421, host
    with TestClient(create_app(make_settings(tmp_path / "any", backend="process", allowed_hosts=["*"]))) as client:
        assert client.get("/healthz", headers={"Host": REBOUND}).status_code == 200


def test_the_real_server_checks_host_on_the_fast_path_and_answers_its_bound_address(tmp_path: Path) -> None:
    with serving(tmp_path, backend="process", env={"EVALUATOR_HOST_ALLOWED_HOSTS": ""}) as (client, _proc):
        body = {"language": "python", "code": CODE}
        refused = client.post("/v1/evaluate", json=body, headers={"Host": REBOUND})
        assert refused.status_code == 421 and refused.json()["error"]["type"] == "HostNotAllowed"
        assert client.get("/", headers={"Host": REBOUND}).status_code == 421
        assert client.post("/v1/evaluate", json=body).json()["score"] == 1.0  # Host: 127.0.0.1:<port>
        assert client.get("/healthz", headers={"Host": "localhost"}).status_code == 200


def test_host_of_reads_names_ports_and_brackets() -> None:
    assert host_of("Example.COM.:8000") == "example.com"
    assert host_of("[::1]:8000") == "::1" and host_of("[::1]") == "::1" and host_of("::1") == "::1"
    assert host_of("127.0.0.1") == "127.0.0.1" and host_of("localhost:") == "localhost:"
