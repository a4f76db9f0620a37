"""``POST /v1/traces``: both encodings, gzip, the workspace of the key, assembly, duplicates, every bound.

Runs on SQLite and PostgreSQL (``database_url``). Assembly is driven by :meth:`Assembly.tick` with an
injected clock (the service's own loop is set far apart so it never interferes), so "ready only after
the quiet period" is checked without waiting or timing anything.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from sqlalchemy import DateTime, bindparam, text

from evaluator_host.api import create_app
from evaluator_host.online.levels.assembly import Assembly
from evaluator_host.services import Services
from evaluator_host.store.db import utcnow
from tests.support.backends import DATABASES
from tests.support.otlp_bodies import JSON, PROTOBUF, S, json_body, new_span_id, new_trace_id, protobuf_body
from tests.support.service import assert_healthy, make_settings

ADMIN = "admin-key-for-online-tests-0123456789"
LIMITS = {
    "online_max_body_bytes": 64 * 1024,
    "online_max_spans": 50,
    "online_max_attributes": 8,
    "online_max_attribute_bytes": 1024,
    "online_max_name_chars": 64,
    "online_quiet_period_s": 2.0,
    "online_settle_s": 2.0,  # the quiet period's own rule here (the fast path: tests/online/test_readiness.py)
    "online_trace_timeout_s": 300.0,
    "online_assembly_s": 3600.0,  # the service's own pass runs once at start; the tests tick by hand
}


@dataclass
class World:
    client: TestClient
    services: Services
    ws_a: str
    ws_b: str
    a: dict[str, str]  # headers with workspace A's key
    b: dict[str, str]

    def rows(self, sql: str, **params: Any) -> list[Any]:
        with self.services.store.engine.connect() as conn:
            return list(conn.execute(text(sql), params))

    def trace(self, trace_id: str) -> Any:
        found = self.rows("SELECT * FROM online_traces WHERE trace_id = :t", t=trace_id)
        return found[0] if found else None

    def post(self, body: bytes, headers: dict[str, str], key: dict[str, str] | None = None) -> Any:
        return self.client.post("/v1/traces", content=body, headers={**(key or self.a), **headers})


@contextmanager
def _world(tmp_path: Path, database_url: str, **overrides: Any) -> Iterator[World]:
    settings = make_settings(
        tmp_path / "data", backend="process", database_url=database_url, admin_key=ADMIN, **{**LIMITS, **overrides}
    )
    with TestClient(create_app(settings)) as client:
        op = {"Authorization": f"Bearer {ADMIN}"}
        keys = []
        ids = []
        for name in ("team-a", "team-b"):
            ws = client.post("/v1/workspaces", json={"name": name}, headers=op).json()
            key = client.post(f"/v1/workspaces/{ws['id']}/keys", json={"name": "otel"}, headers=op).json()
            ids.append(ws["id"])
            keys.append({"Authorization": f"Bearer {key['key']}"})
        yield World(client, client.app.state.services, ids[0], ids[1], keys[0], keys[1])  # type: ignore[attr-defined]


@pytest.fixture(scope="module", params=DATABASES)
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One service per database for the tests that read only what they sent (their own trace and span ids, a
    metric's presence); a test that counts the whole store or a metric's value takes a :func:`fresh_world`."""
    data = tmp_path_factory.mktemp("receiver")
    url = (
        request.getfixturevalue("postgres").database()
        if request.param == "postgres"
        else f"sqlite:///{data / 'test.db'}"
    )
    with _world(data, url) as made:
        yield made


@pytest.fixture
def fresh_world(tmp_path: Path, database_url: str) -> Iterator[World]:
    """A service of the test's own, its store and metrics empty."""
    with _world(tmp_path, database_url) as made:
        yield made


def _healthy(world: World) -> None:
    """The service answers and evaluates (with workspace A's key: keys are required here)."""
    world.client.headers.update(world.a)
    try:
        assert_healthy(world.client)
    finally:
        del world.client.headers["authorization"]


def _ok(response: Any, media: str = "application/x-protobuf") -> Any:
    assert response.status_code == 200, response.content
    assert response.headers["content-type"] == media
    if media == "application/json":
        return json.loads(response.content)
    return ExportTraceServiceResponse.FromString(response.content)


def test_spans_land_in_the_workspace_of_the_key(world: World) -> None:
    ta, tb = new_trace_id(), new_trace_id()
    _ok(world.post(protobuf_body([S(ta, new_span_id(), name="chat")]), PROTOBUF, world.a))
    _ok(world.post(json_body([S(tb, new_span_id(), name="chat")], service="other"), JSON, world.b), "application/json")
    assert world.rows("SELECT workspace_id FROM online_spans WHERE trace_id = :t", t=ta) == [(world.ws_a,)]
    assert world.rows("SELECT workspace_id, service_name FROM online_traces WHERE trace_id = :t", t=tb) == [
        (world.ws_b, "other")
    ]


def test_otlp_json_with_hex_ids_as_the_js_exporter_sends_it(world: World) -> None:
    trace_id, root, child = new_trace_id(), new_span_id(), new_span_id()
    attributes = {
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.usage.input_tokens": 42,
        "ratio": 0.5,
        "ok": True,
        "tags": ["a", "b"],
        "nested": {"k": 1, "deeper": {"x": "y"}},
    }
    spans = [S(trace_id, child, parent=root, name="llm", kind=3), S(trace_id, root, name="chat", kind=2,
             attributes=attributes, status_code=1)]  # fmt: skip
    answer = _ok(world.post(json_body(spans), JSON), "application/json")
    assert answer == {}  # nothing rejected: no partialSuccess
    stored = world.rows(
        "SELECT span_id, parent_span_id, name, body FROM online_spans WHERE trace_id = :t ORDER BY name", t=trace_id
    )
    assert [(r[0], r[1], r[2]) for r in stored] == [(root, None, "chat"), (child, root, "llm")]
    body = json.loads(stored[0][3])
    assert body["attributes"] == attributes
    assert body["kind"] == 2 and body["status_code"] == 1
    assert body["resource"] == {"service.name": "chat-api"} and body["scope"] == {"name": "tests", "version": "1.0"}
    trace = world.trace(trace_id)
    assert (trace.root_span_id, trace.root_name, trace.span_count, trace.state) == (root, "chat", 2, "open")


def test_json_bytes_are_base64_and_enums_may_be_names(world: World) -> None:
    trace_id, span_id = new_trace_id(), new_span_id()
    span = {"traceId": trace_id, "spanId": span_id, "name": "x", "kind": "SPAN_KIND_SERVER",
            "startTimeUnixNano": 1, "endTimeUnixNano": 2, "status": {"code": "STATUS_CODE_ERROR", "message": "boom"},
            "attributes": [{"key": "raw", "value": {"bytesValue": "AAEC"}}], "someFutureField": 1}  # fmt: skip
    body = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    _ok(world.post(json.dumps(body).encode(), JSON), "application/json")
    stored = json.loads(world.rows("SELECT body FROM online_spans WHERE trace_id = :t", t=trace_id)[0][0])
    assert stored["attributes"] == {"raw": "AAEC"} and stored["kind"] == 2
    assert (stored["status_code"], stored["status_message"]) == (2, "boom")


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_gzip(world: World, encoding: str) -> None:
    trace_id = new_trace_id()
    spans = [S(trace_id, new_span_id(), name="chat")]
    raw, headers = (protobuf_body(spans), PROTOBUF) if encoding == "protobuf" else (json_body(spans), JSON)
    _ok(world.post(gzip.compress(raw), {**headers, "content-encoding": "gzip"}), headers["content-type"])
    assert world.trace(trace_id).span_count == 1


def test_a_trace_over_several_requests_in_any_order_is_ready_after_the_quiet_period(world: World) -> None:
    trace_id, root, mid, leaf = new_trace_id(), new_span_id(), new_span_id(), new_span_id()
    _ok(world.post(protobuf_body([S(trace_id, leaf, parent=mid, name="tool")]), PROTOBUF))
    assembly = world.services.assembly
    later = world.trace(trace_id).last_span_at
    clock = {"now": utcnow()}
    tick = Assembly(
        world.services.settings, assembly.store, world.services.ingest, assembly.metrics, lambda: clock["now"]
    )
    clock["now"] = utcnow() + timedelta(seconds=60)
    tick.tick()
    assert world.trace(trace_id).state == "open"  # quiet, but no ended root yet
    _ok(world.post(json_body([S(trace_id, root, name="chat", kind=2)]), JSON), "application/json")
    _ok(world.post(protobuf_body([S(trace_id, mid, parent=root, name="llm")]), PROTOBUF))
    trace = world.trace(trace_id)
    assert (trace.span_count, trace.root_span_id, trace.root_name, trace.service_name) == (3, root, "chat", "chat-api")
    assert trace.root_ended_at is not None and trace.last_span_at >= later
    clock["now"] = utcnow() + timedelta(seconds=1)  # within the quiet period of the last span
    tick.tick()
    assert world.trace(trace_id).state == "open"
    clock["now"] = utcnow() + timedelta(seconds=3)
    assert tick.tick() >= 1
    trace = world.trace(trace_id)
    assert trace.state == "ready" and trace.ready_at is not None


def test_a_trace_whose_root_never_ends_is_ready_at_the_timeout(world: World) -> None:
    trace_id = new_trace_id()
    _ok(world.post(protobuf_body([S(trace_id, new_span_id(), parent=new_span_id(), name="orphan")]), PROTOBUF))
    clock = {"now": utcnow() + timedelta(seconds=10)}
    s = world.services
    tick = Assembly(s.settings, s.ingest.store, s.ingest, s.assembly.metrics, lambda: clock["now"])
    tick.tick()
    assert world.trace(trace_id).state == "open"
    clock["now"] = utcnow() + timedelta(seconds=301)
    tick.tick()
    # ready at the timeout; the service's own router (polling every online_poll_s) may have routed it already,
    # and "routed" is only ever reached from "ready" (ScoreQueue.route's conditional update): CI met that race
    trace = world.trace(trace_id)
    assert trace.state in ("ready", "routed") and trace.ready_at is not None, trace


def test_a_span_sent_twice_keeps_its_first_row_and_a_routed_trace_stays_routed(fresh_world: World) -> None:
    world = fresh_world
    trace_id, span_id = new_trace_id(), new_span_id()
    _ok(world.post(protobuf_body([S(trace_id, span_id, name="first"), S(trace_id, span_id, name="again")]), PROTOBUF))
    _ok(world.post(json_body([S(trace_id, span_id, name="second")]), JSON), "application/json")
    assert world.rows("SELECT name FROM online_spans WHERE trace_id = :t", t=trace_id) == [("first",)]
    assert world.trace(trace_id).span_count == 1
    with world.services.store.engine.begin() as conn:
        conn.execute(text("UPDATE online_traces SET state = 'routed' WHERE trace_id = :t"), {"t": trace_id})
    _ok(world.post(protobuf_body([S(trace_id, new_span_id(), parent=span_id, name="late")]), PROTOBUF))
    trace = world.trace(trace_id)
    assert (trace.state, trace.span_count) == ("routed", 2)
    metrics = world.client.get("/metrics").text
    assert 'evaluator_host_online_spans_total{outcome="duplicate"} 2.0' in metrics


def test_the_same_ids_in_two_workspaces_are_two_spans(world: World) -> None:
    trace_id, span_id = new_trace_id(), new_span_id()
    _ok(world.post(protobuf_body([S(trace_id, span_id)]), PROTOBUF, world.a))
    _ok(world.post(protobuf_body([S(trace_id, span_id)]), PROTOBUF, world.b))
    found = world.rows("SELECT workspace_id FROM online_traces WHERE trace_id = :t ORDER BY workspace_id", t=trace_id)
    assert sorted(r[0] for r in found) == sorted([world.ws_a, world.ws_b])


def test_invalid_spans_are_rejected_by_partial_success_and_the_rest_stored(world: World) -> None:
    trace_id = new_trace_id()
    good = S(trace_id, new_span_id(), name="good")
    bad = [
        S(trace_id, new_span_id(), attributes={f"k{i}": i for i in range(9)}),  # > 8 attributes
        S(trace_id, new_span_id(), attributes={"big": "x" * 1025}),  # > 1024 bytes
        S(trace_id, new_span_id(), attributes={"utf8": "é" * 600}),  # 1200 bytes in UTF-8
        S(trace_id, new_span_id(), attributes={"list": ["x" * 600, "y" * 600]}),  # > 1024 bytes in all
        S(trace_id, new_span_id(), name="n" * 65),  # > 64 characters
        S(trace_id, new_span_id(), attributes={"k" * 65: 1}),  # key > 64 characters
        S(trace_id, "0000000000000000"),  # an all-zero span id
        S(
            trace_id,
            new_span_id(),
            attributes={"deep": {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": {"i": 1}}}}}}}}}},
        ),
        S(trace_id, new_span_id(), end_ns=2**63),  # past int64 nanoseconds
    ]
    answer = _ok(world.post(protobuf_body([good, *bad]), PROTOBUF))
    assert answer.partial_success.rejected_spans == len(bad)
    assert "rejected" in answer.partial_success.error_message
    as_json = _ok(world.post(json_body([S(new_trace_id(), new_span_id()), *bad]), JSON), "application/json")
    assert int(as_json["partialSuccess"]["rejectedSpans"]) == len(bad)
    assert world.rows("SELECT name FROM online_spans WHERE trace_id = :t", t=trace_id) == [("good",)]
    _healthy(world)


def test_ids_of_the_wrong_length_are_rejected(world: World) -> None:
    spans = [S("t" * 15, "s" * 8), S("t" * 16, "s" * 7), S("t" * 16, "s" * 8, parent="p" * 3), S("t" * 16, "u" * 8)]
    answer = _ok(world.post(protobuf_body(spans, raw_ids=True), PROTOBUF))
    assert answer.partial_success.rejected_spans == 3
    body = {"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "zz" * 16, "spanId": new_span_id(), "name": "not hex"},
        {"traceId": new_trace_id(), "spanId": "abc", "name": "odd"},
        {"traceId": new_trace_id(), "spanId": new_span_id(), "parentSpanId": "0102", "name": "short parent"},
        {"traceId": new_trace_id(), "spanId": new_span_id(), "name": "fine"}]}]}]}  # fmt: skip
    as_json = _ok(world.post(json.dumps(body).encode(), JSON), "application/json")
    assert as_json["partialSuccess"]["rejectedSpans"] == "3"


def _status(response: Any, code: int) -> str:
    assert response.status_code == code, response.content
    if response.headers["content-type"] == "application/x-protobuf":
        return str(Status.FromString(response.content).message)
    return str(response.json()["message"])


@pytest.mark.parametrize("headers", [PROTOBUF, JSON], ids=["protobuf", "json"])
def test_bodies_refused_whole_answer_in_the_requests_encoding(world: World, headers: dict[str, str]) -> None:
    too_many = [S(new_trace_id(), new_span_id()) for _ in range(51)]
    encode = protobuf_body if headers is PROTOBUF else json_body
    assert "online_max_spans" in _status(world.post(encode(too_many), headers), 400)
    assert _status(world.post(b"\xff\x00garbage{", headers), 400)
    assert "gzip" in _status(world.post(b"not gzip at all", {**headers, "content-encoding": "gzip"}), 400)
    assert "gzip" in _status(world.post(gzip.compress(b"x" * 1000)[:20], {**headers, "content-encoding": "gzip"}), 400)
    big = b"\x00" * (64 * 1024 + 1)
    assert "exceeds" in _status(world.post(big, headers), 413)

    def chunks() -> Iterator[bytes]:  # no Content-Length: the route counts what it reads
        for _ in range(100):
            yield b"\x00" * 1024

    assert "exceeds" in _status(world.client.post("/v1/traces", content=chunks(), headers={**world.a, **headers}), 413)
    bomb = gzip.compress(b"\x00" * (32 * 1024 * 1024), 9)  # 32 KiB sent, 32 MiB inflated
    assert len(bomb) < 64 * 1024
    assert "inflated" in _status(world.post(bomb, {**headers, "content-encoding": "gzip"}), 413)
    assert "Content-Encoding" in _status(world.post(b"{}", {**headers, "content-encoding": "br"}), 415)
    metrics = world.client.get("/metrics").text
    for outcome in ("invalid", "too_large", "unsupported"):
        assert f'evaluator_host_online_requests_total{{outcome="{outcome}"}}' in metrics
    _healthy(world)


def test_json_that_is_no_request_is_a_400(world: World) -> None:
    for body in (b"[1, 2]", b'{"resourceSpans": 7}', b'{"resourceSpans": [{"resource": 5}]}', b"[" * 60_000):
        response = world.post(body, JSON)
        assert response.status_code == 400, (body[:40], response.content)
        assert response.json()["error"]["type"] == "BadRequest"
    _healthy(world)


def test_another_content_type_is_a_415(world: World) -> None:
    response = world.post(b"x", {"content-type": "text/plain"})
    assert response.status_code == 415 and response.json()["error"]["type"] == "UnsupportedMediaType"


def test_without_a_valid_key_401_before_the_body_is_read(fresh_world: World) -> None:
    world = fresh_world
    body = protobuf_body([S(new_trace_id(), new_span_id())])
    assert world.client.post("/v1/traces", content=body, headers=PROTOBUF).status_code == 401
    wrong = {"Authorization": "Bearer not-a-key"}
    assert world.client.post("/v1/traces", content=body, headers={**PROTOBUF, **wrong}).status_code == 401
    huge = b"\x00" * (128 * 1024)  # over the body bound: still a 401, not a 413
    assert world.client.post("/v1/traces", content=huge, headers=PROTOBUF).status_code == 401
    assert world.rows("SELECT count(*) FROM online_spans") == [(0,)]


def test_a_full_span_store_answers_503_with_retry_after(tmp_path: Path, database_url: str) -> None:
    with _world(tmp_path, database_url, online_max_stored_spans=3) as world:
        spans = [S(new_trace_id(), new_span_id()) for _ in range(3)]
        _ok(world.post(protobuf_body(spans), PROTOBUF))
        refused = world.post(protobuf_body([S(new_trace_id(), new_span_id())]), PROTOBUF)
        assert refused.status_code == 503 and int(refused.headers["retry-after"]) > 0
        assert "full" in Status.FromString(refused.content).message
        assert 'evaluator_host_online_requests_total{outcome="full"} 1.0' in world.client.get("/metrics").text
        with world.services.store.engine.begin() as conn:
            conn.execute(text("DELETE FROM online_spans"))
        world.services.ingest.recount()  # what retention's pass does after deleting
        _ok(world.post(protobuf_body([S(new_trace_id(), new_span_id())]), PROTOBUF))
        _healthy(world)


def test_retention_deletes_old_spans_and_their_traces(fresh_world: World) -> None:
    world = fresh_world
    old, new = new_trace_id(), new_trace_id()
    _ok(world.post(protobuf_body([S(old, new_span_id())]), PROTOBUF))
    retention = world.services.settings.online_span_retention_s
    s = world.services
    clock = {"now": utcnow() + timedelta(seconds=retention + 1)}
    tick = Assembly(s.settings, s.ingest.store, s.ingest, s.assembly.metrics, lambda: clock["now"])
    _ok(world.post(protobuf_body([S(new, new_span_id())]), PROTOBUF))
    at = bindparam("at", clock["now"], type_=DateTime(timezone=True))
    with s.store.engine.begin() as conn:  # the new trace as if received just before the sweep
        conn.execute(text("UPDATE online_spans SET received_at = :at WHERE trace_id = :t").bindparams(at), {"t": new})
        conn.execute(text("UPDATE online_traces SET last_span_at = :at WHERE trace_id = :t").bindparams(at), {"t": new})
    assert tick.sweep(clock["now"]) == (1, 1)
    assert world.trace(old) is None and world.trace(new) is not None
    assert world.rows("SELECT count(*) FROM online_spans") == [(1,)]
    assert "evaluator_host_online_spans_expired_total 1.0" in world.client.get("/metrics").text


def test_hostile_json_values_are_a_400_or_stored_never_a_500(world: World) -> None:
    tid, sid = new_trace_id(), new_span_id()
    refused = [
        {"traceId": tid, "spanId": sid, "name": "\ud800"},  # a lone surrogate: no UTF-8 for it
        {"traceId": tid, "spanId": sid, "attributes": [{"key": "k", "value": {"intValue": "99999999999999999999"}}]},
        {"traceId": tid, "spanId": sid, "startTimeUnixNano": -5},
        {"traceId": 5, "spanId": sid},
    ]
    nul = [{"key": "a\u0000", "value": {"stringValue": "\u0000"}}]
    stored = [
        {"traceId": tid, "spanId": sid, "name": "x", "kind": 99, "status": {"code": 77}},
        {"traceId": tid, "spanId": new_span_id(), "name": "y", "events": [{"name": "e\u0000", "attributes": nul}]},
    ]
    for span in [*refused, *stored]:
        resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "a\u0000b"}}]}
        body = json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [span]}]}]})
        response = world.post(body.encode(), JSON)
        assert response.status_code == (400 if span in refused else 200), response.content
    assert world.trace(tid).service_name == "ab"  # PostgreSQL stores no NUL in a column
    _healthy(world)
