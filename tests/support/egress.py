"""The egress proxy in tests: a loopback HTTP server that counts its connections, and a request through a gate."""

from __future__ import annotations

import asyncio

from evaluator_host.sandbox.egress.proxy import EgressGate

__all__ = ["WS", "Server", "ask"]

WS = "ws_test"


class Server:
    """An HTTP/1.0 server on ``host``: answers ``pong from HOST`` and counts connections."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host, self.accepted, self.port = host, 0, port
        self._server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> Server:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.accepted += 1
            await reader.readuntil(b"\r\n\r\n")
            body = f"pong from {self.host}".encode()
            writer.write(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
            writer.close()

        self._server = await asyncio.start_server(handle, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()


async def ask(gate: EgressGate, head: str, then: bytes = b"") -> bytes:
    """Send ``head`` (and, once a tunnel is up, ``then``) through the gate; everything answered."""
    reader, writer = await asyncio.open_unix_connection(str(gate.path))
    writer.write(head.encode())
    if then:
        status = await reader.readuntil(b"\r\n\r\n")
        if not status.startswith(b"HTTP/1.1 200"):
            writer.close()
            return status + await reader.read()
        writer.write(then)
    answer = await reader.read()
    writer.close()
    return answer
