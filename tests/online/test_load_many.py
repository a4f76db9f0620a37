"""The scorer's batch loading gives exactly what ``load_trace`` gives each trace, on SQLite and
PostgreSQL: small traces in one batch, a trace past ``online_max_trace_spans`` bounded and marked
``truncated`` by ``load_trace`` itself, another workspace's or an unknown trace absent."""

from __future__ import annotations

from sqlalchemy import Engine

from evaluator_host.online.levels.traces import load_trace
from evaluator_host.online.scoring.scorer import load_many
from tests.support.online import WS, chat_trace, hex_id, put_trace, span


def test_batch_loading_equals_load_trace_and_keeps_its_bound(engine: Engine) -> None:
    small = [chat_trace(engine) for _ in range(3)]
    big_id = hex_id(16)
    root = span(big_id, "root", start_ns=1_000)
    children = [span(big_id, f"c{i}", parent=root.span_id, start_ns=2_000 + i) for i in range(5)]
    put_trace(engine, [root, *children])
    other = chat_trace(engine, workspace="ws_other")
    keys = {(WS, t) for t in [*small, big_id, other, hex_id(16)]}
    with engine.connect() as conn:
        got = load_many(conn, keys, 3)
        for trace_id in [*small, big_id]:
            assert got[(WS, trace_id)] == load_trace(conn, WS, trace_id, max_spans=3)
    assert (WS, other) not in got and len(got) == 4
    big = got[(WS, big_id)].trace
    assert big["truncated"] is True and big["span_count"] == 6 and len(got[(WS, big_id)].spans) == 3
    assert "truncated" not in got[(WS, small[0])].trace
