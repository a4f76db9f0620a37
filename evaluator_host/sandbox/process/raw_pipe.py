"""A process worker's raw output (its fd 1/2): one pipe, read as it arrives, ordered with the replies by the pipe.

The harness's replies and its raw output travel in two pipes. A reply must take with it all the raw
output written before it. On this backend both pipes lead straight from the worker's processes to the
service, so the kernel orders them: whatever the worker wrote to fd 1/2 before it wrote a reply is,
once the reply has been read, either taken in already or still in the raw pipe. :meth:`RawPipe.behind`
looks (``FIONREAD``, one system call) and, in the rare case bytes are there, returns an awaitable that
completes once those bytes have been read. So this backend needs no sync marks (``runtimes/PROTOCOL.md``,
"Raw output sync": the docker backend keeps them, its engine relays the two streams apart), and a reply
costs neither the harness's mark nor the service's wake-up to read it. (As with the marks, what a reply
takes is *at least* that output: raw output a later row of the same run wrote before the reply was
processed goes with it too.)

The pipe is the service's own (:meth:`RawPipe.create`, before the worker is spawned): its read end is
watched with ``loop.add_reader`` and read with ``os.read`` in that callback, which hands the bytes to the
sink at once — no task stands between the pipe and the buffer, so "read" and "taken in" are the same
moment — and it is closed exactly once (:meth:`RawPipe.close`, or at EOF), on any event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import struct
import termios
from collections.abc import Awaitable, Callable

__all__ = ["RawPipe"]

_INT = struct.Struct("i")
_READ = 1 << 20  # a pipe holds at most 1 MiB (fs.pipe-max-size): one read takes what one look counted


class RawPipe:
    """A worker's raw output pipe, seen from the service: the write end for the child, the read end read
    into a sink once :meth:`start` is called; :attr:`received` bytes handed over so far."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self._read: int | None = read_fd
        self._write: int | None = write_fd
        self._sink: Callable[[bytes], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.received = 0
        self.closed = asyncio.Event()  # EOF (every writer closed it) or :meth:`close`
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    @classmethod
    def create(cls) -> RawPipe:
        """A new pipe (OSError when the process has no descriptors left); its read end non-blocking."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        return cls(read_fd, write_fd)

    @property
    def write_end(self) -> int:
        """The descriptor the child gets as its fd 2 (until :meth:`close_write_end`)."""
        assert self._write is not None
        return self._write

    def close_write_end(self) -> None:
        """The service's copy of the write end, once the child has its own (idempotent)."""
        if self._write is not None:
            with contextlib.suppress(OSError):
                os.close(self._write)
            self._write = None

    def start(self, sink: Callable[[bytes], None]) -> None:
        """Read the pipe into ``sink`` from now on (call on the running loop)."""
        if self._read is None:
            return
        self._sink = sink
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._read, self._readable)

    def _readable(self) -> None:
        if self._read is None:
            return
        try:
            data = os.read(self._read, _READ)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.close()
            return
        self.received += len(data)
        if self._sink is not None:
            self._sink(data)
        if self._waiters:
            self._wake(lambda target: self.received >= target)

    def behind(self) -> Awaitable[None] | None:
        """None when every byte written to the pipe before now has been handed to the sink; otherwise an
        awaitable that completes once they have (or the pipe closed). Bytes written after this call are
        not waited for, so a process that keeps writing cannot hold the caller."""
        if self._read is None:
            return None
        try:
            waiting = _INT.unpack(fcntl.ioctl(self._read, termios.FIONREAD, b"\0\0\0\0"))[0]
        except OSError:
            return None
        if waiting <= 0:
            return None
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((self.received + waiting, future))
        return future

    def close(self) -> None:
        """Stop reading and close both ends still held (idempotent); waiters are released."""
        self.close_write_end()
        if self._read is not None:
            fd, self._read = self._read, None
            if self._loop is not None:
                with contextlib.suppress(Exception):  # a closed loop: nothing watches it any more
                    self._loop.remove_reader(fd)
            with contextlib.suppress(OSError):
                os.close(fd)
        self.closed.set()
        self._wake(lambda _target: True)

    def _wake(self, reached: Callable[[int], bool]) -> None:
        keep = []
        for target, future in self._waiters:
            if reached(target):
                if not future.done():
                    future.set_result(None)
            else:
                keep.append((target, future))
        self._waiters = keep
