"""What routing reads of a stored span (store/online/refs.py SpanRef): attributes and resource from one parse
of its body, the evaluation marker, and bodies msgspec refuses read by the standard library."""

from __future__ import annotations

import json

from evaluator_host.observability.tracing import MARKER
from evaluator_host.store.online.refs import SpanRef


def _ref(body: str) -> SpanRef:
    return SpanRef("a" * 16, "chat", "svc", 1, body)


def test_attributes_and_resource_come_from_the_body_and_an_unread_body_has_none() -> None:
    ref = _ref(json.dumps({"attributes": {"user.id": "u-1", "n": 3}, "resource": {"service.name": "svc"}}))
    assert ref.attributes == {"user.id": "u-1", "n": 3}
    assert ref.resource == {"service.name": "svc"}
    assert not ref.evaluation
    empty = _ref("")
    assert empty.attributes == {} and empty.resource == {} and not empty.evaluation


def test_a_body_with_a_non_finite_number_is_still_read() -> None:
    body = '{"attributes":{"x":NaN,"session.id":"s-1"},"resource":{"r":Infinity}}'  # the standard library's text
    ref = _ref(body)
    assert ref.attributes["session.id"] == "s-1"
    assert ref.resource["r"] == float("inf")


def test_the_evaluation_marker_on_the_span_or_its_resource_marks_the_span() -> None:
    assert _ref(json.dumps({"attributes": {MARKER: True}, "resource": {}})).evaluation
    assert _ref(json.dumps({"attributes": {}, "resource": {MARKER: "true"}})).evaluation
    assert not _ref(json.dumps({"attributes": {MARKER: False}, "resource": {}})).evaluation
