"""The conventions a span's inputs and outputs are read from: Agenta's ``ag.data``, the OpenTelemetry
GenAI semantic conventions and OpenInference (docs/online.md, "Mapping").

Contract: each reader (:func:`agenta`, :func:`gen_ai`, :func:`openinference`) takes a span's nested
attributes (and events) as the trace dict holds them and answers ``(inputs, outputs)``, None for a
side it does not find; :mod:`evaluator_host.online.reading.mapping` picks the first that finds either.
Chat messages are normalized to ``{"role", "content" (text or None), …}`` with, when present,
``parts`` (non-text parts kept whole), ``tool_calls`` (``{"id", "name", "arguments"}``), ``name``,
``tool_call_id``, ``finish_reason``. Pure functions, no I/O, never raising on odd values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["agenta", "attr", "gen_ai", "maybe_json", "openinference"]

_ROLE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
_JSON_TYPES = ("application/json", "application/x-ndjson")
_AG_JSON, _AG_NONE = "@ag.type=json:", "@ag.type=none:"  # Agenta's SDK's marks on attribute text


def maybe_json(value: Any) -> Any:
    """``value`` parsed when it is a string holding a JSON object or array, else itself."""
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in ("{", "[") and text[-1:] in ("}", "]"):
            try:
                return json.loads(text)
            except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
                return value
    return value


def attr(attributes: Any, dotted: str) -> Any:
    """The value at ``dotted`` in nested ``attributes`` (None when a step is missing). A key that was
    both a value and a prefix answers its value (the ``""`` entry :func:`nest` kept)."""
    node = attributes
    for part in dotted.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    if isinstance(node, Mapping) and "" in node:
        return node[""]
    return node


def _indexed(node: Any) -> list[Any]:
    """The values of an indexed attribute (``{"0": …, "1": …}`` nested, or a list), in index order."""
    if isinstance(node, list):
        return node
    if not isinstance(node, Mapping):
        return []
    keys = sorted((int(k), k) for k in node if isinstance(k, str) and k.isdigit())
    return [node[k] for _, k in keys]


def _text(content: Any) -> str | None:
    """The text of a message's content: a string, or the text parts of a list of parts, joined."""
    if isinstance(content, str):
        parts = maybe_json(content) if content.lstrip()[:1] == "[" else None  # JSON text of parts
        if not (isinstance(parts, list) and parts and all(isinstance(p, Mapping) and "type" in p for p in parts)):
            return content
        content = parts
    if content is None:
        return None
    if isinstance(content, Mapping):
        content = [content]
    if not isinstance(content, list):
        return str(content)
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, Mapping) and part.get("type", "text") == "text":
            text = part.get("content", part.get("text"))
            if isinstance(text, str):
                texts.append(text)
    return "\n".join(texts) if texts else None


def _message(raw: Any, role: str | None = None) -> dict[str, Any] | None:
    """One message normalized: ``role``, ``content`` (text or None), and what else it carries
    (``parts`` with non-text parts, ``tool_calls``, ``name``, ``finish_reason``, ``tool_call_id``)."""
    raw = maybe_json(raw)
    if isinstance(raw, str):
        return {"role": role or "user", "content": raw}
    if not isinstance(raw, Mapping):
        return None
    inner_raw = maybe_json(raw.get("message"))
    if isinstance(inner_raw, Mapping):  # OpenInference's "message" level, a gen_ai.choice event
        inner = dict(inner_raw)
        for extra in ("finish_reason", "index"):
            if extra in raw and extra not in inner:
                inner[extra] = raw[extra]
        raw = inner
    out: dict[str, Any] = {"role": raw.get("role") or role or "user"}
    if "parts" in raw:  # the GenAI conventions' messages
        parts = raw["parts"] if isinstance(raw["parts"], list) else []
        out["content"] = _text(parts)
        if any(isinstance(p, Mapping) and p.get("type", "text") != "text" for p in parts):
            out["parts"] = parts
    elif "contents" in raw:  # OpenInference's multi-part content
        out["content"] = _text([_oi_part(p) for p in _indexed(raw["contents"])])
    else:
        out["content"] = _text(raw.get("content"))
    calls = [_tool_call(c) for c in _indexed(raw.get("tool_calls"))]
    if calls:
        out["tool_calls"] = calls
    for extra in ("name", "tool_call_id", "finish_reason"):
        if raw.get(extra) is not None:
            out[extra] = raw[extra]
    return out


def _oi_part(part: Any) -> Any:
    content = part.get("message_content", part) if isinstance(part, Mapping) else part
    return {"type": content.get("type", "text"), "text": content.get("text")} if isinstance(content, Mapping) else part


def _tool_call(call: Any) -> Any:
    if not isinstance(call, Mapping):
        return call
    call = call.get("tool_call", call)  # OpenInference's "tool_call" level
    function = call.get("function") if isinstance(call.get("function"), Mapping) else {}
    return {
        "id": call.get("id"),
        "name": call.get("name", function.get("name")),
        "arguments": maybe_json(call.get("arguments", function.get("arguments"))),
    }


def _messages(value: Any, role: str | None = None) -> list[dict[str, Any]]:
    """Messages from a JSON array, a list, an indexed object, or one text (one ``role`` message)."""
    value = maybe_json(value)
    if isinstance(value, str):
        return [{"role": role or "user", "content": value}]
    items = _indexed(value) if not (isinstance(value, Mapping) and "role" in value) else [value]
    return [m for m in (_message(item, role) for item in items) if m is not None]


def _chat(
    messages: list[dict[str, Any]], output: list[dict[str, Any]], system: str | None, model: Any
) -> tuple[Any, Any]:
    inputs: dict[str, Any] | None = None
    if messages or system:
        users = [m for m in messages if m.get("role") == "user"]
        inputs = {"messages": messages, "prompt": users[-1]["content"] if users else None}
        if system:
            inputs["system"] = system
        if model is not None:
            inputs["model"] = model
    outputs: Any = None
    if output:
        assistants = [m for m in output if m.get("role") in ("assistant", "model")] or output
        last = assistants[-1]
        outputs = last["content"] if last.get("content") is not None else last
    return inputs, outputs


def _agenta_value(value: Any, depth: int = 0) -> Any:
    """An ``ag.data`` value as Agenta's SDK meant it: its ``@ag.type=json:`` / ``@ag.type=none:`` text
    decoded, JSON text parsed, ``{"__default__": x}`` (a value that was not an object) unwrapped."""
    if isinstance(value, str):
        if value == _AG_NONE:
            return None
        if value.startswith(_AG_JSON):
            try:
                return json.loads(value[len(_AG_JSON) :])
            except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
                return value
        return maybe_json(value)
    if isinstance(value, Mapping) and depth < 32:
        decoded = {k: _agenta_value(v, depth + 1) for k, v in value.items()}
        return decoded["__default__"] if set(decoded) == {"__default__"} else decoded
    if isinstance(value, list) and depth < 32:
        return [_agenta_value(v, depth + 1) for v in value]
    return value


def agenta(attrs: Any) -> tuple[Any, Any]:
    return _agenta_value(attr(attrs, "ag.data.inputs")), _agenta_value(attr(attrs, "ag.data.outputs"))


def gen_ai(attrs: Any, events: list[Any]) -> tuple[Any, Any]:
    model = attr(attrs, "gen_ai.request.model") or attr(attrs, "gen_ai.response.model")
    sources = [attrs]  # the span's attributes, then events carrying the same attributes
    sources += [
        e.get("attributes")
        for e in events
        if isinstance(e, Mapping)
        and e.get("name")
        in ("gen_ai.client.inference.operation.details", "gen_ai.content.prompt", "gen_ai.content.completion")
    ]
    messages: list[dict[str, Any]] = []
    output: list[dict[str, Any]] = []
    system: str | None = None
    for source in sources:
        system = system or _text(maybe_json(attr(source, "gen_ai.system_instructions")))
        messages = messages or _messages(attr(source, "gen_ai.input.messages"))
        output = output or _messages(attr(source, "gen_ai.output.messages"), "assistant")
        messages = messages or _messages(attr(source, "gen_ai.prompt"))  # text, JSON or indexed
        output = output or _messages(attr(source, "gen_ai.completion"), "assistant")
    if not messages and not output:
        messages, output = _gen_ai_events(events)
    return _chat(messages, output, system, model)


def _gen_ai_events(events: list[Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    messages: list[dict[str, Any]] = []
    output: list[dict[str, Any]] = []
    for event in events:
        if not isinstance(event, Mapping):
            continue
        name, attrs = event.get("name"), event.get("attributes") or {}
        if name in _ROLE_EVENTS or name == "gen_ai.choice":
            body = attr(attrs, "gen_ai.event.content")
            body = maybe_json(body) if body is not None else attrs
            message = _message(body, _ROLE_EVENTS.get(str(name), "assistant"))
            if message is not None:
                (output if name == "gen_ai.choice" else messages).append(message)
    return messages, output


def openinference(attrs: Any) -> tuple[Any, Any]:
    messages = _messages(attr(attrs, "llm.input_messages"))
    output = _messages(attr(attrs, "llm.output_messages"), "assistant")
    inputs, outputs = _chat(messages, output, None, attr(attrs, "llm.model_name"))
    if inputs is None:
        inputs = _oi_value(attrs, "input")
    if outputs is None:
        outputs = _oi_value(attrs, "output")
    return inputs, outputs


def _oi_value(attrs: Any, side: str) -> Any:
    value = attr(attrs, f"{side}.value")
    mime = attr(attrs, f"{side}.mime_type")
    if isinstance(value, str) and isinstance(mime, str) and mime.split(";")[0].strip() in _JSON_TYPES:
        try:
            return json.loads(value)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            return value
    return maybe_json(value)
