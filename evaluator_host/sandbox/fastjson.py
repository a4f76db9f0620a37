"""JSON decoding on the hot paths (worker replies, dataset rows): msgspec where it can, the standard library
where it can't.

Contract: ``loads(data)`` returns what ``json.loads(data)`` returns for every input ``json.loads`` accepts
(msgspec refuses a few that the standard library takes, e.g. ``NaN`` or a lone surrogate escape: those
fall back to ``json.loads``), and raises what ``json.loads`` raises otherwise.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

__all__ = ["loads"]

_decode = msgspec.json.Decoder().decode


def loads(data: bytes | bytearray | str) -> Any:
    """Decode one JSON document (see the module's contract)."""
    try:
        return _decode(data)
    except msgspec.DecodeError:
        return json.loads(data)
