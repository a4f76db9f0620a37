"""The OTLP/JSON fast path (``online/receive/otlp_json.py``) gives what the general path (``json_format``) gives.

``decode(..., keep_message=False)`` reads a plain body directly; for every body — plain, odd or hostile —
its spans (their stored bodies byte for byte), service names, scopes, rejections and refusals must equal
``decode``'s with the message kept (which always takes ``json_format``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from evaluator_host.observability.metrics import Metrics
from evaluator_host.online.reading.spans import encode
from evaluator_host.online.receive import otlp_json
from evaluator_host.online.receive.ingest import Ingest
from evaluator_host.online.receive.otlp import JSON, Limits, OtlpError, decode
from evaluator_host.online.receive.otlp_json import plain
from evaluator_host.settings import Settings
from evaluator_host.store.db import make_engine
from evaluator_host.store.online.spans import OnlineSpanStore
from tests.support.otlp_bodies import S, json_body, new_span_id, new_trace_id

LIMITS = Limits(body_bytes=1 << 20, spans=10, attributes=8, attribute_bytes=1024, name_chars=64)

_TRACE = "0af7651916cd43dd8448eb211c80319c"
_IDS32 = st.sampled_from([_TRACE, _TRACE.upper(), "0" * 32, _TRACE[:30], "zz" * 16, "CvdlGRbNQ92ESOshHIAxnA==", 7])
_IDS16 = st.sampled_from(["b7ad6b7169203331", "B7AD6B7169203331", "0" * 16, "b7ad6b71", "qq" * 8, "t61rcWkgMzE=", 7])
_TIMES = st.sampled_from([0, 123, "123", "0123", "-1", -1, 2**63 - 1, str(2**63 - 1), 2**63, str(2**64), 1.5, True])
_VALUES = st.sampled_from(
    [
        {"stringValue": "4"},
        {"stringValue": "é\x00"},
        {"stringValue": "\ud800"},  # a lone surrogate (JSON's escape): not UTF-8
        {"stringValue": "é" * 600},  # 1,200 bytes: over the 1,024 bound
        {"stringValue": 5},
        {"intValue": "5"},
        {"intValue": -5},
        {"intValue": "05"},
        {"intValue": "-0"},
        {"intValue": str(2**63)},
        {"intValue": 1.0},
        {"boolValue": True},
        {"boolValue": "true"},
        {"doubleValue": 1.5},
        {"doubleValue": 1},
        {"doubleValue": "NaN"},
        {"doubleValue": 1e308},
        {"bytesValue": "AAE="},
        {"arrayValue": {"values": [{"stringValue": "a"}]}},
        {"kvlistValue": {"values": [{"key": "x", "value": {"intValue": "1"}}]}},
        {},
        {"stringValue": "a", "intValue": "1"},
        None,
    ]
)
_KEYS = st.sampled_from(["k", "gen_ai.prompt", "", "k" * 65, "\ud800", 5])
_PAIRS = st.lists(
    st.one_of(
        st.builds(lambda k, v: {"key": k, "value": v}, _KEYS, _VALUES),
        st.sampled_from([{"key": "k"}, {"key": "k", "value": {"stringValue": "v"}, "x": 1}, "pair"]),
    ),
    max_size=10,
)
_OPTIONAL = {
    "parentSpanId": st.sampled_from(["", "b7ad6b7169203331", "0" * 16, "b7ad", 7]),
    "name": st.sampled_from(["chat", "", "n" * 65, "a\x00b", "\udfff", 5]),
    "kind": st.sampled_from([0, 3, 5, 6, -1, "SPAN_KIND_CLIENT", "SPAN_KIND_BOGUS", 2.0, True]),
    "startTimeUnixNano": _TIMES,
    "endTimeUnixNano": _TIMES,
    "attributes": _PAIRS,
    "status": st.sampled_from(
        [{}, {"code": 2, "message": "m"}, {"code": "STATUS_CODE_ERROR"}, {"code": 9}, {"message": "\ud800"}, "bad"]
    ),
    "events": st.sampled_from([[], [{"name": "e", "timeUnixNano": "1"}]]),
    "links": st.just([{"traceId": _TRACE, "spanId": "b7ad6b7169203331"}]),
    "flags": st.sampled_from([1, -1, 2**32, "1"]),
    "traceState": st.sampled_from(["a=b", "\ud800", 3]),
    "droppedAttributesCount": st.sampled_from([0, 2, -2]),
    "unknownField": st.just(1),
}


_GOOD_VALUES = st.sampled_from(
    [{"stringValue": "4"}, {"intValue": "5"}, {"intValue": -5}, {"boolValue": False}, {"doubleValue": 0.25}]
)
_GOOD = {
    "parentSpanId": st.sampled_from(["", "b7ad6b7169203331"]),
    "name": st.sampled_from(["chat", ""]),
    "kind": st.sampled_from([0, 3, "SPAN_KIND_SERVER"]),
    "startTimeUnixNano": st.sampled_from([0, 123, "123", str(2**63 - 1)]),
    "endTimeUnixNano": st.sampled_from([0, "456"]),
    "attributes": st.lists(
        st.builds(lambda k, v: {"key": k, "value": v}, st.sampled_from(["k", "gen_ai.prompt", ""]), _GOOD_VALUES),
        max_size=8,
    ),
    "status": st.sampled_from([{}, {"code": 2, "message": "m"}, {"code": "STATUS_CODE_OK"}]),
    "events": st.just([]),
    "links": st.just([]),
    "flags": st.just(1),
    "traceState": st.just("a=b"),
    "droppedAttributesCount": st.just(0),
}


@st.composite
def _span(draw: Any) -> dict[str, Any]:
    """A plain span, or one with a field (or its ids) from the odd values."""
    span = {"traceId": _TRACE, "spanId": draw(st.sampled_from(["b7ad6b7169203331", "00f067aa0ba902b7"]))}
    for key, values in _GOOD.items():
        if draw(st.booleans()):
            span[key] = draw(values)
    odd = draw(st.sampled_from(["traceId", "spanId", *_OPTIONAL])) if draw(st.integers(0, 3)) == 0 else None
    if odd == "traceId":
        span["traceId"] = draw(_IDS32)
    elif odd == "spanId":
        span["spanId"] = draw(_IDS16)
    elif odd is not None:
        span[odd] = draw(_OPTIONAL[odd])
    return span


_SCOPE = st.sampled_from(
    [None, {"name": "s", "version": "1"}, {"name": "s"}, {"name": 5}, {"name": "\ud800"}, {"attributes": []}]
)
_RESOURCE = st.one_of(
    st.builds(lambda pairs: {"attributes": [{"key": "service.name", "value": {"stringValue": "app"}}, *pairs]}, _PAIRS),
    st.sampled_from([None, {}, {"attributes": [{"key": "service.name", "value": {"intValue": "3"}}]}, []]),
    st.just({"attributes": [{"key": "service.name", "value": {"stringValue": "app"}}]}),
)


@st.composite
def _body(draw: Any) -> bytes:
    scope_spans = []
    for _ in range(draw(st.integers(1, 2))):
        ss: dict[str, Any] = {"spans": draw(st.lists(_span(), max_size=4))}
        if (scope := draw(_SCOPE)) is not None:
            ss["scope"] = scope
        scope_spans.append(ss)
    rs: dict[str, Any] = {"scopeSpans": scope_spans}
    if (resource := draw(_RESOURCE)) is not None:
        rs["resource"] = resource
    return json.dumps({"resourceSpans": [rs]}).encode()


def _outcome(body: bytes, keep_message: bool) -> Any:
    try:
        decoded = decode(body, JSON, LIMITS, keep_message=keep_message)
    except OtlpError as exc:
        return ("refused", exc.status, exc.message)
    spans = [(encode(r.span, r.scope), r.span, r.service_name, r.scope) for r in decoded.spans]
    return spans, decoded.rejected, decoded.reasons


@settings(max_examples=400, deadline=None)
@given(_body())
def test_the_fast_path_decodes_any_otlp_json_body_as_json_format_does(body: bytes) -> None:
    assert _outcome(body, keep_message=False) == _outcome(body, keep_message=True)


def test_the_fast_path_reads_the_common_exporters_bodies() -> None:
    """The JS exporter's and the Collector's shape (camelCase, hex ids, int64s as strings, enums as numbers,
    string/int/double/bool attributes) is plain: it is read directly, and as json_format reads it."""
    trace_id, root = new_trace_id(), new_span_id()
    spans = [
        S(trace_id, root, name="chat", attributes={"ag.data.outputs": "4", "n": 3, "t": 0.5, "ok": True}),
        S(trace_id, new_span_id(), parent=root, name="llm", attributes={"gen_ai.request.model": "m"}),
    ]
    body = json_body(spans)
    fast = plain(body, LIMITS)
    assert fast is not None and [s.name for s, _, _ in fast] == ["chat", "llm"]
    assert _outcome(body, keep_message=False) == _outcome(body, keep_message=True)
    assert decode(body, JSON, LIMITS, keep_message=False).message is None  # nothing to forward: none made


def test_a_body_the_fast_path_does_not_know_takes_the_general_path() -> None:
    """Events, an array value, a wrong-length id, a span over a bound: not plain (None), and the general path's
    answer stands — the over-long name still rejected with its reason, the others of the request kept."""
    trace_id = new_trace_id()
    good = {"traceId": trace_id, "spanId": new_span_id(), "name": "ok"}
    for odd in (
        {"events": [{"name": "e", "timeUnixNano": "5"}]},
        {"attributes": [{"key": "l", "value": {"arrayValue": {"values": [{"intValue": "1"}]}}}]},
        {"spanId": "abcd"},
        {"name": "n" * 65},
    ):
        body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [good, {**good, **odd}]}]}]}).encode()
        assert plain(body, LIMITS) is None
        assert _outcome(body, keep_message=False) == _outcome(body, keep_message=True)
    decoded = decode(body, JSON, LIMITS, keep_message=False)
    assert [r.span.name for r in decoded.spans] == ["ok"] and decoded.rejected == 1
    assert "name of 65 characters" in decoded.reasons[0]


def test_a_body_over_the_span_limit_across_scopes_is_given_up_having_built_no_more_than_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each scope within the limit, their total 5 times it: the fast path counts as it goes and gives the body up
    at the first scope past the limit, having built at most the limit's spans (a hostile body of many small
    scopes cost the whole build first), and the general path's refusal stands."""
    built: list[object] = []
    real = otlp_json._span
    monkeypatch.setattr(otlp_json, "_span", lambda *args: built.append(args) or real(*args))
    trace_id = new_trace_id()
    scope = {"spans": [{"traceId": trace_id, "spanId": new_span_id(), "name": "s"} for _ in range(LIMITS.spans)]}
    body = json.dumps({"resourceSpans": [{"scopeSpans": [scope] * 5}]}).encode()
    assert plain(body, LIMITS) is None
    assert len(built) <= LIMITS.spans
    assert _outcome(body, keep_message=False) == _outcome(body, keep_message=True)
    assert _outcome(body, keep_message=False)[0] == "refused"


def test_the_receiver_keeps_the_message_only_for_a_workspace_that_forwards(tmp_path: Path) -> None:
    """The service's receiver always has a forwarder; a workspace with no forwarding target gets the fast path
    (nothing offered, no message made), one with a target the general path: its spans forwarded as the protobuf
    of the request, the same spans decoded."""
    settings = Settings(data_dir=tmp_path, online_store_spans=False)
    ingest = Ingest(settings, OnlineSpanStore(make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")), Metrics())
    offered: list[tuple[str, bytes, int]] = []
    ingest.forward = lambda workspace, body, spans: offered.append((workspace, body, spans))
    ingest.forwards = lambda workspace: workspace == "ws_forwards"
    trace_id = new_trace_id()
    body = json_body([S(trace_id, new_span_id(), name="chat", attributes={"ag.data.outputs": "4"})])
    quiet = ingest.receive("ws_default", body, JSON, None)
    assert offered == [] and quiet.message is None and [r.span.trace_id for r in quiet.spans] == [trace_id]
    loud = ingest.receive("ws_forwards", body, JSON, None)
    assert [(ws, n) for ws, _, n in offered] == [("ws_forwards", 1)]
    assert ExportTraceServiceRequest.FromString(offered[0][1]).resource_spans[0].scope_spans[0].spans[0].name == "chat"
    assert [(r.span, r.scope) for r in loud.spans] == [(r.span, r.scope) for r in quiet.spans]
