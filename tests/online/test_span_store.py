"""The span store under concurrent writers (the group commit): every span stored once, counted once,
and each trace's ``span_count`` equal to its stored spans; on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

from evaluator_host.store.db import make_engine, utcnow
from evaluator_host.store.online.spans import OnlineSpanStore
from tests.support.otlp_bodies import new_span_id, new_trace_id


@pytest.fixture
def store(database_url: str) -> Iterator[OnlineSpanStore]:
    engine = make_engine(database_url)
    yield OnlineSpanStore(engine)
    engine.dispose()


def _span(trace_id: str, span_id: str, parent: str | None = None) -> dict[str, Any]:
    ended = utcnow() if parent is None else None
    return {"trace_id": trace_id, "span_id": span_id, "parent_span_id": parent, "name": "s", "service_name": "svc",
            "start_ns": 1, "end_ns": 2, "body": "{}", "root_ended_at": ended}  # fmt: skip


def test_concurrent_writers_store_and_count_each_span_once(store: OnlineSpanStore) -> None:
    traces = [new_trace_id() for _ in range(5)]
    shared = _span(traces[0], new_span_id())  # every writer sends this one too
    writers = 8
    requests = [[_span(traces[i % 5], new_span_id(), parent=new_span_id()) for i in range(40)] + [shared]
                for _ in range(writers)]  # fmt: skip
    counts: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(writers)

    def write(spans: list[dict[str, Any]], workspace: str) -> None:
        start.wait()
        try:
            counts.append(store.write(workspace, spans, utcnow()))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(r, "ws_a")) for r in requests]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sum(counts) == writers * 40 + 1  # the shared span counted for one writer only
    with store.engine.connect() as conn:
        spans: dict[str, int] = dict(
            conn.execute(text("SELECT trace_id, count(*) FROM online_spans GROUP BY trace_id")).all()
        )
        counted: dict[str, int] = dict(conn.execute(text("SELECT trace_id, span_count FROM online_traces")).all())
        roots = conn.execute(text("SELECT root_span_id FROM online_traces WHERE trace_id = :t"), {"t": traces[0]})
        assert roots.scalar_one() == shared["span_id"]
    assert spans == counted and sum(spans.values()) == writers * 40 + 1
    assert store.write("ws_a", [shared], utcnow()) == 0
    assert store.write("ws_b", [shared], utcnow()) == 1  # another workspace's span


def test_a_failed_write_stores_nothing_and_the_next_write_stores_all(store: OnlineSpanStore) -> None:
    """A write that fails in its transaction leaves nothing behind — on PostgreSQL not in the connection's
    staging table either (its COPY rows are rolled back with it) — and the same store writes on after it."""
    trace = new_trace_id()
    bad = [_span(trace, new_span_id()), {**_span(trace, new_span_id(), parent=new_span_id()), "name": None}]
    with pytest.raises(Exception, match="(?i)null"):
        store.write("ws_a", bad, utcnow())
    good = [_span(trace, new_span_id(), parent=new_span_id()) for _ in range(3)]
    for _ in range(3):  # every pooled connection the writes get: each one's staging table empty between writes
        assert store.write("ws_a", good, utcnow()) in (0, 3)
    fresh = [_span(new_trace_id(), new_span_id()) for _ in range(2)]
    assert store.write("ws_a", fresh, utcnow()) == 2
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM online_spans")).scalar_one() == 5
        counted = conn.execute(text("SELECT span_count FROM online_traces WHERE trace_id = :t"), {"t": trace})
        assert counted.scalar_one() == 3
