"""The egress proxy's byte relay: a connection the proxy has judged and let through, spliced to its
destination at the transport level (:mod:`evaluator_host.sandbox.egress.proxy`).

Once a request has passed every check (the head read and parsed, the destination declared and allowed,
its address checked), what is left is copying bytes both ways. :func:`splice` does that with two small
:class:`asyncio.Protocol` ends wired to each other's transport, not with two copying tasks over streams:
no task, future or ``drain`` per chunk, nothing re-read or re-parsed. Per connection: the destination's
transport (made with the end as its protocol), the sandbox's transport handed over from the stream the
head was read from (with any bytes read past the head), one future the caller awaits and at most one
timer. The rules are those the stream relay had:

* bytes are counted into the connection's log entry as they pass (``bytes_out`` from the sandbox,
  ``bytes_in`` from the destination);
* back-pressure: when one end's transport cannot take more, the other end stops reading until it can;
* when one way ends (EOF), the other end is told (``write_eof``) and the other way may go on for
  ``half_closed_s`` at most; when both ways have ended, or either connection is lost, the relay is done
  and both transports close (what they still hold is sent first);
* a forwarded plain-HTTP request (``status``): the answer's status code is read as it passes (its
  first bytes, up to the final head, past ``1xx`` interim heads, :data:`STATUS_SNIFF_LIMIT` at most)
  into the entry's ``http_status`` — what a judge's ``429`` is seen by (issue 51). The bytes pass
  unchanged. A ``CONNECT`` tunnel's bytes are the client's own (TLS, mostly): never read.

:func:`pump` is the stream relay the proxy still uses where it reads what it relays: the answer to a
request it completed inside a TLS it ended (its head rewritten to ``Connection: close``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, cast

__all__ = ["STATUS_SNIFF_LIMIT", "answer_status", "pump", "splice"]

STATUS_SNIFF_LIMIT = 8 * 1024  # bytes of a plain answer read for its status line(s), at most


def answer_status(data: bytes) -> int | None:
    """The final status code of an HTTP answer beginning with ``data`` (``1xx`` interim heads skipped,
    ``101`` is final); ``None`` while ``data`` may still grow into one; ``0`` when it is not an HTTP/1.x
    answer (nothing to read)."""
    at = 0
    while True:
        if len(data) - at < 12:
            return None if b"HTTP/1."[: len(data) - at] == data[at : at + 7] else 0
        line = data[at : at + 12]
        if not line.startswith(b"HTTP/1.") or not line[9:12].isdigit():
            return 0
        code = int(line[9:12])
        if code >= 200 or code == 101:
            return code
        end = data.find(b"\r\n\r\n", at)
        if end < 0:
            return None
        at = end + 4


class _End(asyncio.Protocol):
    """One side of a relayed connection: what it receives goes to its peer's transport."""

    def __init__(self, relay: _Relay, counter: str) -> None:
        self.relay = relay
        self.counter = counter  # the log entry's key its received bytes count into
        self.transport: asyncio.Transport | None = None
        self.peer: _End | None = None
        self.pending: list[bytes] = []  # received before the relay was wired (a destination that speaks first)
        self.ended = False  # this way is over (EOF received, or the connection lost)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport subclasses

    def data_received(self, data: bytes) -> None:
        self.relay.entry[self.counter] += len(data)
        if self.relay.sniff is not None and self is self.relay.destination:
            self.relay.read_status(data)
        peer = self.peer
        if peer is None or peer.transport is None:
            self.pending.append(data)
        elif not peer.transport.is_closing():
            peer.transport.write(data)

    def eof_received(self) -> bool:
        self.relay.way_ended(self)
        return True  # keep the transport: the other way may still write to it

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        self.relay.finish()

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()  # this end's transport is full: its source waits

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None and not self.peer.transport.is_closing():
            self.peer.transport.resume_reading()


class _Relay:
    """Both ends of one relayed connection and when it is over."""

    def __init__(self, entry: dict[str, Any], half_closed_s: float, status: bool = False) -> None:
        self.entry = entry
        self.sniff: bytearray | None = bytearray() if status else None  # the answer's first bytes, until its status
        self.half_closed_s = half_closed_s
        self.loop = asyncio.get_running_loop()
        self.done: asyncio.Future[None] = self.loop.create_future()
        self.sandbox = _End(self, "bytes_out")
        self.destination = _End(self, "bytes_in")
        self.sandbox.peer, self.destination.peer = self.destination, self.sandbox
        self._timer: asyncio.TimerHandle | None = None

    def way_ended(self, end: _End) -> None:
        if end.ended:
            return
        end.ended = True
        if end is self.sandbox:  # the case is done with it: what is left is its destination's end (settle)
            self.entry["_ending"] = self.done
        peer = end.peer
        assert peer is not None
        if peer.ended:
            self.finish()
            return
        transport = peer.transport
        if transport is not None and not transport.is_closing() and transport.can_write_eof():
            try:
                transport.write_eof()
            except OSError:
                self.finish()
                return
        if self._timer is None:  # the other way may still finish its answer, this long
            self._timer = self.loop.call_later(self.half_closed_s, self.finish)

    def read_status(self, data: bytes) -> None:
        """Read the answer's status from its first bytes (see the module docstring); then stop reading."""
        assert self.sniff is not None
        self.sniff += data[: STATUS_SNIFF_LIMIT - len(self.sniff)]
        code = answer_status(bytes(self.sniff))
        if code is None and len(self.sniff) < STATUS_SNIFF_LIMIT:
            return
        if code:
            self.entry["http_status"] = code
        self.sniff = None

    def finish(self) -> None:
        if not self.done.done():
            self.entry["status"] = "ok"  # now, not when the proxy's task next runs (a case's log may be taken first)
            self.done.set_result(None)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for end in (self.sandbox, self.destination):
            if end.transport is not None:
                end.transport.close()


async def splice(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    address: str,
    port: int,
    first: bytes,
    entry: dict[str, Any],
    *,
    connect_timeout_s: float,
    half_closed_s: float,
    tunnel_answer: bytes = b"",
    status: bool = False,
) -> None:
    """Connect to ``address:port`` (``OSError`` or ``TimeoutError`` past ``connect_timeout_s``: nothing was
    said to the sandbox yet), send it ``first`` (a forwarded request's head), tell the sandbox
    ``tunnel_answer`` (a ``CONNECT``'s ``200``), then relay both ways until done (see the module docstring).
    The sandbox's connection (``reader``, ``writer``: the head already read from it) is handed over to the
    relay; the caller closes ``writer`` afterwards as before. ``status``: read the answer's status code into
    ``entry["http_status"]`` (a forwarded plain request's; see the module docstring)."""
    relay = _Relay(entry, half_closed_s, status)
    loop = relay.loop
    try:
        async with asyncio.timeout(connect_timeout_s):
            made, _ = await loop.create_connection(lambda: relay.destination, address, port)
        relay.destination.connection_made(made)  # uvloop calls it after create_connection returns: same transport
        if first:
            relay.destination.transport.write(first)  # type: ignore[union-attr]
        transport = cast(asyncio.Transport, writer.transport)
        if tunnel_answer:
            transport.write(tunnel_answer)
        # the sandbox's connection: from its stream to the relay, with what the stream read past the head
        buffered: bytearray = reader._buffer  # type: ignore[attr-defined]  # noqa: SLF001 - handed over, not read
        leftover = bytes(buffered)
        buffered.clear()
        at_eof = reader.at_eof()  # the sandbox's way had ended already (its buffer is empty now)
        transport.set_protocol(relay.sandbox)
        relay.sandbox.connection_made(transport)
        if leftover:
            relay.sandbox.data_received(leftover)
        for data in relay.destination.pending:
            transport.write(data)
        relay.destination.pending.clear()
        if relay.destination.ended and not transport.is_closing() and transport.can_write_eof():
            transport.write_eof()  # the destination's way ended before the relay was wired
        if at_eof:
            relay.way_ended(relay.sandbox)
        elif not transport.is_reading():
            transport.resume_reading()  # the stream may have paused it (a full buffer)
        await relay.done
    finally:
        relay.close()


async def _answer_head(up_reader: asyncio.StreamReader, entry: dict[str, Any]) -> bytes:
    """The destination's answer head(s) up to its final one (``1xx`` interim heads passed as they are),
    the final one with ``Connection: close`` in place of its own connection headers; its status code
    goes into ``entry["http_status"]``."""
    heads = b""
    while True:
        head = await up_reader.readuntil(b"\r\n\r\n")
        status = head[9:12]
        if status.startswith(b"1") and status != b"101":
            heads += head
            continue
        if head.startswith(b"HTTP/1.") and status.isdigit():
            entry["http_status"] = int(status)
        lines = head.split(b"\r\n")
        kept = [line for line in lines[1:] if line and not line.lower().startswith((b"connection:", b"keep-alive:"))]
        return heads + b"\r\n".join([lines[0], *kept, b"Connection: close", b"", b""])


async def pump(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
    entry: dict[str, Any],
    *,
    half_closed_s: float,
    close_answer: bool = False,
) -> None:
    """Copy both ways until both ends are done (or one is, and the other is not within
    ``half_closed_s``), counting bytes into ``entry`` as they go (``close_answer``: the answer's
    head says ``Connection: close``, so the client never sends a second request the proxy would not read)."""

    async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter, counter: str) -> None:
        try:
            if close_answer and src is up_reader:
                head = await _answer_head(src, entry)
                entry[counter] += len(head)
                dst.write(head)
            while data := await src.read(65536):
                entry[counter] += len(data)
                dst.write(data)
                await dst.drain()
        except (OSError, RuntimeError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                if close_answer and src is up_reader:
                    dst.close()  # the answer is whole: the connection ends (TLS cannot half-close)
                elif dst.can_write_eof():
                    dst.write_eof()

    up = asyncio.ensure_future(copy(reader, up_writer, "bytes_out"))
    down = asyncio.ensure_future(copy(up_reader, writer, "bytes_in"))
    try:
        await asyncio.wait([up, down], return_when=asyncio.FIRST_COMPLETED)
        await asyncio.wait([up, down], timeout=half_closed_s)  # the other way may still finish its answer
    finally:
        for task in (up, down):
            task.cancel()
        await asyncio.gather(up, down, return_exceptions=True)
        up_writer.close()
