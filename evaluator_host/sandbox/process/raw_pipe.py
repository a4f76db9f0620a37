"""A process worker's raw output (its fd 1/2): one pipe, read as it arrives, ordered with the replies by the pipe.

The harness's replies and its raw output travel in two pipes. A reply must take with it all the raw
output written before it — and only that. On this backend both pipes lead straight from the
worker's processes to the service, so the kernel orders them: whatever the worker wrote to fd 1/2
before it wrote a reply is, once the reply has been read, either taken in already or still in the
raw pipe. :meth:`RawPipe.behind` looks (``FIONREAD``, one system call) and, in the rare case bytes are
there, returns an awaitable that completes once those bytes have been read. So this backend needs no
sync marks (``runtimes/PROTOCOL.md``, "Raw output sync": the docker backend keeps them, its engine
relays the two streams apart), and a reply costs neither the harness's mark nor the service's wake-up
to read it.

Bytes are handed to ``sink`` in :meth:`RawPipe.data_received`, in the event loop's read callback
itself: no task stands between the pipe and the buffer, so "read" and "taken in" are the same moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import struct
import termios
from collections.abc import Awaitable, Callable

__all__ = ["RawPipe", "open_raw_pipe"]

_INT = struct.Struct("i")


class RawPipe(asyncio.Protocol):
    """The read end of a worker's raw output pipe (an ``asyncio`` read-pipe protocol)."""

    def __init__(self, fd: int, sink: Callable[[bytes], None]) -> None:
        self._fd = fd  # the read end: the transport owns and closes it
        self._sink = sink
        self.received = 0  # bytes handed to ``sink`` so far
        self.closed = asyncio.Event()  # the pipe's writers all closed it (the worker and its processes ended)
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        self._sink(data)
        if self._waiters:
            self._wake(lambda target: self.received >= target)

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()
        self._wake(lambda _target: True)

    def behind(self) -> Awaitable[None] | None:
        """None when every byte written to the pipe before now has been handed to ``sink``; otherwise an
        awaitable that completes once they have (or the pipe closed). Bytes written after this call are
        not waited for, so a process that keeps writing cannot hold the caller."""
        if self.closed.is_set() or self._transport is None or self._transport.is_closing():
            return None  # (a closing transport's descriptor may be closed already, and its number reused)
        try:
            waiting = _INT.unpack(fcntl.ioctl(self._fd, termios.FIONREAD, b"\0\0\0\0"))[0]
        except OSError:
            return None
        if waiting <= 0:
            return None
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((self.received + waiting, future))
        return future

    def _wake(self, reached: Callable[[int], bool]) -> None:
        keep = []
        for target, future in self._waiters:
            if reached(target):
                if not future.done():
                    future.set_result(None)
            else:
                keep.append((target, future))
        self._waiters = keep


async def open_raw_pipe(read_fd: int, sink: Callable[[bytes], None]) -> tuple[asyncio.ReadTransport, RawPipe]:
    """Read ``read_fd`` (a pipe's read end, owned from now on by the transport) into ``sink``."""
    loop = asyncio.get_running_loop()
    try:
        pipe = os.fdopen(read_fd, "rb", buffering=0)
    except OSError:
        with contextlib.suppress(OSError):
            os.close(read_fd)
        raise
    transport, protocol = await loop.connect_read_pipe(lambda: RawPipe(read_fd, sink), pipe)
    return transport, protocol
