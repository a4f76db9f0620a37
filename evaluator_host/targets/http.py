"""A small HTTP/1.1 client for model calls: keep-alive connections to one checked address.

Why not httpx here: with 64 calls in flight its connection pool scans every connection on every request
and response (and asks which async library runs, by import, each time); that cost the service ~14 ms of
CPU per call in the bench (``bench/target_bench.py``). h11 (pure Python) still cost ~0.4 ms a call; this
module writes the request and reads the answer with asyncio's streams directly (~0.03 ms).

Contract: :meth:`ConnectionPool.post` sends one request (``Host``, ``Content-Length`` and the given
headers, which must hold no CR or LF: ``ValueError``) on an idle kept-alive connection or a new one (to
the endpoint's checked address; TLS with the host's name for SNI and verification) and answers
``(status, headers, body)``: header names lower-case; the body by ``Content-Length``, chunked transfer
coding, or up to the connection's end; at most ``max_body`` bytes (else :class:`TooLarge`), a head of at
most ``MAX_HEAD`` bytes. Everything it does is bounded by ``timeout_s`` (``TimeoutError``). A connection
that fails (refused, reset, closed early, not HTTP/1.x) is :class:`ConnectionFailed`; a kept-alive
connection the server had closed while idle is replaced once, silently, when nothing of the answer had
arrived. An answer is read whole before the connection is reused (``Connection: close`` or HTTP/1.0:
not reused). Idle connections: at most ``max_idle``; :meth:`close` closes them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl

__all__ = ["MAX_HEAD", "ConnectionFailed", "ConnectionPool", "TooLarge"]

MAX_HEAD = 64 * 1024
_CHUNK_LINE = 1024


class ConnectionFailed(Exception):
    """The connection failed before a whole answer arrived."""


class TooLarge(Exception):
    """The answer's body is larger than allowed."""


class _Stale(Exception):
    """A reused connection the server had closed (nothing of an answer arrived)."""


class _Connection:
    __slots__ = ("reader", "used", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.used = False

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class ConnectionPool:
    """Keep-alive connections to one address (see the module's contract)."""

    def __init__(
        self,
        address: str,
        port: int,
        host: str,
        *,
        sni: str,
        tls: ssl.SSLContext | None,
        max_idle: int,
        max_body: int,
    ) -> None:
        self.address = address
        self.port = port
        self.host = host  # the Host header: name[:port]
        self.sni = sni  # the name TLS asks for and verifies
        self.tls = tls
        self.max_idle = max_idle
        self.max_body = max_body
        self._idle: list[_Connection] = []

    async def _open(self) -> _Connection:
        try:
            if self.tls is not None:
                reader, writer = await asyncio.open_connection(
                    self.address, self.port, ssl=self.tls, server_hostname=self.sni, limit=MAX_HEAD
                )
            else:
                reader, writer = await asyncio.open_connection(self.address, self.port, limit=MAX_HEAD)
        except (OSError, ssl.SSLError) as exc:
            raise ConnectionFailed(f"{type(exc).__name__}: {exc}") from None
        return _Connection(reader, writer)

    def head(self, target: str, headers: list[tuple[str, str]]) -> bytes:
        """The request's head, without ``Content-Length`` (checked: no CR or LF in any header)."""
        lines = [f"POST {target} HTTP/1.1", f"Host: {self.host}"]
        for name, value in headers:
            if any(c in name or c in value for c in "\r\n\0") or ":" in name:
                raise ValueError(f"header {name!r} holds a character a header cannot hold")
            lines.append(f"{name}: {value}")
        return ("\r\n".join(lines) + "\r\n").encode("latin-1")

    async def post(self, head: bytes, body: bytes, timeout_s: float) -> tuple[int, dict[str, str], bytes]:
        """One POST: ``head`` (from :meth:`head`) and ``body``; see the module's contract."""
        request = b"%sContent-Length: %d\r\n\r\n%s" % (head, len(body), body)
        async with asyncio.timeout(timeout_s):
            while True:
                conn = self._idle.pop() if self._idle else await self._open()
                try:
                    status, headers, answer, reusable = await self._exchange(conn, request)
                except _Stale:
                    conn.close()
                    continue  # the server closed it while idle: a new one
                except BaseException:
                    conn.close()
                    raise
                if reusable and len(self._idle) < self.max_idle:
                    conn.used = True
                    self._idle.append(conn)
                else:
                    conn.close()
                return status, headers, answer

    async def _exchange(self, conn: _Connection, request: bytes) -> tuple[int, dict[str, str], bytes, bool]:
        reader = conn.reader
        try:
            conn.writer.write(request)
            await conn.writer.drain()
            raw = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if conn.used and not exc.partial:
                raise _Stale from None
            raise ConnectionFailed("the server closed the connection before answering") from None
        except asyncio.LimitOverrunError:
            raise ConnectionFailed(f"the answer's head is larger than {MAX_HEAD:,} bytes") from None
        except (ConnectionError, OSError, ssl.SSLError) as exc:
            if conn.used:  # a reused connection the server had closed: nothing of an answer arrived
                raise _Stale from None
            raise ConnectionFailed(f"{type(exc).__name__}: {exc}") from None
        try:
            status, version, headers = _head(raw)
            reusable = version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
            if "chunked" in headers.get("transfer-encoding", "").lower():
                body = await self._chunked(reader)
            elif "content-length" in headers:
                try:
                    length = int(headers["content-length"])
                except ValueError:
                    raise ConnectionFailed("the answer's Content-Length is not a number") from None
                if length > self.max_body:
                    raise TooLarge(f"the answer is larger than {self.max_body:,} bytes")
                body = await reader.readexactly(length) if length else b""
            else:  # to the connection's end
                parts: list[bytes] = []
                size = 0
                while chunk := await reader.read(65536):
                    size += len(chunk)
                    if size > self.max_body:
                        raise TooLarge(f"the answer is larger than {self.max_body:,} bytes")
                    parts.append(chunk)
                body, reusable = b"".join(parts), False
            return status, headers, body, reusable
        except asyncio.IncompleteReadError:
            raise ConnectionFailed("the server closed the connection before the answer ended") from None
        except asyncio.LimitOverrunError:
            raise ConnectionFailed("a chunk's size line is too long") from None
        except (ConnectionError, OSError, ssl.SSLError) as exc:
            raise ConnectionFailed(f"{type(exc).__name__}: {exc}") from None

    async def _chunked(self, reader: asyncio.StreamReader) -> bytes:
        parts: list[bytes] = []
        size = 0
        while True:
            line = await reader.readuntil(b"\r\n")
            if len(line) > _CHUNK_LINE:
                raise ConnectionFailed("a chunk's size line is too long")
            try:
                n = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise ConnectionFailed("a chunk's size is not a number") from None
            if n == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                    pass
                return b"".join(parts)
            size += n
            if size > self.max_body:
                raise TooLarge(f"the answer is larger than {self.max_body:,} bytes")
            parts.append(await reader.readexactly(n))
            await reader.readexactly(2)

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _head(raw: bytes) -> tuple[int, str, dict[str, str]]:
    """(status, version, headers with lower-case names) of an answer's head."""
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ConnectionFailed(f"not an HTTP/1.x answer: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise ConnectionFailed("a malformed header line in the answer")
        key = name.strip().lower()
        headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
    return int(parts[1]), parts[0], headers
