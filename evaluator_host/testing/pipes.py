"""An in-memory pipe for fake workers: an asyncio ``StreamWriter`` whose bytes land in a ``StreamReader``.

Used by :mod:`evaluator_host.testing.fake` for both directions of a fake worker's channel.
"""

from __future__ import annotations

import asyncio

__all__ = ["Pipe", "writer"]


class Pipe(asyncio.WriteTransport):
    """The write end of an in-memory pipe: bytes written are fed to ``sink``.

    Writing after :meth:`close` raises ``RuntimeError``, as uvloop's transport of a dead pipe does (the
    service runs on uvloop); ``drain`` on the writer raises ``ConnectionResetError`` because the
    protocol lost its connection.
    """

    def __init__(self, sink: asyncio.StreamReader) -> None:
        super().__init__()
        self._sink = sink
        self._closing = False
        self.protocol: asyncio.BaseProtocol | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing:
            raise RuntimeError("unable to perform operation on a closed pipe; the handler is closed")
        self._sink.feed_data(bytes(data))

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._sink.feed_eof()
        if self.protocol is not None:
            self.protocol.connection_lost(None)

    def abort(self) -> None:
        self.close()

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self._sink.feed_eof()

    def get_write_buffer_size(self) -> int:
        return 0


def writer(sink: asyncio.StreamReader, loop: asyncio.AbstractEventLoop) -> tuple[asyncio.StreamWriter, Pipe]:
    """A writer whose bytes are fed to ``sink``, and its transport (close it to end the pipe)."""
    pipe = Pipe(sink)
    protocol = asyncio.StreamReaderProtocol(asyncio.StreamReader(), loop=loop)
    protocol.connection_made(pipe)
    pipe.protocol = protocol
    return asyncio.StreamWriter(pipe, protocol, None, loop), pipe
