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

__all__ = ["ACCEPTED_SHAPES", "Normalized", "normalize"]

ACCEPTED_SHAPES = (
    'accepted return values: a bool, a finite number, {"score": <bool|number>, ...details}, '
    "or a dict of named bool/number outputs"
)


@dataclass(frozen=True)
class Normalized:
    """A normalized value; ``invalid`` holds the invalid_result message when not ok."""

    score: float | None = None
    passed: bool | None = None
    outputs: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    invalid: str | None = None


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
            return _scored(inner, details, interface, threshold)
        outputs: dict[str, float] = {}
        for key, item in value.items():
            num = _number(item)
            if num is None:
                return Normalized(
                    invalid=f"named output {key!r} is {_describe(item)}, not a bool or finite number; {ACCEPTED_SHAPES}"
                )
            outputs[key] = num
        if not outputs:
            return Normalized(invalid=f"the evaluator returned an empty dict; {ACCEPTED_SHAPES}")
        return Normalized(outputs=outputs)
    return _scored(value, {}, interface, threshold)
