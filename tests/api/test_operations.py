"""Operations: Prometheus metrics, request ids, JSON log lines."""

from __future__ import annotations

import json
import logging
import os
import re

import pytest
from fastapi.testclient import TestClient

from evaluator_host.observability.logs import JsonFormatter
from tests.support.metrics import sample
from tests.support.service import assert_healthy

CODE = "def evaluate(inputs, outputs, trace):\n    return outputs == inputs['correct_answer']\n"
CASE = {"inputs": {"correct_answer": "4"}, "outputs": "4"}


@pytest.fixture(scope="module")
def client(process_client: TestClient) -> TestClient:
    """This module's own service (process backend), not the session's per-backend one."""
    return process_client


def test_metrics_count_evaluations_requests_by_route_template_and_workers(client: TestClient) -> None:
    by_id = "/v1/evaluators/{evaluator_id}/evaluate"
    # the module's service is shared: its other tests (in any order) count too, so these are counted from here
    # (one series per route and status: the inline call below is a 422, other tests' may be 200s)
    answered = {by_id: "200", "/v1/evaluate": "422"}

    def count(text: str, route: str) -> float:
        labels = {"http_route": route, "http_response_status_code": answered[route]}
        return sample(text, "http_server_request_duration_seconds_count", **labels)

    before = client.get("/metrics").text
    counted = {route: count(before, route) for route in answered}
    ev = client.post("/v1/evaluators", json={"name": "m", "language": "python", "code": CODE}).json()
    for _ in range(3):
        assert client.post(f"/v1/evaluators/{ev['id']}/evaluate", json=CASE).json()["status"] == "ok"
    assert client.post("/v1/evaluate", json={"language": "python", "code": "x = (", **CASE}).status_code == 422
    assert client.get("/v1/no/such/path").status_code == 404
    answer = client.get("/metrics")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    text = answer.text
    assert sample(text, "evaluator_host_evaluations_total", status="ok", language="python", backend="process") >= 3
    assert count(text, by_id) - counted[by_id] == 3
    assert count(text, "/v1/evaluate") - counted["/v1/evaluate"] == 1
    assert sample(text, "http_server_request_duration_seconds_count", http_route="/v1/evaluators") >= 1
    assert sample(text, "http_server_request_duration_seconds_count", http_route="other") >= 1
    assert "/v1/no/such/path" not in text and ev["id"] not in text  # no path or id is ever a label
    assert 'le="0.0001"' in text  # warm calls are not all in one bucket
    assert sample(text, "evaluator_host_worker_starts_total", backend="process") >= 1
    assert sample(text, "evaluator_host_pool_workers", state="idle") >= 1


def _method_labels(text: str) -> set[str]:
    return set(re.findall(r'http_server_request_duration_seconds_count\{[^}]*http_request_method="([^"]*)"', text))


def test_invented_methods_are_counted_as_other_and_never_grow_the_label_set(client: TestClient) -> None:
    assert client.request("FOOBAR", "/healthz").status_code == 405
    assert client.request("FOOBAR", "/v1/nothing-here").status_code in (404, 405)
    client.get("/metrics")  # its own series exists from now on
    first = client.get("/metrics").text
    assert "FOOBAR" not in first
    assert sample(first, "http_server_request_duration_seconds_count", http_request_method="_OTHER") >= 1
    series = first.count("http_server_request_duration_seconds_count{")
    for _ in range(3):  # random garbage methods on known and unknown paths: no new series
        garbage = "X" + os.urandom(8).hex().upper()
        assert client.request(garbage, "/healthz").status_code == 405
        assert client.request(garbage, f"/v1/{garbage}").status_code in (404, 405)
    after = client.get("/metrics").text
    assert after.count("http_server_request_duration_seconds_count{") == series
    assert _method_labels(after) <= {
        "GET",
        "HEAD",
        "POST",
        "PUT",
        "DELETE",
        "CONNECT",
        "OPTIONS",
        "TRACE",
        "PATCH",
        "_OTHER",
    }
    others = re.findall(r'http_server_request_duration_seconds_count\{[^}]*method="_OTHER"[^}]*\} (\S+)', after)
    assert sum(map(float, others)) == 8  # every one of them counted, under _OTHER
    assert_healthy(client)


def test_a_request_id_is_echoed_or_made(client: TestClient) -> None:
    given = client.get("/healthz", headers={"X-Request-Id": "abc-123.x_y"})
    assert given.headers["x-request-id"] == "abc-123.x_y"
    made = client.post("/v1/evaluate", json={"language": "python", "code": CODE, **CASE})
    assert re.fullmatch(r"[0-9a-f]{16}", made.headers["x-request-id"])
    hostile = client.get("/healthz", headers={"X-Request-Id": "x" * 65})
    assert re.fullmatch(r"[0-9a-f]{16}", hostile.headers["x-request-id"])


def test_each_request_is_one_json_log_line_with_its_request_id(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="evaluator_host.access"):
        client.get("/healthz", headers={"X-Request-Id": "req-1"})
    (record,) = [r for r in caplog.records if r.name == "evaluator_host.access"]
    line = json.loads(JsonFormatter().format(record))
    assert line["msg"] == "request" and line["request_id"] == "req-1" and line["status"] == 200
    assert line["route"] == "/healthz" and line["method"] == "GET" and line["duration_ms"] >= 0
    assert line["level"] == "info" and line["ts"].endswith("+00:00")


def test_a_log_line_with_an_exception_stays_one_json_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("evaluator_host.x", logging.ERROR, __file__, 1, "failed", None, None)
        import sys

        record.exc_info = sys.exc_info()
    text = JsonFormatter().format(record)
    assert "\n" not in text and "ValueError: boom" in json.loads(text)["exc"]
