"""Normalization of evaluator return values — the one implementation for all languages.

Harnesses only turn a returned value into JSON-safe data; non-finite numbers arrive
as ``{"$nonfinite": "nan" | "inf" | "-inf"}``, ``undefined`` as ``{"$undefined": true}``
and values that are not JSON as ``{"$unserializable": "<type name>"}``. The rules
here are the table in api.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ACCEPTED_SHAPES", "LABEL_CHARS", "PASS_KEYS", "REASON_CHARS", "REASON_KEYS", "Normalized", "normalize"]

ACCEPTED_SHAPES = (
    'accepted return values: a bool, a finite number, {"score": <bool|number>, ...details}, '
    "or a dict of named bool/number outputs (string values go to details)"
)

# Result shapes of other platforms (promptfoo {pass, score, reason}, Phoenix {label, score,
# explanation}, Opik {value, reason}, Langfuse categorical scores): read from a returned dict.
REASON_KEYS = ("reason", "explanation", "comment")  # the first string one is the result's `reason`
PASS_KEYS = ("pass", "passed")  # the first boolean one is the result's `passed` (over the threshold)
REASON_CHARS = 4096  # `reason` is cut to this many characters (details keep the whole text)
LABEL_CHARS = 256


@dataclass(frozen=True)
class Normalized:
    """A normalized value; ``invalid`` holds the invalid_result message when not ok."""

    score: float | None = None
    passed: bool | None = None
    outputs: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    invalid: str | None = None
    reason: str | None = None
    label: str | None = None


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        if "$nonfinite" in value:
            return f"a non-finite number ({value['$nonfinite']})"
        if "$undefined" in value:
            return "undefined"
        if "$unserializable" in value:
            return f"a non-JSON object ({value['$unserializable']})"
        return "a dict"
    if value is None:
        return "None/null"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _is_marker(value: Any) -> bool:
    return isinstance(value, dict) and ("$nonfinite" in value or "$undefined" in value or "$unserializable" in value)


def _number(value: Any) -> float | None:
    """A finite float for bool/int/float, else None."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        try:
            f = float(value)
        except OverflowError:  # an int beyond the float range (JSON allows any size)
            return None
        return f if math.isfinite(f) else None
    return None


def _contains_marker(value: Any) -> bool:
    if _is_marker(value):
        return True
    if isinstance(value, dict):
        return any(_contains_marker(v) for v in value.values())
    if isinstance(value, list):
        return any(_contains_marker(v) for v in value)
    return False


def _scored(raw: Any, details: dict[str, Any], interface: str, threshold: float | None) -> Normalized:
    """A score-like value (bool, number, numeric string for legacy) → Normalized."""
    warnings: list[str] = []
    if isinstance(raw, bool):
        return Normalized(score=1.0 if raw else 0.0, passed=raw, details=details)
    score = _number(raw)
    if score is None and interface == "legacy" and isinstance(raw, str):
        try:
            score = float(raw.strip())
        except ValueError:
            score = None
        if score is not None and math.isfinite(score):
            warnings.append("the evaluator returned a numeric string; return a number instead")
        else:
            score = None
    if score is None:
        return Normalized(invalid=f"the evaluator returned {_describe(raw)}; {ACCEPTED_SHAPES}")
    if interface == "evaluate" and not 0.0 <= score <= 1.0:
        warnings.append(f"score {score} is outside [0, 1]")
    passed = None if threshold is None else score >= threshold
    return Normalized(score=score, passed=passed, details=details, warnings=warnings)


def _annotations(value: dict[str, Any], norm: Normalized) -> Normalized:
    """``norm`` with ``reason``, ``label`` and a boolean ``pass``/``passed`` of the dict applied."""
    reason = next((value[k] for k in REASON_KEYS if isinstance(value.get(k), str)), None)
    label = value.get("label") if isinstance(value.get("label"), str) else None
    passed = next((value[k] for k in PASS_KEYS if isinstance(value.get(k), bool)), None)
    warnings = list(norm.warnings)
    if reason is not None and len(reason) > REASON_CHARS:
        reason = reason[:REASON_CHARS]
        warnings.append(f"reason cut to {REASON_CHARS} characters (details keep it whole)")
    if label is not None and len(label) > LABEL_CHARS:
        label = label[:LABEL_CHARS]
        warnings.append(f"label cut to {LABEL_CHARS} characters")
    return Normalized(
        score=norm.score,
        passed=norm.passed if passed is None else passed,
        outputs=norm.outputs,
        details=norm.details,
        warnings=warnings,
        reason=reason,
        label=label,
    )


def _named(value: dict[str, Any]) -> Normalized:
    """A dict with no ``score``: bool/number values are named outputs, strings go to details."""
    outputs: dict[str, float] = {}
    details: dict[str, Any] = {}
    for key, item in value.items():
        num = _number(item)
        if num is not None:
            outputs[key] = num
        elif isinstance(item, str):
            details[key] = item
        else:
            return Normalized(
                invalid=f"named output {key!r} is {_describe(item)}, not a bool or finite number; {ACCEPTED_SHAPES}"
            )
    if not value:
        return Normalized(invalid=f"the evaluator returned an empty dict; {ACCEPTED_SHAPES}")
    if not outputs and not isinstance(value.get("label"), str):
        return Normalized(invalid=f"the evaluator returned a dict with no number, bool or label; {ACCEPTED_SHAPES}")
    return Normalized(outputs=outputs, details=details)


def normalize(value: Any, *, interface: str, threshold: float | None) -> Normalized:
    """Normalize one returned value per api.md for ``interface`` and ``threshold``."""
    if isinstance(value, dict) and not _is_marker(value):
        if "score" in value:
            details = {k: v for k, v in value.items() if k != "score"}
            if details and _contains_marker(details):
                return Normalized(invalid=f"the details of the score dict are not JSON; {ACCEPTED_SHAPES}")
            inner = value["score"]
            if isinstance(inner, str):
                return Normalized(invalid=f'"score" is a string; {ACCEPTED_SHAPES}')
            norm = _scored(inner, details, interface, threshold)
        else:
            norm = _named(value)
        return norm if norm.invalid is not None else _annotations(value, norm)
    return _scored(value, {}, interface, threshold)
