"""A span's ``inputs`` and ``outputs``, from whichever convention its instrumentation speaks.

Contract (docs/online.md, "Mapping"): :func:`span_inputs_outputs` reads one span of the trace dict
(:mod:`evaluator_host.evaluation.trace_shape`: attributes nested by their dotted keys) and answers
``(inputs, outputs)`` from the first convention, in this order, that gives either side:

1. **Agenta** ``ag.data.inputs`` / ``ag.data.outputs``: the values as Agenta's SDK wrote them
   (flat keys nested, ``@ag.type=json:`` text and JSON object/array text parsed, an output under
   ``__default__`` unwrapped).
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
call). The readers are :mod:`evaluator_host.online.reading.conventions`. Pure functions, no I/O.

Rule paths (:func:`resolve`, :func:`check_path`) read a *view* ``{"trace", "span", "root"}``::

    path := head step*              e.g. span.attributes.gen_ai.request.model
    head := "trace" | "span" | "root"
          | "span[" field "=" value "]"   the first span of the trace (depth-first) whose field
                                          (itself dotted) equals value as text: span[name=llm]
    step := "." key                 a key of an object; digits also index a list (messages.0)
          | "[" digits "]"          a list's item (messages[0])
          | "[" field "=" value "]" the first item of a list (or value of an object) whose field
                                    equals value as text: events[name=gen_ai.choice]

A missing step answers None (never an error); a step into a string holding a JSON object or array
parses it; ``inputs`` / ``outputs`` on a span (which has no such keys) answer its
:func:`span_inputs_outputs`. At most ``MAX_PATH_CHARS`` characters and ``MAX_PATH_STEPS`` steps.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

from evaluator_host.errors import MappingPathError
from evaluator_host.online.reading.conventions import agenta, attr, gen_ai, maybe_json, openinference

__all__ = [
    "MAX_PATH_CHARS",
    "MAX_PATH_STEPS",
    "attr",
    "check_path",
    "maybe_json",
    "path_view",
    "resolve",
    "span_inputs_outputs",
    "spans_depth_first",
    "trace_inputs_outputs",
]


def span_inputs_outputs(span: dict[str, Any]) -> tuple[Any, Any]:
    """``(inputs, outputs)`` of one span of the trace dict (``(None, None)``: no convention applies)."""
    attrs = span.get("attributes") or {}
    events = span.get("events") or []
    found = agenta(attrs)  # each convention read only when the ones before it found nothing
    if found[0] is None and found[1] is None:
        found = gen_ai(attrs, events)
    if found[0] is None and found[1] is None:
        found = openinference(attrs)
    return found if found[0] is not None or found[1] is not None else (None, None)


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
    (depth-first, start order) that has; ``(None, None, None)`` when no span has any. A trace's real
    roots (no parent) come before spans whose parent never arrived, whatever their start times."""
    roots = list((trace.get("spans") or {}).values())
    roots.sort(key=lambda root: root.get("parent_id") is not None)  # stable: start order otherwise
    for span in spans_depth_first({"spans": {index: root for index, root in enumerate(roots)}}):
        inputs, outputs = span_inputs_outputs(span)
        if inputs is not None or outputs is not None:
            return inputs, outputs, span.get("span_id")
    return None, None, None


def path_view(trace: dict[str, Any], span_id: str | None = None, root_span_id: str | None = None) -> dict[str, Any]:
    """The view paths read: ``{"trace", "span", "root"}`` — ``root`` the span ``root_span_id`` (else the
    first span without a parent, else the first root), ``span`` the span ``span_id`` (else the root)."""
    spans = list(spans_depth_first(trace))
    by_id = {s.get("span_id"): s for s in spans} if span_id or root_span_id else {}
    roots = list((trace.get("spans") or {}).values())
    root = by_id.get(root_span_id) or next((r for r in roots if r.get("parent_id") is None), None)
    root = root or (roots[0] if roots else None)
    return {"trace": trace, "span": by_id.get(span_id) or root, "root": root}


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
