"""The receiver's CPU cuts (issue 55) change no stored byte: each cut function against the code it replaced.

``otlp._attributes`` reads a non-empty string value without ``HasField`` (an empty one through the oneof's
name), and ``spans.encode`` writes its mappings without copying those that are dicts already. The code they
replaced is kept here as the reference; for generated protobuf attributes (every value kind, empty and
oversized strings, nested and over-deep values, too many of them) both must give the same values — or
reject with the same message — and both encodings the same text.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from evaluator_host.evaluation.trace_shape import SpanData
from evaluator_host.online.reading import spans as span_bodies
from evaluator_host.online.receive import otlp
from evaluator_host.online.receive.otlp import Limits

LIMITS = Limits(body_bytes=1 << 20, spans=10, attributes=6, attribute_bytes=64, name_chars=12)


def _old_value(value: AnyValue, budget: list[int], depth: int) -> Any:
    return otlp._value(value, budget, depth)  # unchanged: the nested values' reader


def _old_attributes(pairs: Sequence[KeyValue], limits: Limits, what: str) -> dict[str, Any]:
    """``otlp._attributes`` before issue 55's cut (``HasField("string_value")`` first)."""
    if len(pairs) > limits.attributes:
        raise otlp._Rejected(f"{len(pairs)} {what}s (online_max_attributes {limits.attributes})")
    cap, max_key = limits.attribute_bytes, limits.name_chars
    out: dict[str, Any] = {}
    for pair in pairs:
        key = pair.key
        if len(key) > max_key:
            raise otlp._Rejected(f"{what} key of {len(key)} characters (online_max_name_chars)")
        value = pair.value
        if value.HasField("string_value"):
            text = value.string_value
            if len(text) * 4 > cap and len(text.encode()) > cap:
                raise otlp._Rejected(f"{what} {key[:80]!r} over {cap} bytes (online_max_attribute_bytes)")
            out[key] = text
            continue
        kind = value.WhichOneof("value")
        if kind in ("int_value", "bool_value"):
            out[key] = getattr(value, kind)
        else:
            budget = [cap]
            out[key] = _old_value(value, budget, 0)
            if budget[0] < 0:
                raise otlp._Rejected(f"{what} {key[:80]!r} over {cap} bytes (online_max_attribute_bytes)")
    return out


def _old_encode(span: SpanData, scope: Mapping[str, Any] | None = None) -> str:
    """``spans.encode`` before the cut (every mapping copied)."""
    body = {
        "kind": span.kind,
        "status_code": span.status_code,
        "status_message": span.status_message,
        "attributes": dict(span.attributes),
        "resource": dict(span.resource),
        "events": [dict(e) for e in span.events],
        "scope": dict(scope or {}),
    }
    try:
        return span_bodies._FAST.encode(body).decode()
    except Exception:
        return span_bodies._ENCODER.encode(body)


_TEXT = st.sampled_from(["", "a", "é", "chat", "x" * 16, "é" * 20, "x" * 65, "\x00", "𝄞" * 17])
_SCALAR = st.one_of(
    st.builds(lambda t: AnyValue(string_value=t), _TEXT),
    st.builds(lambda n: AnyValue(int_value=n), st.integers(-(2**63), 2**63 - 1)),
    st.builds(lambda b: AnyValue(bool_value=b), st.booleans()),
    st.builds(lambda d: AnyValue(double_value=d), st.floats(allow_nan=True, allow_infinity=True)),
    st.builds(lambda b: AnyValue(bytes_value=b), st.binary(max_size=70)),
    st.just(AnyValue()),
)


def _nested(children: st.SearchStrategy[AnyValue]) -> st.SearchStrategy[AnyValue]:
    arrays = st.builds(lambda vs: AnyValue(array_value=ArrayValue(values=vs)), st.lists(children, max_size=4))
    kvs = st.builds(
        lambda ps: AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key=k, value=v) for k, v in ps])),
        st.lists(st.tuples(_TEXT, children), max_size=4),
    )
    return st.one_of(arrays, kvs)


_VALUES = st.recursive(_SCALAR, _nested, max_leaves=12)
_KEYS = st.one_of(st.sampled_from(["", "k", "é", "gen_ai.prompt"]), _TEXT)  # mostly within name_chars
_PAIRS = st.lists(st.builds(lambda k, v: KeyValue(key=k, value=v), _KEYS, _VALUES), max_size=7)


def _outcome(read: Any, pairs: Sequence[KeyValue]) -> tuple[str, Any]:
    try:
        return "ok", read(pairs, LIMITS, "attribute")
    except otlp._Rejected as exc:
        return "rejected", str(exc)


def _same(a: Any, b: Any) -> bool:
    """Equal, NaN included (a NaN double is read as the text 'nan' by both; a float NaN never equals itself)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


@settings(max_examples=400, deadline=None)
@given(_PAIRS)
@example([KeyValue(key="k", value=AnyValue(string_value="x" * 65))])  # over the bound: rejected by both
@example([KeyValue(key="k", value=AnyValue(string_value="")), KeyValue(key="n", value=AnyValue(int_value=0))])
def test_attributes_read_the_same_values_and_rejections_as_before_the_cut(pairs: list[KeyValue]) -> None:
    span = Span(attributes=pairs)  # read back from a message, as the receiver reads them
    new, old = _outcome(otlp._attributes, span.attributes), _outcome(_old_attributes, span.attributes)
    assert new[0] == old[0]
    assert _same(new[1], old[1])


@settings(max_examples=200, deadline=None)
@given(_PAIRS, st.booleans())
def test_stored_bodies_are_the_same_text_as_before_the_cut(pairs: list[KeyValue], proxies: bool) -> None:
    try:
        attributes = otlp._attributes(Span(attributes=pairs).attributes, LIMITS, "attribute")
    except otlp._Rejected:
        attributes = {"k": base64.b64encode(b"\x00").decode()}
    resource = {"service.name": "svc"}
    events = [{"name": "e", "time_ns": 1, "attributes": dict(attributes)}]
    scope: Mapping[str, Any] = {"name": "s", "version": "1"}
    if proxies:  # callers other than the receiver may hand read-only mappings: those are still copied
        attributes, resource, scope = MappingProxyType(attributes), MappingProxyType(resource), MappingProxyType(scope)
    span = SpanData("t" * 32, "s" * 16, None, "chat", 1, 2, 3, 1, "m", attributes, resource, events)
    assert span_bodies.encode(span, scope) == _old_encode(span, scope)


def test_a_traces_sqlite_upsert_parameters_follow_its_column_list() -> None:
    """``_sqlite_trace`` spells its parameters out (no loop over the columns, the ingest's hot path): they are the
    columns of ``_TRACE_COLUMNS``, in its order — a column added to one and not the other fails here."""
    from evaluator_host.store.online import spans

    times = {"first_seen_at", "last_span_at", "root_ended_at", "ready_at"}
    trace = {column: None if column in times else column for column in spans._TRACE_COLUMNS}
    expected = tuple(None if column in times else column for column in spans._TRACE_COLUMNS)
    assert spans._sqlite_trace(trace, {}) == expected
