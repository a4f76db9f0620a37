"""The egress proxy reads a judge's answer status where it sees it (issue 51: a 429 slows the rule down):
a forwarded plain ``http://`` request, and a request it completes inside TLS it ends (headers injected);
never inside an opaque ``CONNECT`` tunnel. Real sockets, servers the test starts on loopback; the bytes
the client gets are the server's, unchanged."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from evaluator_host.sandbox.egress.proxy import EgressGate, EgressProxy, Headers
from evaluator_host.sandbox.egress.splice import STATUS_SNIFF_LIMIT, answer_status
from tests.support.aio import aio
from tests.support.egress import WS, ask
from tests.support.tls import certificate
from tests.support.wait import wait_until_async

LIMITED = b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 9\r\n\r\nslow down"
CONTINUED = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


class Answering:
    """A loopback server (TLS with ``context``) that reads a request head and writes ``answer`` in
    ``pieces`` writes (an answer split across reads), then closes."""

    def __init__(self, answer: bytes, context: ssl.SSLContext | None = None, pieces: int = 1) -> None:
        self.answer, self.context, self.pieces, self.port = answer, context, pieces, 0
        self._server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> Answering:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await reader.readuntil(b"\r\n\r\n")
                step = -(-len(self.answer) // self.pieces)
                for at in range(0, len(self.answer), step):
                    writer.write(self.answer[at : at + step])
                    await writer.drain()
                    await asyncio.sleep(0.01)  # each piece its own read on the proxy's side
            except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
                pass
            finally:
                writer.close()

        self._server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=self.context)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()


@asynccontextmanager
async def gate_for(proxy: EgressProxy, dest: str, headers: Headers = ()) -> AsyncIterator[EgressGate]:
    proxy.workspace_allow[WS] = frozenset([dest])
    gate = await proxy.open()
    gate.bind(WS, (dest,), headers)
    try:
        yield gate
    finally:
        await gate.close()
        proxy.close()


async def logged(gate: EgressGate) -> list[dict[str, object]]:
    await wait_until_async(lambda: all(e["status"] != "open" for e in gate._log), 2, 0.01)  # noqa: SLF001
    return gate.take()


def test_the_final_status_is_read_past_interim_heads_and_only_from_an_http_answer() -> None:
    assert answer_status(LIMITED) == 429
    assert answer_status(CONTINUED) == 200
    assert answer_status(b"HTTP/1.1 101 Switching Protocols\r\n\r\n") == 101
    assert answer_status(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.") is None  # more to come
    assert answer_status(b"HTT") is None and answer_status(b"") is None
    assert answer_status(b"\x16\x03\x01\x02\x00") == 0  # a TLS record: not an HTTP answer
    assert answer_status(b"SSH-2.0-OpenSSH_9.6\r\n") == 0


@pytest.mark.parametrize(("answer", "pieces", "status"), [(LIMITED, 1, 429), (LIMITED, 5, 429), (CONTINUED, 4, 200)])
@aio
async def test_a_plain_requests_answer_status_is_logged_and_the_answer_passes_unchanged(
    answer: bytes, pieces: int, status: int
) -> None:
    async with Answering(answer, pieces=pieces) as server:
        dest = f"judge.example.com:{server.port}"
        async with gate_for(EgressProxy({"judge.example.com": "127.0.0.1"}), dest) as gate:
            got = await ask(gate, f"POST http://{dest}/v1/chat/completions HTTP/1.1\r\nHost: {dest}\r\n\r\n")
            log = await logged(gate)
    assert got == answer
    assert [(e["host"], e["status"], e.get("http_status")) for e in log] == [(dest, "ok", status)]


@aio
async def test_an_answer_that_is_no_http_within_the_limit_logs_no_status() -> None:
    noise = b"x" * (STATUS_SNIFF_LIMIT + 100)
    async with Answering(noise, pieces=3) as server:
        dest = f"judge.example.com:{server.port}"
        async with gate_for(EgressProxy({"judge.example.com": "127.0.0.1"}), dest) as gate:
            got = await ask(gate, f"GET http://{dest}/ HTTP/1.1\r\nHost: {dest}\r\n\r\n")
            log = await logged(gate)
    assert got == noise and "http_status" not in log[0]


@aio
async def test_a_429_inside_tls_the_proxy_ends_is_logged(tmp_path: Path) -> None:
    server_tls, _pem = certificate(tmp_path, "judge.example.com")
    async with Answering(LIMITED, server_tls) as server:
        dest = f"judge.example.com:{server.port}"
        proxy = EgressProxy({"judge.example.com": "127.0.0.1"}, ca_bundle=tmp_path / "judge.example.com.pem")
        headers: Headers = ((dest, (("Authorization", "Bearer sk-test"),)),)
        async with gate_for(proxy, dest, headers) as gate:
            reader, writer = await asyncio.open_unix_connection(str(gate.path))
            writer.write(f"CONNECT {dest} HTTP/1.1\r\nHost: {dest}\r\n\r\n".encode())
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
            trust = ssl.create_default_context(cafile=str(proxy.sandbox_bundle))
            await writer.start_tls(trust, server_hostname="judge.example.com")
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            got = await reader.read()
            writer.close()
            log = await logged(gate)
    assert got.startswith(b"HTTP/1.1 429 Too Many Requests") and got.endswith(b"slow down")
    assert [(e["status"], e.get("http_status")) for e in log] == [("ok", 429)]


@aio
async def test_an_opaque_connect_tunnel_is_never_read() -> None:
    async with Answering(LIMITED) as server:
        dest = f"judge.example.com:{server.port}"
        async with gate_for(EgressProxy({"judge.example.com": "127.0.0.1"}), dest) as gate:
            got = await ask(gate, f"CONNECT {dest} HTTP/1.1\r\nHost: {dest}\r\n\r\n", b"GET / HTTP/1.1\r\n\r\n")
            log = await logged(gate)
    assert got == LIMITED  # the client sees the 429; the proxy, relaying opaque bytes, does not read it
    assert [(e["status"], e.get("http_status")) for e in log] == [("ok", None)]


@aio
async def test_a_connection_opened_after_a_replys_mark_is_the_next_cases_even_while_the_reply_settles() -> None:
    # the pool marks the log when a case's reply is read; the next case may connect while the reply's
    # connections settle: its connection (and its 429) must not be logged as the answered case's
    async with Answering(LIMITED) as server:
        dest = f"judge.example.com:{server.port}"
        async with gate_for(EgressProxy({"judge.example.com": "127.0.0.1"}), dest) as gate:
            await ask(gate, f"GET http://{dest}/first HTTP/1.1\r\nHost: {dest}\r\n\r\n")
            mark = gate.mark()  # the first case's reply is read here
            reader, writer = await asyncio.open_unix_connection(str(gate.path))  # the next case connects
            await wait_until_async(lambda: len(gate._log) == 2, 2, 0.01)  # noqa: SLF001 - recorded before the take
            await gate.settle(mark)
            first = gate.take(mark)
            writer.write(f"GET http://{dest}/second HTTP/1.1\r\nHost: {dest}\r\n\r\n".encode())
            assert (await reader.read()) == LIMITED
            writer.close()
            second = await logged(gate)
    assert [(e["status"], e.get("http_status")) for e in first] == [("ok", 429)]
    assert [(e["status"], e.get("http_status")) for e in second] == [("ok", 429)]
