"""The harness's framed channel to the host (``runtimes/PROTOCOL.md``: framing, replies, sync marks).

The host's pipes arrive as fd 0 (requests) and fd 1 (replies). :class:`Channel` moves them to private
descriptors, points fd 0 at /dev/null and fd 1 at fd 2, so nothing the user's code prints can reach
the reply channel. Frames are a 4-byte big-endian length followed by UTF-8 JSON.

Replies are *held* and written by :meth:`Channel.flush` (one ``write`` per burst in a ``flush_ms``
run); plain ok replies of such a run join one open ``results`` frame. Before each write, ``on_flush``
runs (the harness kills and reaps the processes the answered cases left).

With ``sync`` (the docker backend sets it; the process backend orders raw output by its pipes), each
write of replies is announced on the raw output first: a sync mark carrying the write's number, which
every frame of that write carries as ``"seq"``; the host attributes raw output to a reply only once it
has read that reply's mark, i.e. everything the code wrote to fd 1/2 before the reply was written.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import time
from collections.abc import Callable
from typing import Any

from .values import ENCODE

HEADER = struct.Struct(">I")
MAX_REQUEST = 1 << 31
SYNC_MARK = b"\0evaluator-host-sync:%d\0"  # on the raw output before write number %d of replies
_OK_KEYS = frozenset({"type", "status", "duration_ms", "stdout", "stderr", "truncated", "index", "id"})
BULK_BYTES = 32 * 1024  # values and durations one "results" frame holds, at most


class Channel:
    """Requests in, replies out: frames, held replies, the open ``results`` frame."""

    def __init__(self, on_flush: Callable[[], None], sync: bool = False) -> None:
        self._on_flush = on_flush
        self._held: list[bytes] = []  # replies not written yet (a ``flush_ms`` run of fast cases)
        self.held_bytes = 0
        self.held_since = 0.0
        self._bulk: list[str] = []  # held values of a "results" frame not closed yet, and their durations
        self._bulk_ms: list[str] = []
        self._bulk_first: tuple[int, Any] = (0, None)  # the index of its first case and the request id
        self._bulk_bytes = 0
        self._writes = 0  # writes of replies so far (the sync marks' numbers)
        self._seq = ""  # with sync: ',"seq":N' for the frames of the next write
        self._in = os.dup(0)
        self._out = os.dup(1)
        self._err = os.dup(2) if sync else -1  # the sync marks' own descriptor: user code closing fd 2 spares it
        if sync:
            self._seq = ',"seq":1'
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(2, 1)
        sys.stdin = open(os.devnull)  # noqa: SIM115 - lives as long as the process

    # -- requests --------------------------------------------------------------------------
    def _read_exact(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = os.read(self._in, min(n, 1 << 20))
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def recv(self) -> dict[str, Any]:
        """The next request; EOFError at the end of the channel (or a frame past 2 GiB)."""
        (size,) = HEADER.unpack(self._read_exact(4))
        if size > MAX_REQUEST:
            raise EOFError
        message: dict[str, Any] = json.loads(self._read_exact(size))
        return message

    # -- replies ---------------------------------------------------------------------------
    def send(self, message: dict[str, Any]) -> None:
        """Write ``message`` now (after any replies still held back)."""
        self.hold(message)
        self.flush()

    def hold(self, message: dict[str, Any]) -> None:
        """Queue ``message`` for the next :meth:`flush`, as a frame of its own (a ``value_json`` key, the
        returned value already encoded, becomes its ``value``)."""
        value = message.pop("value_json", None)  # the returned value, encoded once (by run_case)
        self._close_bulk()
        if value is not None and message.keys() == _OK_KEYS and message["status"] == "ok":
            out, err = message["stdout"], message["stderr"]  # the common reply, written without a dict encode
            text = (
                '{"type":"result","status":"ok","duration_ms":'
                + repr(float(message["duration_ms"]))
                + ',"stdout":'
                + (ENCODE(out) if out else '""')
                + ',"stderr":'
                + (ENCODE(err) if err else '""')
                + (',"truncated":true' if message["truncated"] else ',"truncated":false')
                + ',"index":'
                + str(int(message["index"]))
                + ',"id":'
                + ENCODE(message["id"])
                + self._seq
                + ',"value":'
                + value
                + "}"
            )
        else:
            text = ENCODE(message)
            if self._seq:
                text = text[:-1] + self._seq + "}"
            if value is not None:
                text = text[:-1] + ',"value":' + value + "}"
        self._append(text.encode())

    def _append(self, data: bytes) -> None:
        if not self._held:
            self.held_since = time.perf_counter()
        self._held.append(HEADER.pack(len(data)))
        self._held.append(data)
        self.held_bytes += len(data)

    def hold_bulk(self, index: int, request: Any, value: str, duration: str) -> None:
        """Hold the plain ok reply of case ``index`` (its value's JSON, its duration's repr) in the open
        ``results`` frame; a frame of another request, not contiguous, or full is closed first."""
        bulk = self._bulk
        if bulk and (
            self._bulk_bytes >= BULK_BYTES or request != self._bulk_first[1] or index != self._bulk_first[0] + len(bulk)
        ):
            self._close_bulk()
        if not bulk:
            self._bulk_first = (index, request)
            if not self._held:
                self.held_since = time.perf_counter()
        bulk.append(value)
        self._bulk_ms.append(duration)
        size = len(value) + len(duration) + 2
        self._bulk_bytes += size
        self.held_bytes += size

    def _close_bulk(self) -> None:
        """Turn the open "results" frame, if any, into a held frame (replies stay in order)."""
        if not self._bulk:
            return
        index, request = self._bulk_first
        text = (
            '{"type":"results","id":'
            + ENCODE(request)
            + ',"index":'
            + str(int(index))
            + self._seq
            + ',"values":['
            + ",".join(self._bulk)
            + '],"durations":['
            + ",".join(self._bulk_ms)
            + "]}"
        )
        self._bulk.clear()
        self._bulk_ms.clear()
        self.held_bytes -= self._bulk_bytes
        self._bulk_bytes = 0
        held_since = self.held_since
        self._append(text.encode())
        self.held_since = held_since

    def flush(self) -> None:
        """Write every held frame, in order, in one system call where the pipe allows (after ``on_flush``
        and, with ``sync``, the write's sync mark on the raw output)."""
        self._close_bulk()
        if not self._held:
            return
        self._on_flush()
        view = memoryview(b"".join(self._held))
        self._held.clear()
        self.held_bytes = 0
        self._writes += 1
        if self._err >= 0:
            try:
                os.write(self._err, SYNC_MARK % self._writes)
            except OSError:
                pass  # the host then waits for the mark in vain: the reply times out
            self._seq = f',"seq":{self._writes + 1}'
        while view:
            view = view[os.write(self._out, view) :]
