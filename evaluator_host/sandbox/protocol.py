"""The framed wire protocol between the host and a harness.

A frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON. Message
shapes are documented in ``runtimes/python/harness.py`` and are the same for every
language's harness.
"""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any

__all__ = ["FrameTooLarge", "encode_frame", "read_frame"]

_HEADER = struct.Struct(">I")


class FrameTooLarge(Exception):
    """The worker announced a frame larger than the host accepts."""


def encode_frame(message: dict[str, Any]) -> bytes:
    """Serialize ``message`` as one frame."""
    data = json.dumps(message, separators=(",", ":")).encode()
    return _HEADER.pack(len(data)) + data


async def read_frame(reader: asyncio.StreamReader, max_bytes: int) -> dict[str, Any]:
    """Read one frame; raise :class:`FrameTooLarge` past ``max_bytes``, EOF as IncompleteReadError."""
    (size,) = _HEADER.unpack(await reader.readexactly(4))
    if size > max_bytes:
        raise FrameTooLarge(f"frame of {size} bytes exceeds {max_bytes}")
    message: dict[str, Any] = json.loads(await reader.readexactly(size))
    return message
