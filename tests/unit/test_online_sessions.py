"""The session dict's pure parts (issue 50): a trace's session id under the default keys or a rule's own
(on a span or its resource; evaluation traffic names none; an odd value names none), a turn's messages,
and the conversation — a chat app that resends the history each turn has it once."""

from __future__ import annotations

from evaluator_host.online.levels.sessions import conversation, session_of, turn_messages
from evaluator_host.store.online.refs import SpanRef


def ref(attributes: dict[str, object], resource: dict[str, object] | None = None, evaluation: bool = False) -> SpanRef:
    return SpanRef("0" * 16, "s", None, 0, "", attributes, evaluation, resource or {})


def test_the_session_id_is_the_first_default_key_found_on_any_span_or_its_resource() -> None:
    assert session_of([ref({}), ref({"gen_ai.conversation.id": "c"}), ref({"session.id": "s"})], None) == "s"
    assert session_of([ref({}, {"langfuse.session.id": "l"})], None) == "l"
    assert session_of([ref({"session.id": 42})], None) == "42"
    for odd in ("", "x" * 129, True, 1.5, ["a"], {"a": 1}):
        assert session_of([ref({"session.id": odd})], None) is None
    assert session_of([ref({"session.id": "s"}, evaluation=True)], None) is None  # evaluation traffic
    assert session_of([ref({"session.id": "s", "user.id": "u"})], "user.id") == "u"
    assert session_of([ref({"session.id": "s"})], "user.id") is None  # a rule's own key only


def test_a_turns_messages_come_from_its_inputs_and_outputs() -> None:
    chat = {"messages": [{"role": "user", "content": "hi"}], "prompt": "hi"}
    assert turn_messages(chat, "hello") == (
        [{"role": "user", "content": "hi"}],
        [{"role": "assistant", "content": "hello"}],
    )
    assert turn_messages("hi", {"role": "assistant", "content": "x"}) == (
        [{"role": "user", "content": "hi"}],
        [{"role": "assistant", "content": "x"}],
    )
    assert turn_messages({"q": 1}, None) == ([{"role": "user", "content": {"q": 1}}], [])
    assert turn_messages(None, None) == ([], [])


def test_a_history_resent_each_turn_is_in_the_conversation_once() -> None:
    system, u1, a1, u2, a2 = (
        {"role": "system", "content": "brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "A: hi"},
        {"role": "user", "content": "bye"},
        {"role": "assistant", "content": "A: bye"},
    )
    assert conversation([([system, u1], [a1]), ([system, u1, a1, u2], [a2])]) == [system, u1, a1, u2, a2]
    assert conversation([([u1], [a1]), ([u2], [a2])]) == [u1, a1, u2, a2]  # only the new message each turn
    assert conversation([([system, u1], [a1]), ([system, u2], [a2])]) == [system, u1, a1, u2, a2]
    assert conversation([([system, u1], [a1]), ([system, u1, a1], [a2])]) == [system, u1, a1, a2]  # regenerated


def test_a_question_asked_again_is_a_new_turn_not_a_resent_history() -> None:
    u1, a1, u2, a2, a3 = (
        {"role": "user", "content": "capital of France?"},
        {"role": "assistant", "content": "Paris"},
        {"role": "user", "content": "capital of Australia?"},
        {"role": "assistant", "content": "Sydney"},
        {"role": "assistant", "content": "Paris, as I said"},
    )
    system = {"role": "system", "content": "brief"}
    assert conversation([([u1], [a1]), ([u2], [a2]), ([u1], [a3])]) == [u1, a1, u2, a2, u1, a3]
    assert conversation([([u1], [a1]), ([u1], [a3])]) == [u1, a1, u1, a3]
    assert conversation([([system, u1], [a1]), ([system, u1], [a3])]) == [system, u1, a1, u1, a3]
