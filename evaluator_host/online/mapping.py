"""Interim stand-in for s30-mapping's module (same signatures); replaced by it at merge.

Paths are dotted: ``trace.…``, ``span.…`` (the evaluated span) or ``root.…`` (the root span); a list
is indexed by a number. Inputs/outputs of a span: ``ag.data.inputs/outputs``, else ``gen_ai.*``,
else OpenInference's ``input.value`` / ``output.value``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from evaluator_host.errors import FieldMappingError

__all__ = ["check_path", "resolve", "span_inputs_outputs", "trace_inputs_outputs"]

_ROOTS = ("trace", "span", "root")


def check_path(path: str) -> None:
    """``FieldMappingError`` for a path that is not ``trace|span|root`` then dotted keys."""
    parts = path.split(".")
    if parts[0] not in _ROOTS or any(not p for p in parts):
        raise FieldMappingError(f"mapping path {path!r} must start with one of {', '.join(_ROOTS)} (dotted keys)")


def resolve(view: dict[str, Any], path: str) -> Any:
    """The value at ``path`` in ``view`` (``{"trace", "span", "root"}``), or None."""
    node: Any = view
    for part in path.split("."):
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
        if node is None:
            return None
    return node


def span_inputs_outputs(span: dict[str, Any]) -> tuple[Any, Any]:
    """A span's inputs and outputs (None when it names none)."""
    attrs = span.get("attributes") or {}
    ag = (attrs.get("ag") or {}).get("data") if isinstance(attrs.get("ag"), dict) else None
    if isinstance(ag, dict) and ("inputs" in ag or "outputs" in ag):
        return ag.get("inputs"), ag.get("outputs")
    gen = attrs.get("gen_ai")
    if isinstance(gen, dict) and ("prompt" in gen or "completion" in gen or "input" in gen or "output" in gen):
        return gen.get("prompt", gen.get("input")), gen.get("completion", gen.get("output"))
    inp, out = attrs.get("input"), attrs.get("output")
    if isinstance(inp, dict) or isinstance(out, dict):
        return (inp or {}).get("value"), (out or {}).get("value")
    return None, None


def _walk(spans: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for span in spans.values():
        yield span
        yield from _walk(span.get("children") or {})


def trace_inputs_outputs(trace: dict[str, Any]) -> tuple[Any, Any, str | None]:
    """The first span (depth-first from the roots) with inputs or outputs: its inputs, outputs and id."""
    for span in _walk(trace.get("spans") or {}):
        inputs, outputs = span_inputs_outputs(span)
        if inputs is not None or outputs is not None:
            return inputs, outputs, span.get("span_id")
    return None, None, None
