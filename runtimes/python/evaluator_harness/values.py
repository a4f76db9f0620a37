"""A returned value made JSON-safe, with the markers the host understands (``runtimes/PROTOCOL.md``).

The host normalizes; here a value only becomes JSON data: ints beyond 2**53 become floats, non-finite
floats ``{"$nonfinite": "nan" | "inf" | "-inf"}``, dict keys that are numbers, booleans or None their
JSON text, numpy scalars and arrays their ``tolist()``, Decimals floats, anything else
``{"$unserializable": "<type>"}``; structures deeper than 64 levels are unserializable.
"""

from __future__ import annotations

import json
import math
from typing import Any

# taken before user code runs: replacing json.dumps later does not reach replies
DUMPS = json.dumps
ENCODE = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode  # one encoder, built once
SIMPLE = {True: "true", False: "false", None: "null"}  # the commonest returned values' JSON, by identity


def to_wire(value: Any, depth: int = 0) -> Any:
    """Turn a returned value into JSON-safe data with markers the host understands."""
    if depth > 64:
        return {"$unserializable": "structure nested deeper than 64 levels"}
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value if abs(value) <= 2**53 else to_wire(float(value), depth)
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {"$nonfinite": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(key, bool | int | float) or key is None:
                key = json.dumps(key)
            elif not isinstance(key, str):
                return {"$unserializable": f"dict with {type(key).__name__} keys"}
            out[key] = to_wire(item, depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [to_wire(item, depth + 1) for item in value]
    module = type(value).__module__ or ""
    if module.split(".")[0] == "numpy":
        if hasattr(value, "tolist"):  # numpy scalars and arrays
            return to_wire(value.tolist(), depth + 1)
    if type(value).__name__ == "Decimal":
        return to_wire(float(value), depth)
    return {"$unserializable": f"{module}.{type(value).__qualname__}" if module != "builtins" else type(value).__name__}


def own(value: Any) -> Any:
    """``value`` as decoded on its own: a container is copied (a case's ``inputs`` and the fields picked
    from it never share a list or dict, as when the host sent them apart)."""
    if type(value) is dict or type(value) is list:
        return json.loads(ENCODE(value))
    return value
