"""What routing reads of a stored span (store/online/refs.py SpanRef): attributes and resource from one parse
of its body, the evaluation marker, and bodies msgspec refuses read by the standard library."""

from __future__ import annotations

import json
from typing import Any

import pytest

from evaluator_host.observability.tracing import MARKER
from evaluator_host.online.levels.sessions import session_of
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


def _session_of_parsed(bodies: list[str], key: str | None) -> str | None:
    """session_of over the same spans with every body parsed first (may_have then never skips one)."""
    refs = [_ref(body) for body in bodies]
    for ref in refs:
        _ = ref.attributes
    return session_of(refs, key)


_KEYS = ["session.id", "user.id", 'a"b', "a\\b", "é.id", "tab\tkey", "a b", "x"]


@pytest.mark.parametrize("key", [*_KEYS, "\ud800", None])
def test_a_session_key_whose_text_is_not_in_a_body_is_answered_without_parsing_it_and_the_same(key: str | None) -> None:
    """Routing's shortcut (SpanRef.may_have): the session id found is the one a parse of every body finds —
    for keys JSON writes as they are and keys it escapes, on the span, its resource, or only in an event's
    attributes (the text is there, the key is not an attribute: a parse says so), in both JSON writers' text."""
    for where in ("attributes", "resource", "events", None):
        for ascii_only in (False, True):
            bodies = []
            for named in _KEYS[:-1]:  # "x" on no span
                data: dict[str, Any] = {"attributes": {"n": 1}, "resource": {}}
                if where == "events":
                    data["events"] = [{"name": "e", "attributes": {named: "ev"}}]
                elif where is not None:
                    data[where] = {named: f"v-{len(named)}"}
                bodies.append(json.dumps(data, ensure_ascii=ascii_only))
            assert session_of([_ref(b) for b in bodies], key) == _session_of_parsed(bodies, key)


def test_a_span_whose_attributes_are_known_already_is_never_skipped() -> None:
    known = SpanRef("a" * 16, "chat", "svc", 1, "", _attributes={"user.id": "u-9"})  # a trial's decoded span
    assert known.may_have("user.id")
    assert session_of([known], "user.id") == "u-9"
    assert not _ref('{"attributes":{"n":1}}').may_have("user.id")
    assert _ref('{"attributes":{"n":1}}').may_have('a"b')  # an escaped key: never skipped


def test_the_evaluation_marker_is_read_once_a_span() -> None:
    ref = _ref(json.dumps({"attributes": {MARKER: True}, "resource": {}}))
    assert ref.evaluation and ref.evaluation
    assert ref._evaluation is True
