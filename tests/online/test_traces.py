"""online/levels/traces.py load_trace on SQLite and PostgreSQL: rows written with online.spans.encode (spans
arriving out of order, over workspaces) read back as the dict evaluators get, with each span's
resource from its body; find_span and walk; the span bound (online_max_trace_spans) keeps the root
and says the trace was cut."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import insert
from sqlalchemy.engine import Engine

from evaluator_host.evaluation.trace_shape import SpanData
from evaluator_host.online.levels.traces import DEFAULT_MAX_SPANS, find_span, load_trace, walk
from evaluator_host.online.reading.mapping import trace_inputs_outputs
from evaluator_host.online.reading.spans import encode
from evaluator_host.settings import Settings
from evaluator_host.store.db import make_engine
from evaluator_host.store.online.rows import OnlineSpanRow, OnlineTraceRow

T = "4bf92f3577b34da6a3ce929d0e0e4736"
WS, OTHER = "ws_a", "ws_b"
ROOT, LLM, TOOL = "00f067aa0ba902b7", "b7ad6b7169203331", "c7ad6b7169203332"
BASE = 1_763_900_000_000_000_000
NOW = datetime(2026, 11, 23, 13, 0, tzinfo=UTC)


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


def _row(workspace: str, span: SpanData, service: str | None = "chat-api") -> dict[str, Any]:
    return {
        "workspace_id": workspace,
        "trace_id": span.trace_id,
        "span_id": span.span_id,
        "parent_span_id": span.parent_id,
        "name": span.name,
        "service_name": service,
        "start_ns": span.start_ns,
        "end_ns": span.end_ns,
        "body": encode(span, {"name": "opentelemetry.instrumentation.openai_v2", "version": "2.1b0"}),
        "received_at": NOW,
    }


def _trace_row(workspace: str, count: int, state: str = "ready", root: str | None = ROOT) -> dict[str, Any]:
    return {
        "workspace_id": workspace,
        "trace_id": T,
        "service_name": "chat-api",
        "root_span_id": root,
        "root_name": "POST /chat",
        "span_count": count,
        "first_seen_at": NOW,
        "last_span_at": NOW,
        "root_ended_at": NOW,
        "state": state,
        "ready_at": NOW,
    }


def _write(engine: Engine, spans: list[dict[str, Any]], traces: list[dict[str, Any]]) -> None:
    with engine.begin() as conn:
        if spans:
            conn.execute(insert(OnlineSpanRow), spans)
        conn.execute(insert(OnlineTraceRow), traces)


RESOURCE = {"service.name": "chat-api", "service.version": "1.4.2", "telemetry.sdk.language": "python"}
SPANS = [  # listed (and written) child-first: the order spans arrive in
    SpanData(
        T,
        TOOL,
        ROOT,
        "tool weather",
        BASE + 3_000_000,
        BASE + 4_000_000,
        kind=1,
        attributes={"gen_ai.tool.name": "weather"},
        resource=RESOURCE,
    ),
    SpanData(
        T,
        LLM,
        ROOT,
        "chat gpt-4o-mini",
        BASE + 1_000_000,
        BASE + 2_000_000,
        kind=3,
        status_code=1,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.usage.input_tokens": 42,
            "gen_ai.input.messages": '[{"role": "user", "parts": [{"type": "text", "content": "Hi?"}]}]',
            "gen_ai.output.messages": '[{"role": "assistant", "parts": [{"type": "text", "content": "Hello!"}]}]',
        },
        resource=RESOURCE,
        events=[{"name": "gen_ai.choice", "time_ns": BASE + 1_900_000, "attributes": {"index": 0}}],
    ),
    SpanData(
        T,
        ROOT,
        None,
        "POST /chat",
        BASE,
        BASE + 5_000_000,
        kind=2,
        status_code=2,
        status_message="boom",
        attributes={"http.route": "/chat", "http.response.status_code": 500},
        resource=RESOURCE,
    ),
]


def test_a_stored_trace_reads_back_as_the_dict_evaluators_get(engine: Engine) -> None:
    _write(engine, [_row(WS, s) for s in SPANS], [_trace_row(WS, 3)])
    with engine.connect() as conn:
        loaded = load_trace(conn, WS, T)
    assert loaded is not None
    assert (loaded.trace_id, loaded.state, loaded.service_name, loaded.root_span_id) == (T, "ready", "chat-api", ROOT)
    assert sorted(s.span_id for s in loaded.spans) == sorted([ROOT, LLM, TOOL])
    trace = loaded.trace
    assert trace["trace_id"] == T and list(trace["spans"]) == [ROOT] and "truncated" not in trace
    root = trace["spans"][ROOT]
    assert root["kind"] == "SPAN_KIND_SERVER" and root["status_code"] == "STATUS_CODE_ERROR"
    assert root["status_message"] == "boom" and root["parent_id"] is None
    assert root["attributes"] == {"http": {"route": "/chat", "response": {"status_code": 500}}}
    assert root["resource"]["service"] == {"name": "chat-api", "version": "1.4.2"}
    assert list(root["children"]) == [LLM, TOOL]  # start order, whatever order they arrived in
    llm = root["children"][LLM]
    assert llm["attributes"]["gen_ai"]["request"]["model"] == "gpt-4o-mini"
    assert llm["events"][0]["name"] == "gen_ai.choice" and llm["events"][0]["attributes"] == {"index": 0}
    assert llm["start_time"].startswith("2025-11-23T") and llm["end_time"] > llm["start_time"]
    assert [s["span_id"] for s in walk(trace)] == [ROOT, LLM, TOOL]
    assert find_span(trace, TOOL) is root["children"][TOOL]
    assert find_span(trace, "f" * 16) is None
    assert trace_inputs_outputs(trace) == (
        {"messages": [{"role": "user", "content": "Hi?"}], "prompt": "Hi?", "model": "gpt-4o-mini"},
        "Hello!",
        LLM,
    )


def test_a_trace_belongs_to_its_workspace(engine: Engine) -> None:
    _write(engine, [_row(WS, s) for s in SPANS], [_trace_row(WS, 3)])
    other = SpanData(T, "d" * 16, None, "other tenant's", BASE, BASE + 1, attributes={"secret": "theirs"})
    _write(engine, [_row(OTHER, other)], [_trace_row(OTHER, 1, state="open", root="d" * 16)])
    with engine.connect() as conn:
        mine, theirs = load_trace(conn, WS, T), load_trace(conn, OTHER, T)
        assert load_trace(conn, "ws_none", T) is None
        assert load_trace(conn, WS, "0" * 32) is None
    assert mine is not None and theirs is not None
    assert [s["span_id"] for s in walk(mine.trace)] == [ROOT, LLM, TOOL]
    assert [s["span_id"] for s in walk(theirs.trace)] == ["d" * 16] and theirs.state == "open"


def test_a_trace_whose_spans_are_gone_reads_back_empty(engine: Engine) -> None:
    _write(engine, [], [_trace_row(WS, 3, state="routed")])  # retention removed its raw spans
    with engine.connect() as conn:
        loaded = load_trace(conn, WS, T)
    assert loaded is not None and loaded.spans == [] and loaded.trace == {"trace_id": T, "spans": {}}


def test_the_span_bound_keeps_the_root_and_says_the_trace_was_cut(engine: Engine) -> None:
    # the root started last (a skewed clock): the first spans by start time are children
    root = SpanData(T, ROOT, None, "root", BASE + 10_000, BASE + 20_000)
    children = [SpanData(T, f"{i + 1:016x}", ROOT, f"step {i}", BASE + i, BASE + i + 1) for i in range(50)]
    _write(engine, [_row(WS, s) for s in [root, *children]], [_trace_row(WS, 51)])
    with engine.connect() as conn:
        cut = load_trace(conn, WS, T, max_spans=10)
        whole = load_trace(conn, WS, T, max_spans=51)
    assert cut is not None and whole is not None
    assert len(cut.spans) == 10 and cut.trace["truncated"] is True and cut.trace["span_count"] == 51
    assert list(cut.trace["spans"]) == [ROOT]
    assert [s["name"] for s in walk(cut.trace)][1:] == [f"step {i}" for i in range(9)]
    assert len(whole.spans) == 51 and "truncated" not in whole.trace


def test_the_default_bound_is_the_settings_and_holds_for_a_huge_trace(engine: Engine) -> None:
    assert Settings().online_max_trace_spans == DEFAULT_MAX_SPANS == 10_000
    count = DEFAULT_MAX_SPANS + 500
    spans = [SpanData(T, ROOT, None, "root", BASE, BASE + 10**9)]
    spans += [SpanData(T, f"{i + 1:016x}", ROOT, "s", BASE + i + 1, BASE + i + 2) for i in range(count - 1)]
    _write(engine, [_row(WS, s, service=None) for s in spans], [_trace_row(WS, count, state="open")])
    with engine.connect() as conn:
        loaded = load_trace(conn, WS, T)
        assert loaded is not None
        assert len(loaded.spans) == DEFAULT_MAX_SPANS and loaded.trace["span_count"] == count
        assert len(loaded.trace["spans"][ROOT]["children"]) == DEFAULT_MAX_SPANS - 1
        small = load_trace(conn, WS, T, max_spans=1)  # the same connection serves the next read
    assert small is not None and [s.span_id for s in small.spans] == [ROOT]
