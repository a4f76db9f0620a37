"""A span's ``inputs`` and ``outputs``, from whichever convention its instrumentation speaks.

Contract (docs/online.md, "Mapping"): :func:`span_inputs_outputs` reads one span of the trace dict
(:mod:`evaluator_host.evaluation.trace_shape`: attributes nested by their dotted keys) and answers
``(inputs, outputs)`` from the first convention, in this order, that gives either side:

1. **Agenta** ``ag.data.inputs`` / ``ag.data.outputs``: the values as they are (a JSON string
   holding an object or array is parsed).
2. **OpenTelemetry GenAI semantic conventions**: ``gen_ai.input.messages`` /
   ``gen_ai.output.messages`` (JSON, messages of ``parts``) with ``gen_ai.system_instructions``;
   the older ``gen_ai.prompt`` / ``gen_ai.completion`` (text or JSON), also indexed
   (``gen_ai.prompt.0.role`` / ``.content``, as OpenLLMetry writes them); span events
   (``gen_ai.system|user|assistant|tool.message``, ``gen_ai.choice``, ``gen_ai.content.prompt`` /
   ``.completion``, ``gen_ai.client.inference.operation.details``).
3. **OpenInference**: ``llm.input_messages.N.message.*`` / ``llm.output_messages.N.message.*``,
   else ``input.value`` / ``output.value`` (parsed when ``*.mime_type`` is JSON or the text is a
   JSON object or array).

Chat conventions give ``inputs = {"messages": [{"role", "content", …}], "prompt": <the last user
message's text>, "system"?: <system instructions' text>, "model"?: <the requested model>}`` and
``outputs = <the last output message's text>`` (the message itself when it has no text: a tool
call). Pure functions, no I/O; :mod:`evaluator_host.online.paths` resolves rule paths.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

from evaluator_host.errors import MappingPathError

__all__ = [
    "MAX_PATH_CHARS",
    "MAX_PATH_STEPS",
    "attr",
    "check_path",
    "maybe_json",
    "resolve",
    "span_inputs_outputs",
    "spans_depth_first",
    "trace_inputs_outputs",
]

_ROLE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
_JSON_TYPES = ("application/json", "application/x-ndjson")


def maybe_json(value: Any) -> Any:
    """``value`` parsed when it is a string holding a JSON object or array, else itself."""
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in ("{", "[") and text[-1:] in ("}", "]"):
            try:
                return json.loads(text)
            except ValueError:
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
    content = maybe_json(content) if isinstance(content, str) and content.lstrip()[:1] == "[" else content
    if content is None or isinstance(content, str):
        return content
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


def _agenta(attrs: Any) -> tuple[Any, Any]:
    return maybe_json(attr(attrs, "ag.data.inputs")), maybe_json(attr(attrs, "ag.data.outputs"))


def _gen_ai(attrs: Any, events: list[Any]) -> tuple[Any, Any]:
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


def _openinference(attrs: Any) -> tuple[Any, Any]:
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
        except ValueError:
            return value
    return maybe_json(value)


def span_inputs_outputs(span: dict[str, Any]) -> tuple[Any, Any]:
    """``(inputs, outputs)`` of one span of the trace dict (``(None, None)``: no convention applies)."""
    attrs = span.get("attributes") or {}
    events = span.get("events") or []
    for found in (_agenta(attrs), _gen_ai(attrs, events), _openinference(attrs)):
        if found[0] is not None or found[1] is not None:
            return found
    return None, None


def spans_depth_first(trace: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every span of the trace dict, depth-first, each level in start order (an explicit stack:
    a deep trace cannot exhaust Python's recursion)."""
    stack = list(reversed(list((trace.get("spans") or {}).values())))
    while stack:
        span = stack.pop()
        yield span
        stack.extend(reversed(list((span.get("children") or {}).values())))


def trace_inputs_outputs(trace: dict[str, Any]) -> tuple[Any, Any, str | None]:
    """``(inputs, outputs, span_id)``: the root span's when it has either, else those of the first span
    (depth-first, start order) that has; ``(None, None, None)`` when no span has any."""
    for span in spans_depth_first(trace):
        inputs, outputs = span_inputs_outputs(span)
        if inputs is not None or outputs is not None:
            return inputs, outputs, span.get("span_id")
    return None, None, None


MAX_PATH_CHARS = 500
MAX_PATH_STEPS = 32
_HEAD = re.compile(r"(trace|span|root)(?=$|[.\[])")
_STEP = re.compile(r"\.([^.\[\]=\s]+)|\[(\d+)\]|\[([^.\[\]=\s][^\[\]=\s]*)=([^\[\]]*)\]")
_Step = tuple[str, str, str]  # ("key", key, "") | ("index", digits, "") | ("select", field, value)


@lru_cache(maxsize=1024)
def _parse(path: str) -> tuple[str, tuple[_Step, ...]]:
    if not isinstance(path, str) or not path:
        raise MappingPathError("a mapping path must be a non-empty string, e.g. 'root.attributes.ag.data.inputs'")
    if len(path) > MAX_PATH_CHARS:
        raise MappingPathError(f"a mapping path is at most {MAX_PATH_CHARS} characters")
    head = _HEAD.match(path)
    if head is None:
        raise MappingPathError(f"mapping path {path!r} must start with 'trace', 'span' or 'root'")
    steps: list[_Step] = []
    at = head.end()
    while at < len(path):
        step = _STEP.match(path, at)
        if step is None:
            raise MappingPathError(
                f"mapping path {path!r}: cannot read from character {at + 1} ({path[at : at + 20]!r}); "
                "steps are '.key', '[0]' or '[field=value]'"
            )
        key, index, field, value = step.groups()
        steps.append(("key", key, "") if key else ("index", index, "") if index else ("select", field, value))
        at = step.end()
    if len(steps) > MAX_PATH_STEPS:
        raise MappingPathError(f"mapping path {path!r} has more than {MAX_PATH_STEPS} steps")
    if steps and steps[0][0] == "select" and head.group(1) != "span":
        raise MappingPathError(f"mapping path {path!r}: only 'span[field=value]' selects a span of the trace")
    return head.group(1), tuple(steps)


def check_path(path: str) -> None:
    """Raise :class:`MappingPathError` (422) when ``path`` is not a mapping path (the syntax above)."""
    _parse(path)


def _text_of(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _matches(item: Any, field: str, value: str) -> bool:
    found = attr(item, field)
    return found is not None and _text_of(found) == value


def _is_span(node: Any) -> bool:
    return isinstance(node, Mapping) and "span_id" in node and "attributes" in node


def _step(node: Any, step: _Step) -> Any:
    kind, key, value = step
    if isinstance(node, str):
        node = maybe_json(node)
    if kind == "select":
        items = node.values() if isinstance(node, Mapping) else node if isinstance(node, list) else ()
        return next((item for item in items if _matches(item, key, value)), None)
    if isinstance(node, list):
        return node[int(key)] if key.isdigit() and int(key) < len(node) else None
    if not isinstance(node, Mapping) or kind == "index":
        return None
    if key not in node and key in ("inputs", "outputs") and _is_span(node):
        return span_inputs_outputs(dict(node))[0 if key == "inputs" else 1]
    return node.get(key)


def resolve(view: dict[str, Any], path: str) -> Any:
    """The value at ``path`` in ``view`` (``{"trace", "span", "root"}``); None when a step is missing.
    A malformed path raises :class:`MappingPathError`."""
    head, steps = _parse(path)
    if steps and steps[0][0] == "select":  # span[field=value]: a span of the whole trace
        _, field, value = steps[0]
        node: Any = next((s for s in spans_depth_first(view.get("trace") or {}) if _matches(s, field, value)), None)
        steps = steps[1:]
    else:
        node = view.get(head)
    for step in steps:
        if node is None:
            return None
        node = _step(node, step)
    return node[""] if isinstance(node, Mapping) and "" in node else node  # a value that was also a prefix
