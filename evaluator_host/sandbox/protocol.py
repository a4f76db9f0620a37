"""The framed wire protocol between the host and a harness.

A frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON. Message shapes are
``runtimes/PROTOCOL.md`` (and ``runtimes/protocol.schema.json``), the same for every language's harness.

Raw output and replies travel apart (a worker's fd 1/2 and its reply channel), so a reply can reach
the host before the raw output written ahead of it (docker relays the two streams on goroutines of
their own). A harness started with ``"sync": true`` therefore announces each write of replies on its
raw output with a sync mark, ``\\0evaluator-host-sync:N\\0``, and tags that write's frames ``"seq": N``;
:class:`RawSync` strips the marks from the raw stream (:meth:`RawSync.strip`, called by the backend
that drains it) and :class:`FrameReader` returns a frame tagged ``seq`` only once its mark was read,
so the raw output the pool takes with a reply is all that was written before it.
"""

from __future__ import annotations

import asyncio
import json
import struct
import weakref
from dataclasses import dataclass
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

import msgspec

from evaluator_host.sandbox import fastjson

__all__ = ["FrameReader", "FrameTooLarge", "JobCases", "RawSync", "WireCase", "encode_frame", "read_frame"]

_HEADER = struct.Struct(">I")

WireCase = dict[str, Any] | msgspec.Raw
"""A case of a ``run`` frame: a dict, or (job rows, ``encode_frame(strict=True)``) its JSON already encoded."""


@dataclass(frozen=True)
class JobCases:
    """How a job chunk's cases travel: strict JSON data (``encode_frame(strict=True)``: ``msgspec.Raw``
    pieces allowed); with ``pick``, each case is the dataset row itself and the worker picks the case's
    fields from it (the ``run`` frame's ``rows`` and ``pick``: ``runtimes/PROTOCOL.md``)."""

    pick: dict[str, str | None] | None = None

    def run_frame(self, run: dict[str, Any], cases: list[WireCase]) -> bytes:
        """The ``run`` frame of ``run``'s fields and ``cases``."""
        if self.pick is None:
            return encode_frame({**run, "cases": cases}, strict=True)
        return encode_frame({**run, "rows": cases, "pick": self.pick}, strict=True)


class FrameTooLarge(Exception):
    """The worker announced a frame larger than the host accepts."""


_encode_strict = msgspec.json.Encoder().encode


def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# ``json.dumps(message, separators=(",", ":"))`` without building an encoder per call (json.dumps makes a
# JSONEncoder, then the C encoder, for every message): the same C encoder, made once, writes the same text
# (NaN/Infinity included, ASCII-escaped, no circular check needed: the messages are trees); the standard
# library's own path where the interpreter has no C accelerator
_c_encoder = (
    c_make_encoder(None, _not_json, encode_basestring_ascii, None, ":", ",", False, False, True)
    if c_make_encoder
    else None
)


def _encode_lenient(message: dict[str, Any]) -> bytes:
    if _c_encoder is None:
        return json.dumps(message, separators=(",", ":")).encode()
    return "".join(_c_encoder(message, 0)).encode()


def encode_frame(message: dict[str, Any], *, strict: bool = False) -> bytes:
    """Serialize ``message`` as one frame.

    ``strict``: ``message`` is strict JSON data (finite numbers only, as stored datasets are) and may
    hold ``msgspec.Raw`` pieces (JSON already encoded); it is encoded with msgspec, several times
    faster. Without it, the standard library's encoder writes non-finite floats as ``NaN``/``Infinity``
    (what requests parsed leniently may carry) instead of refusing them.
    """
    data = _encode_strict(message) if strict else _encode_lenient(message)
    return _HEADER.pack(len(data)) + data


async def read_frame(reader: asyncio.StreamReader, max_bytes: int) -> dict[str, Any]:
    """Read one frame; raise :class:`FrameTooLarge` past ``max_bytes``, EOF as IncompleteReadError."""
    (size,) = _HEADER.unpack(await reader.readexactly(4))
    if size > max_bytes:
        raise FrameTooLarge(f"frame of {size} bytes exceeds {max_bytes}")
    message: dict[str, Any] = json.loads(await reader.readexactly(size))
    return message


SYNC_PREFIX = b"\0evaluator-host-sync:"
_SYNC_LONGEST = len(SYNC_PREFIX) + 20 + 1  # a mark: the prefix, at most 20 digits, a NUL


class RawSync:
    """The sync marks of one worker's raw output: how far it vouches for the replies (``seen``).

    :meth:`attach` ties one to the worker's reply reader (a :class:`FrameReader` of that reader then
    waits for the marks); the backend passes each raw chunk through :meth:`strip` before keeping it,
    and calls :meth:`close` when the raw stream ends (nothing is waited for any more). Marks are
    stripped wherever they are cut between chunks; bytes that only look like the start of one are
    output. A mark the user's code forges only makes the host take its raw output early.
    """

    def __init__(self) -> None:
        self.seen = 0  # the highest mark read
        self.closed = False
        self._partial = b""  # the start of a mark cut at the end of the last chunk
        self._changed = asyncio.Event()

    @classmethod
    def attach(cls, reader: asyncio.StreamReader) -> RawSync:
        """A new one for the worker whose replies ``reader`` reads."""
        sync = cls()
        _SYNCS[reader] = sync
        return sync

    def strip(self, chunk: bytes) -> bytes:
        """``chunk`` without the marks in it (which advance :attr:`seen`)."""
        if not self._partial and b"\0" not in chunk:
            return chunk
        data, self._partial = self._partial + chunk, b""
        out = bytearray()
        pos, end = 0, len(data)
        seen = self.seen
        while pos < end:
            at = data.find(b"\0", pos)
            if at < 0:
                out += data[pos:]
                break
            out += data[pos:at]
            close = data.find(b"\0", at + len(SYNC_PREFIX), at + _SYNC_LONGEST)
            if close < 0:
                if end - at < _SYNC_LONGEST and SYNC_PREFIX.startswith(data[at : at + len(SYNC_PREFIX)]):
                    self._partial = data[at:]  # maybe a mark the next chunk completes
                    break
            elif data.startswith(SYNC_PREFIX, at) and data[at + len(SYNC_PREFIX) : close].isdigit():
                seen = max(seen, int(data[at + len(SYNC_PREFIX) : close]))
                pos = close + 1
                continue
            out += b"\0"  # not a mark
            pos = at + 1
        if seen > self.seen:
            self.seen = seen
            self._changed.set()
        return bytes(out)

    def close(self) -> bytes:
        """The raw stream ended: stop waiting for marks; what was held as the start of one."""
        self.closed = True
        self._changed.set()
        rest, self._partial = self._partial, b""
        return rest

    async def reached(self, seq: int, timeout_s: float) -> None:
        """Wait until mark ``seq`` was read (or the raw stream ended); TimeoutError after ``timeout_s``."""
        async with asyncio.timeout(timeout_s):
            while self.seen < seq and not self.closed:
                self._changed.clear()
                await self._changed.wait()


_SYNCS: weakref.WeakKeyDictionary[asyncio.StreamReader, RawSync] = weakref.WeakKeyDictionary()


class FrameReader:
    """Reads frames in bulk: one ``read`` of whatever arrived, then every complete frame in it.

    A batch's replies arrive back to back, so this costs one await (and one timeout) per
    burst instead of two per frame. ``timeout_s`` bounds each wait for more bytes, i.e.
    the time since the last frame was available: the per-row timeout of a batch. A frame tagged
    ``seq`` of a worker with a :class:`RawSync` is returned once its sync mark was read (within the
    same timeout).
    """

    def __init__(self, reader: asyncio.StreamReader, max_bytes: int) -> None:
        self.reader = reader
        self.max_bytes = max_bytes
        self._buf = bytearray()
        self._pos = 0
        self.last_size = 0  # bytes of the frame :meth:`next` returned last
        self._sync = _SYNCS.get(reader)

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
                    sync = self._sync
                    if sync is not None:
                        seq = message.get("seq")
                        if type(seq) is int and seq > sync.seen:
                            await sync.reached(seq, timeout_s)
                    return message
            if self._pos:
                del buf[: self._pos]
                self._pos = 0
            async with asyncio.timeout(timeout_s):
                data = await self.reader.read(1 << 20)
            if not data:
                raise asyncio.IncompleteReadError(bytes(buf), None)
            buf += data
