"""Spans go through the workspace's quotas like every other stored byte (issue 47, item 5).

On main 235 kB sent became 181 MB of spans under a 50 kB storage quota, then filled
``ONLINE_MAX_STORED_SPANS`` for every workspace: another workspace's exports got 503 until retention.
Here a span's body bytes count against its workspace's ``max_dataset_bytes`` (the leading spans of a
request that fit are stored, the rest rejected in the partial success; a request none of whose spans
fits is a 429 ``QuotaExceeded`` in OTLP's encoding), and each workspace may hold only its share of the
span store (``online_max_stored_spans`` over the workspaces): one tenant never refuses another's
traffic. On SQLite and PostgreSQL (``database_url``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from sqlalchemy import text

from evaluator_host.api import create_app
from evaluator_host.services import Services
from evaluator_host.store.db import utcnow
from tests.support.otlp_bodies import JSON, PROTOBUF, S, json_body, new_span_id, new_trace_id, protobuf_body
from tests.support.service import assert_healthy, make_settings

ADMIN = "admin-key-for-span-quota-tests-0123"
QUOTA = 50_000  # bytes: the finding's 50 kB storage quota
PROMPT = "p" * 2_000  # each span's body is a little over 2 kB


@dataclass
class World:
    client: TestClient
    services: Services
    ws_a: str
    ws_b: str
    a: dict[str, str]
    b: dict[str, str]

    def post(self, body: bytes, headers: dict[str, str], key: dict[str, str]) -> Any:
        return self.client.post("/v1/traces", content=body, headers={**key, **headers})

    def stored(self, workspace: str) -> tuple[int, int]:
        """(spans, their body bytes) as the database holds them."""
        size = (
            "octet_length(body)"
            if self.services.store.engine.dialect.name == "postgresql"
            else ("length(CAST(body AS BLOB))")
        )
        with self.services.store.engine.connect() as conn:
            spans, total = conn.execute(
                text(f"SELECT count(*), coalesce(sum({size}), 0) FROM online_spans WHERE workspace_id = :w"),
                {"w": workspace},
            ).one()
        return int(spans), int(total)


@contextmanager
def _world(tmp_path: Path, database_url: str, **overrides: Any) -> Iterator[World]:
    settings = make_settings(
        tmp_path / "data",
        backend="process",
        database_url=database_url,
        admin_key=ADMIN,
        online_assembly_s=3600.0,  # the service's own pass runs once at start; the tests sweep by hand
        **overrides,
    )
    with TestClient(create_app(settings)) as client:
        op = {"Authorization": f"Bearer {ADMIN}"}
        ids, keys = [], []
        for name in ("team-a", "team-b"):
            ws = client.post("/v1/workspaces", json={"name": name}, headers=op).json()
            key = client.post(f"/v1/workspaces/{ws['id']}/keys", json={"name": "otel"}, headers=op).json()
            ids.append(ws["id"])
            keys.append({"Authorization": f"Bearer {key['key']}"})
        services: Services = client.app.state.services  # type: ignore[attr-defined]
        services.ingest.recount()  # what retention's pass does every 10 s: the workspaces are counted
        yield World(client, services, ids[0], ids[1], keys[0], keys[1])


def _spans(n: int) -> list[S]:
    return [S(new_trace_id(), new_span_id(), attributes={"gen_ai.prompt": PROMPT}) for _ in range(n)]


def _accepted(response: Any) -> ExportTraceServiceResponse:
    assert response.status_code == 200, response.content
    return ExportTraceServiceResponse.FromString(response.content)


def _healthy(world: World) -> None:
    world.client.headers.update(world.b)
    try:
        assert_healthy(world.client)
    finally:
        del world.client.headers["authorization"]


def test_a_workspace_over_its_storage_quota_is_refused_while_another_workspaces_exports_are_accepted(
    tmp_path: Path, database_url: str
) -> None:
    with _world(tmp_path, database_url) as world:
        op = {"Authorization": f"Bearer {ADMIN}"}
        patched = world.client.patch(
            f"/v1/workspaces/{world.ws_a}", json={"quotas": {"max_dataset_bytes": QUOTA}}, headers=op
        )
        assert patched.status_code == 200, patched.text
        # 40 spans of ~2 kB: the leading ones that fit are stored, the others rejected (partial success)
        first = _accepted(world.post(protobuf_body(_spans(40)), PROTOBUF, world.a))
        spans, size = world.stored(world.ws_a)
        assert 0 < spans < 40 and size <= QUOTA
        assert first.partial_success.rejected_spans == 40 - spans
        assert "storage quota" in first.partial_success.error_message
        # now none fits: the quota error the API uses elsewhere, in the request's encoding
        refused = world.post(protobuf_body(_spans(5)), PROTOBUF, world.a)
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0
        status = Status.FromString(refused.content)
        assert status.code == 8 and "max_dataset_bytes" in status.message  # RESOURCE_EXHAUSTED
        refused_json = world.post(json_body(_spans(5)), JSON, world.a)
        assert refused_json.status_code == 429
        error = refused_json.json()["error"]
        assert error["type"] == "QuotaExceeded" and error["quota"] == "max_dataset_bytes"
        assert world.stored(world.ws_a) == (spans, size)  # nothing more stored
        # the spans count for its other stored data too: an upload larger than one span is refused
        upload = world.client.post(
            "/v1/datasets", content=b'{"i": 1}\n' * 600, headers={**world.a, "content-type": "text/jsonl"}
        )
        assert upload.status_code == 429 and upload.json()["error"]["quota"] == "max_dataset_bytes"
        # workspace B (no quota) is not affected
        _accepted(world.post(protobuf_body(_spans(40)), PROTOBUF, world.b))
        assert world.stored(world.ws_b)[0] == 40
        metrics = world.client.get("/metrics").text
        assert 'evaluator_host_online_requests_total{outcome="quota"} 2.0' in metrics
        # retention releases what it deletes: A's exports are accepted again
        s = world.services
        later = utcnow() + timedelta(seconds=s.settings.online_span_retention_s + 1)
        s.assembly.sweep(later)
        assert world.stored(world.ws_a) == (0, 0)
        again = world.post(json_body(_spans(3)), JSON, world.a)
        assert again.status_code == 200 and json.loads(again.content) == {}
        assert world.stored(world.ws_a)[0] == 3
        _healthy(world)


def test_one_workspace_filling_its_share_of_the_span_store_never_makes_anothers_exports_503(
    tmp_path: Path, database_url: str
) -> None:
    # three workspaces (the default one, A and B): each may hold 30 // 3 = 10 spans
    with _world(tmp_path, database_url, online_max_stored_spans=30) as world:
        sent = 0
        while True:  # A exports until it is refused
            response = world.post(protobuf_body(_spans(4)), PROTOBUF, world.a)
            if response.status_code == 503:
                break
            _accepted(response)
            sent += 4
            assert sent <= 40, "workspace A was never refused"
        # B still exports: A's spans are not B's problem
        for _ in range(2):
            _accepted(world.post(protobuf_body(_spans(4)), PROTOBUF, world.b))
        answer = world.post(json_body(_spans(1)), JSON, world.b)
        assert answer.status_code == 200 and json.loads(answer.content) == {}
        assert world.stored(world.ws_b)[0] == 9
        assert world.stored(world.ws_a)[0] <= 12  # its share, passed by at most one request
        assert int(response.headers["retry-after"]) > 0
        assert "share of the span store" in Status.FromString(response.content).message
        _healthy(world)
