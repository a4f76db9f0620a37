"""``online_usage`` equals the stored spans, and the storage quota holds under concurrent writers of two
services (issue 47, item 5); on SQLite and PostgreSQL (``database_url``)."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

from alembic import command
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine

from evaluator_host.errors import QuotaExceeded
from evaluator_host.store import schema
from evaluator_host.store.db import make_engine, utcnow
from evaluator_host.store.online.spans import OnlineSpanStore
from evaluator_host.store.workspaces import WorkspaceStore
from tests.support.otlp_bodies import new_span_id, new_trace_id


def _span(body: str) -> dict[str, Any]:
    return {"trace_id": new_trace_id(), "span_id": new_span_id(), "parent_span_id": None, "name": "s",
            "service_name": "svc", "start_ns": 1, "end_ns": 2, "body": body, "root_ended_at": utcnow()}  # fmt: skip


def _truth(engine: Engine) -> dict[str, tuple[int, int]]:
    """Per workspace, (spans, body bytes) counted from the spans themselves."""
    size = "octet_length(body)" if engine.dialect.name == "postgresql" else "length(CAST(body AS BLOB))"
    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT workspace_id, count(*), sum({size}) FROM online_spans GROUP BY 1"))
        return {w: (int(n), int(b)) for w, n, b in rows}


def _usage(engine: Engine) -> dict[str, tuple[int, int]]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT workspace_id, spans, bytes FROM online_usage WHERE spans > 0"))
        return {w: (int(n), int(b)) for w, n, b in rows}


def test_the_usage_is_the_stored_spans_bytes_after_duplicates_non_ascii_and_retention(engine: Engine) -> None:
    store = OnlineSpanStore(engine)
    first = [_span('{"p": "' + "é" * 100 + '"}'), _span('{"p": "ascii"}')]
    assert store.write("ws_a", first, utcnow()) == 2
    assert store.write("ws_a", [first[0], _span("{}")], utcnow()) == 1  # a duplicate is never charged
    store.write("ws_b", [_span('{"p": "' + "漢" * 50 + '"}')], utcnow())
    assert _usage(engine) == _truth(engine) and _usage(engine)["ws_a"][0] == 3
    assert store.held() == {"ws_a": 3, "ws_b": 1}
    assert store.sweep(utcnow() + timedelta(seconds=1)) == (4, 4)
    assert _usage(engine) == {} and _truth(engine) == {}


def test_concurrent_writers_of_two_services_never_pass_the_storage_quota(engine: Engine) -> None:
    workspace = WorkspaceStore(engine).create("quota").id
    limit = 40_000
    stores = [OnlineSpanStore(engine), OnlineSpanStore(engine)]  # two services: two group commits
    writers = 8
    outcomes: list[Any] = []
    start = threading.Barrier(writers)

    def write(store: OnlineSpanStore) -> None:
        start.wait()
        for _ in range(5):
            try:
                outcomes.append(store.write_within(workspace, [_span("x" * 1_000) for _ in range(3)], utcnow(), limit))
            except QuotaExceeded as exc:
                outcomes.append(exc)
            except BaseException as exc:  # noqa: BLE001 (anything else fails the test below)
                outcomes.append(("error", exc))

    threads = [threading.Thread(target=write, args=(stores[i % 2],)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not [o for o in outcomes if isinstance(o, tuple)], outcomes
    spans, size = _truth(engine)[workspace]
    assert 0 <= limit - size < 1_000  # filled up to less than one span, never past it
    assert _usage(engine)[workspace] == (spans, size)
    assert sum(o.stored for o in outcomes if not isinstance(o, QuotaExceeded)) == spans
    assert any(isinstance(o, QuotaExceeded) for o in outcomes)


def test_migration_0012_fills_the_usage_from_the_spans_already_stored(database_url: str) -> None:
    url = schema.normalized_url(database_url)
    engine = create_engine(url)
    with engine.begin() as conn:
        command.upgrade(schema._config(conn), "0011")
        for workspace, body in (("ws_a", '{"p": "é"}'), ("ws_a", "{}"), ("ws_b", "{}")):
            conn.execute(
                text(
                    "INSERT INTO online_spans (workspace_id, trace_id, span_id, parent_span_id, name, service_name, "
                    "start_ns, end_ns, body, received_at) VALUES (:w, :t, :s, NULL, 'chat', 'svc', 1, 2, :b, :at)"
                ),
                {"w": workspace, "t": new_trace_id(), "s": new_span_id(), "b": body, "at": utcnow()},
            )
    engine.dispose()
    engine = make_engine(url)  # migrates to the newest
    try:
        assert _usage(engine) == _truth(engine) == {"ws_a": (2, 13), "ws_b": (1, 2)}
    finally:
        engine.dispose()
