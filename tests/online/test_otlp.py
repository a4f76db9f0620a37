"""The decoder's pure parts: inflating under the bound (a gzip bomb is never inflated whole) and
attribute values as JSON."""

from __future__ import annotations

import gzip
import math
import tracemalloc

import pytest

from evaluator_host.online.receive.inflate import inflate
from evaluator_host.online.receive.otlp import PROTOBUF, Limits, OtlpError, decode
from tests.support.otlp_bodies import S, new_span_id, new_trace_id, protobuf_body

LIMITS = Limits(body_bytes=1 << 20, spans=10, attributes=8, attribute_bytes=1024, name_chars=64)


def test_a_gzip_bomb_is_cut_off_while_inflating() -> None:
    bomb = gzip.compress(b"\x00" * (256 << 20), 9)  # ~256 KiB that inflate to 256 MiB
    assert len(bomb) < 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(OtlpError) as refused:
            inflate(bomb, "gzip", 1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert refused.value.status == 413
    assert peak < 8 << 20  # about the bound (1 MiB) and the compressed body, never the 256 MiB


def test_inflate_takes_concatenated_members_and_refuses_garbage_after() -> None:
    assert inflate(gzip.compress(b"ab") + gzip.compress(b"cd"), "gzip", 100) == b"abcd"
    assert inflate(b"as is", None, 100) == b"as is"
    assert inflate(b"as is", "identity", 100) == b"as is"
    with pytest.raises(OtlpError):
        inflate(gzip.compress(b"ab") + b"trailing junk", "gzip", 100)
    with pytest.raises(OtlpError) as exact:
        inflate(gzip.compress(b"x" * 101), "gzip", 100)
    assert exact.value.status == 413
    assert inflate(gzip.compress(b"x" * 100), "gzip", 100) == b"x" * 100  # the bound itself is allowed


def test_attribute_values_as_json() -> None:
    trace_id = new_trace_id()
    values = {
        "s": "é",
        "i": -3,
        "f": 1.5,
        "b": False,
        "nan": math.nan,
        "raw": b"\x00\x01",
        "l": [1, "a"],
        "m": {"x": [True]},
    }
    decoded = decode(protobuf_body([S(trace_id, new_span_id(), attributes=values)]), PROTOBUF, LIMITS)
    (received,) = decoded.spans
    assert received.span.attributes == {**values, "nan": "nan", "raw": "AAE="}
    assert received.service_name == "chat-api" and received.span.resource == {"service.name": "chat-api"}
    assert received.scope == {"name": "tests", "version": ""}


def test_too_many_spans_is_refused_before_any_is_converted() -> None:
    body = protobuf_body([S(new_trace_id(), new_span_id()) for _ in range(11)])
    with pytest.raises(OtlpError) as refused:
        decode(body, PROTOBUF, LIMITS)
    assert refused.value.status == 400 and "online_max_spans" in refused.value.message
