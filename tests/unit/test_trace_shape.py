"""The trace shape evaluators get (evaluation/trace_shape.py): nesting, roots and children, times."""

from __future__ import annotations

from evaluator_host.evaluation.trace_shape import SpanData, build_trace, iso_ns, nest, single_span_trace

T = "0af7651916cd43dd8448eb211c80319c"


def test_dotted_keys_nest_and_a_key_that_is_also_a_prefix_keeps_its_value() -> None:
    assert nest({"ag.data.inputs": {"q": 1}, "ag.metrics.unit.tokens.total": 7}) == {
        "ag": {"data": {"inputs": {"q": 1}}, "metrics": {"unit": {"tokens": {"total": 7}}}}
    }
    assert nest({"a.b": 2, "a": 1}) == {"a": {"": 1, "b": 2}}


def test_children_hang_under_their_parent_and_an_orphan_is_a_root() -> None:
    spans = [
        SpanData(T, "b" * 16, "a" * 16, "llm", 2_000, 3_000, attributes={"gen_ai.request.model": "m"}),
        SpanData(T, "a" * 16, None, "chat", 1_000, 4_000, kind=2, status_code=1),
        SpanData(T, "c" * 16, "f" * 16, "late", 5_000, 6_000),
    ]
    trace = build_trace(T, spans)
    assert list(trace["spans"]) == ["a" * 16, "c" * 16]
    root = trace["spans"]["a" * 16]
    assert root["kind"] == "SPAN_KIND_SERVER" and root["status_code"] == "STATUS_CODE_OK"
    assert root["children"]["b" * 16]["attributes"] == {"gen_ai": {"request": {"model": "m"}}}
    assert root["start_time"] == iso_ns(1_000) == "1970-01-01T00:00:00.000001+00:00"


def test_a_single_span_trace_is_a_client_span_with_an_error_status_when_it_failed() -> None:
    trace = single_span_trace(T, "d" * 16, "generate", 0, 10, {"ag.metrics.unit.tokens.total": 3}, error="429")
    span = trace["spans"]["d" * 16]
    assert span["kind"] == "SPAN_KIND_CLIENT" and span["status_code"] == "STATUS_CODE_ERROR"
    assert span["attributes"]["ag"]["metrics"]["unit"]["tokens"]["total"] == 3


def test_a_stored_body_decodes_to_the_span_it_encoded() -> None:
    from evaluator_host.online.reading import spans

    span = SpanData(T, "a" * 16, None, "chat", 1, 2, kind=2, status_code=2, status_message="boom",
                    attributes={"ag.data.inputs": {"q": "x"}, "n": 3}, resource={"service.name": "api"},
                    events=[{"name": "e", "time_ns": 5, "attributes": {"k": "v"}}])  # fmt: skip
    body = spans.encode(span, {"name": "scope"})
    assert spans.decode(T, "a" * 16, None, "chat", 1, 2, body) == span


def test_a_time_is_written_as_the_standard_library_writes_it_rounding_and_carry_included() -> None:
    from datetime import UTC, datetime
    from random import Random

    def stdlib(ns: int) -> str:
        return datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="microseconds")

    rng = Random(50)
    now = 1_764_000_000 * 10**9
    edges = [0, 1, 499, 500, 501, 1_500, 2_500, 10**9 - 1, 10**9 - 500, now + 999_999_500, now + 999_999_499]
    times = (
        edges + [now + rng.randrange(10**12) for _ in range(20_000)] + [rng.randrange(4 * 10**18) for _ in range(5_000)]
    )
    times += [now + rng.randrange(10**6) * 1_000 + 500 for _ in range(5_000)]  # half a microsecond: to even
    assert [iso_ns(ns) for ns in times] == [stdlib(ns) for ns in times]
    assert iso_ns(-1_500) == stdlib(-1_500)  # before 1970: the standard library's own text
