"""Sessions (issue 50): a conversation's traces, grouped by a session id and scored together.

Contract (docs/online.md, "Session level"):

* :func:`session_of` — a trace's session id under a key: the value of the attribute ``key`` on any of
  its spans (its own attributes, then its resource's; spans in start order), or, with no key, of the
  first of :data:`DEFAULT_KEYS` any span has. A string or an integer; empty, longer than
  :data:`MAX_SESSION_ID` characters, or another type: no session. Evaluation traffic (spans carrying the
  marker) never names a session.
* :func:`conversation` — the session's messages: each trace's input messages, then its output
  messages, normalized as a trace's ``inputs``/``outputs`` are (docs/online.md, "Mapping"). A chat app
  that sends the conversation so far with each turn repeats it: the input messages that repeat the
  conversation built so far (its longest common prefix) are not added again — though never a turn's last
  input message unless the turn resends the whole conversation so far (a question asked again, a first
  message said again, is the user's new message, not history).
* :func:`build_session` — the dict evaluators get as ``trace``: ``{"session_id", "traces": [trace dicts
  in start order], "messages", "num_traces", "duration_ms"}`` (``truncated: true`` when only the latest
  :data:`MAX_SESSION_TRACES` traces were read); :func:`session_case` — the case: that dict, ``inputs``
  the first trace's, ``outputs`` the last trace's (as a trace-level rule's evaluated root gives them, or
  the rule's ``mapping`` applied to the first and to the last trace).

Pure functions over loaded traces; no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection

from evaluator_host.evaluation.models import Case
from evaluator_host.online.levels.cases import build_case, load_many
from evaluator_host.online.levels.traces import LoadedTrace
from evaluator_host.online.reading import mapping
from evaluator_host.store.online import sessions as online_sessions
from evaluator_host.store.online.scores import DEFAULT_KEYS, SpanRef

__all__ = [
    "DEFAULT_KEYS",
    "MAX_SESSION_ID",
    "MAX_SESSION_TRACES",
    "build_session",
    "conversation",
    "ends",
    "load_sessions",
    "session_case",
    "session_of",
    "turn_messages",
]

MAX_SESSION_ID = 128  # characters; a longer value names no session
MAX_SESSION_TRACES = 200  # a session's latest traces read for one case (the dict says truncated past it)


def _valid(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    text = str(value)
    return text if 0 < len(text) <= MAX_SESSION_ID else None


def session_of(spans: Sequence[Any], key: str | None) -> str | None:
    """The session id of a trace's ``spans`` (objects with ``attributes``, ``resource`` and ``evaluation``,
    as :class:`~evaluator_host.store.online.scores.SpanRef`), under ``key`` (None: the defaults)."""
    for one in (key,) if key else DEFAULT_KEYS:
        for span in spans:
            if span.evaluation or (isinstance(span, SpanRef) and not span.may_have(one)):  # not parsed for it
                continue
            for part in (span.attributes, span.resource):
                if one in part:
                    found = _valid(part[one])
                    if found is not None:
                        return found
    return None


def turn_messages(inputs: Any, outputs: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One trace's (input messages, output messages) from its ``inputs``/``outputs``: a chat's
    ``{"messages": [...]}`` as they are, text as one user (input) or assistant (output) message, another
    value as one message whose ``content`` it is; nothing: no message."""
    if isinstance(inputs, dict) and isinstance(inputs.get("messages"), list):
        ins = [m for m in inputs["messages"] if isinstance(m, dict)]
    elif inputs is None or inputs == {}:
        ins = []
    else:
        ins = [{"role": "user", "content": inputs}]
    if outputs is None:
        outs: list[dict[str, Any]] = []
    elif isinstance(outputs, dict) and "role" in outputs:
        outs = [outputs]
    else:
        outs = [{"role": "assistant", "content": outputs}]
    return ins, outs


def conversation(turns: Sequence[tuple[list[dict[str, Any]], list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """The messages of a session's turns in order (see the module docstring: a repeated history once)."""
    out: list[dict[str, Any]] = []
    for ins, outs in turns:
        # A turn's last input message is its own (the question asked again, say) unless the turn resends the
        # whole conversation so far: only then may the common prefix take all of its inputs.
        most = len(out) if len(ins) >= len(out) else len(ins) - 1
        same = 0
        while same < most and _same_message(out[same], ins[same]):
            same += 1
        out.extend(ins[same:])
        out.extend(outs)
    return out


def _same_message(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.get("role") == b.get("role") and a.get("content") == b.get("content")


def _duration_ms(loaded: Sequence[LoadedTrace]) -> float | None:
    starts = [s.start_ns for t in loaded for s in t.spans]
    ends = [s.end_ns for t in loaded for s in t.spans]
    if not starts:
        return None
    return max(0, max(ends) - min(starts)) / 1e6


def build_session(session_id: str, loaded: Sequence[LoadedTrace], num_traces: int | None = None) -> dict[str, Any]:
    """The session dict of ``loaded`` (its traces in start order; ``num_traces``: how many it has in all)."""
    turns = []
    for trace in loaded:
        inputs, outputs, _ = mapping.trace_inputs_outputs(trace.trace)
        turns.append(turn_messages(inputs, outputs))
    total = len(loaded) if num_traces is None else max(num_traces, len(loaded))
    out: dict[str, Any] = {
        "session_id": session_id,
        "traces": [t.trace for t in loaded],
        "messages": conversation(turns),
        "num_traces": total,
        "duration_ms": _duration_ms(loaded),
    }
    if total > len(loaded):
        out["truncated"] = True
    return out


def ends(loaded: Sequence[LoadedTrace], rule_mapping: dict[str, Any] | None) -> tuple[Any, Any]:
    """``(inputs, outputs)``: the first trace's inputs and the last trace's outputs (see the module
    docstring); raises :class:`~evaluator_host.online.scoring.scorer.Refused` when a mapping path finds nothing."""
    first = build_case(loaded[0], None, rule_mapping)
    last = first if len(loaded) == 1 else build_case(loaded[-1], None, rule_mapping)
    return first.inputs, last.outputs


def session_case(
    session_id: str, loaded: Sequence[LoadedTrace], num_traces: int | None, rule_mapping: dict[str, Any] | None
) -> Case:
    """The case of one (rule, session): see the module docstring."""
    inputs, outputs = ends(loaded, rule_mapping)
    return Case(inputs=inputs, outputs=outputs, trace=build_session(session_id, loaded, num_traces))


def load_sessions(
    conn: Connection, keys: set[tuple[str, str]], max_spans: int
) -> dict[tuple[str, str], tuple[list[LoadedTrace], int]]:
    """The sessions ``keys`` (workspace, session id): each one's latest :data:`MAX_SESSION_TRACES` traces
    in start order (those retention left) and how many it has; a session with none left is absent."""
    members = online_sessions.members(conn, keys, MAX_SESSION_TRACES)
    wanted = {(ws, t) for (ws, _), (ids, _) in members.items() for t in ids}
    loaded = load_many(conn, wanted, max_spans)
    out: dict[tuple[str, str], tuple[list[LoadedTrace], int]] = {}
    for (ws, sid), (ids, total) in members.items():
        traces = [loaded[(ws, t)] for t in ids if (ws, t) in loaded]
        if traces:
            out[(ws, sid)] = (traces, total)
    return out
