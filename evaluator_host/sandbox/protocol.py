"""The framed wire protocol between the host and a harness.

A frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON. Message
shapes are documented in ``runtimes/python/harness.py`` and are the same for every
language's harness.
"""

from __future__ import annotations

import asyncio
import json
import struct
from dataclasses import dataclass
from typing import Any

import msgspec

from evaluator_host.sandbox import fastjson

__all__ = ["FrameReader", "FrameTooLarge", "JobCases", "WireCase", "encode_frame", "read_frame"]

_HEADER = struct.Struct(">I")

WireCase = dict[str, Any] | msgspec.Raw
"""A case of a ``run`` frame: a dict, or (job rows, ``encode_frame(strict=True)``) its JSON already encoded."""


@dataclass(frozen=True)
class JobCases:
    """How a job chunk's cases travel: strict JSON data (``encode_frame(strict=True)``: ``msgspec.Raw``
    pieces allowed); with ``pick``, each case is the dataset row itself and the worker picks the case's
    fields from it (the ``run`` frame's ``rows`` and ``pick``: ``runtimes/python/harness.py``)."""

    pick: dict[str, str | None] | None = None

    def run_frame(self, run: dict[str, Any], cases: list[WireCase]) -> bytes:
        """The ``run`` frame of ``run``'s fields and ``cases``."""
        if self.pick is None:
            return encode_frame({**run, "cases": cases}, strict=True)
        return encode_frame({**run, "rows": cases, "pick": self.pick}, strict=True)


class FrameTooLarge(Exception):
    """The worker announced a frame larger than the host accepts."""


_encode_strict = msgspec.json.Encoder().encode


def encode_frame(message: dict[str, Any], *, strict: bool = False) -> bytes:
    """Serialize ``message`` as one frame.

    ``strict``: ``message`` is strict JSON data (finite numbers only, as stored datasets are) and may
    hold ``msgspec.Raw`` pieces (JSON already encoded); it is encoded with msgspec, several times
    faster. Without it, the standard library's encoder writes non-finite floats as ``NaN``/``Infinity``
    (what requests parsed leniently may carry) instead of refusing them.
    """
    data = _encode_strict(message) if strict else json.dumps(message, separators=(",", ":")).encode()
    return _HEADER.pack(len(data)) + data


async def read_frame(reader: asyncio.StreamReader, max_bytes: int) -> dict[str, Any]:
    """Read one frame; raise :class:`FrameTooLarge` past ``max_bytes``, EOF as IncompleteReadError."""
    (size,) = _HEADER.unpack(await reader.readexactly(4))
    if size > max_bytes:
        raise FrameTooLarge(f"frame of {size} bytes exceeds {max_bytes}")
    message: dict[str, Any] = json.loads(await reader.readexactly(size))
    return message


class FrameReader:
    """Reads frames in bulk: one ``read`` of whatever arrived, then every complete frame in it.

    A batch's replies arrive back to back, so this costs one await (and one timeout) per
    burst instead of two per frame. ``timeout_s`` bounds each wait for more bytes, i.e.
    the time since the last frame was available: the per-row timeout of a batch.
    """

    def __init__(self, reader: asyncio.StreamReader, max_bytes: int) -> None:
        self.reader = reader
        self.max_bytes = max_bytes
        self._buf = bytearray()
        self._pos = 0
        self.last_size = 0  # bytes of the frame :meth:`next` returned last

    def pending(self) -> bool:
        """Whether bytes beyond the frames returned so far have arrived."""
        return len(self._buf) > self._pos

    async def next(self, timeout_s: float) -> dict[str, Any]:
        """The next frame; TimeoutError, FrameTooLarge, or IncompleteReadError at EOF."""
        buf = self._buf
        while True:
            available = len(buf) - self._pos
            if available >= 4:
                (size,) = _HEADER.unpack_from(buf, self._pos)
                if size > self.max_bytes:
                    raise FrameTooLarge(f"frame of {size} bytes exceeds {self.max_bytes}")
                if available >= 4 + size:
                    self.last_size = 4 + size
                    start = self._pos + 4
                    self._pos = start + size
                    message: dict[str, Any] = fastjson.loads(buf[start : self._pos])
                    if self._pos == len(buf):
                        buf.clear()
                        self._pos = 0
                    return message
            if self._pos:
                del buf[: self._pos]
                self._pos = 0
            async with asyncio.timeout(timeout_s):
                data = await self.reader.read(1 << 20)
            if not data:
                raise asyncio.IncompleteReadError(bytes(buf), None)
            buf += data
