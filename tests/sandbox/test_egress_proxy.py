"""The egress proxy on its own, over real sockets: what it lets through, and the SSRF guard.

Targets are servers the test starts on loopback; every refusal is checked to happen before any
connection (the servers count what they accept). Names that must resolve to a private range go
through the proxy's resolver seam (a stand-in for a DNS server), everything else is real.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from evaluator_host.sandbox.egress.proxy import EgressGate, EgressProxy, Headers, is_public
from tests.support.aio import aio
from tests.support.egress import WS, Server, ask
from tests.support.tls import certificate
from tests.support.wait import wait_until_async


@asynccontextmanager
async def gate_of(
    proxy: EgressProxy, declared: list[str], allowed: list[str] | None = None, headers: Headers = ()
) -> AsyncIterator[EgressGate]:
    proxy.workspace_allow[WS] = frozenset(declared if allowed is None else allowed)
    gate = await proxy.open()
    gate.bind(WS, tuple(declared), headers)
    try:
        yield gate
    finally:
        await gate.close()
        proxy.close()


async def closed(gate: EgressGate) -> None:
    """Until the proxy has seen every connection of the gate end (the client's close arrives last)."""
    await wait_until_async(lambda: all(entry["status"] != "open" for entry in gate._log), 2, 0.01)  # noqa: SLF001


@aio
async def test_a_declared_and_allowed_name_is_reached_by_connect_and_by_plain_http() -> None:
    async with Server() as server:
        dest = f"api.openai.com:{server.port}"
        async with gate_of(EgressProxy({"api.openai.com": "127.0.0.1"}), [dest]) as gate:
            tunnel = await ask(gate, f"CONNECT {dest} HTTP/1.1\r\nHost: {dest}\r\n\r\n", b"GET / HTTP/1.0\r\n\r\n")
            assert tunnel.endswith(b"pong from 127.0.0.1")
            plain = await ask(gate, f"GET http://{dest}/x HTTP/1.1\r\nHost: {dest}\r\nProxy-Authorization: x\r\n\r\n")
            assert plain.endswith(b"pong from 127.0.0.1")
            await closed(gate)
            log = gate.take()
    assert server.accepted == 2
    assert [(e["host"], e["status"]) for e in log] == [(dest, "ok"), (dest, "ok")]
    assert all(e["bytes_in"] > 0 and e["bytes_out"] > 0 and e["duration_ms"] >= 0 for e in log)


REFUSED = [
    ("CONNECT 127.0.0.1:{port} HTTP/1.1", "IP literals"),
    ("CONNECT [::1]:{port} HTTP/1.1", "IP literals"),
    ("CONNECT 169.254.169.254:80 HTTP/1.1", "IP literals"),
    ("GET http://127.0.0.1:{port}/ HTTP/1.1", "IP literals"),
    ("CONNECT 0.0.0.0:{port} HTTP/1.1", "IP literals"),  # digits and dots only: parsed (a name is not)
    ("CONNECT [::ffff:127.0.0.1]:{port} HTTP/1.1", "IP literals"),  # a colon: parsed, dots and all
    ("CONNECT other.example.com:{port} HTTP/1.1", "not in the evaluator's network"),
    ("CONNECT api.openai.com:1 HTTP/1.1", "not in the evaluator's network"),
    ("CONNECT denied.example.com:{port} HTTP/1.1", "not in the workspace's network_allow"),
    ("CONNECT localhost:{port} HTTP/1.1", "not public"),  # the real system resolver: loopback
    ("DELETE /x HTTP/1.1", "only CONNECT"),
    ("GET https://api.openai.com/ HTTP/1.1", "only CONNECT"),
    ("NOT HTTP", "not an HTTP proxy request"),
]


@pytest.mark.parametrize(("request_line", "reason"), REFUSED)
@aio
async def test_refusals_happen_before_any_connection(request_line: str, reason: str) -> None:
    async with Server() as server:
        declared = [f"api.openai.com:{server.port}", f"localhost:{server.port}", f"denied.example.com:{server.port}"]
        allowed = declared[:2]
        async with gate_of(EgressProxy({"api.openai.com": "127.0.0.1"}), declared, allowed) as gate:
            answer = await ask(gate, request_line.format(port=server.port) + "\r\n\r\n")
            log = gate.take()
    assert answer.startswith(b"HTTP/1.1 403 Forbidden"), answer
    assert reason.encode() in answer
    assert len(log) == 1 and log[0]["status"].startswith("refused: ") and reason in log[0]["status"]
    assert server.accepted == 0


# IPv6 addresses that carry the metadata address (or another IPv4) inside them: a NAT64 gateway, a 6to4
# relay or a Teredo tunnel on the way would connect to the IPv4 they embed
EMBEDDED_IPV4 = [
    ["64:ff9b::a9fe:a9fe"],  # NAT64 (RFC 6052) of 169.254.169.254
    ["64:ff9b::a00:1"],  # NAT64 of 10.0.0.1
    ["64:ff9b:1::a9fe:a9fe"],  # local-use NAT64 (RFC 8215)
    ["2002:a9fe:a9fe::1"],  # 6to4 of 169.254.169.254
    ["2002:7f00:1::1"],  # 6to4 of 127.0.0.1
    ["::169.254.169.254"],  # IPv4-compatible
    ["::ffff:0:a9fe:a9fe"],  # IPv4-translated (RFC 2765)
    ["fec0::1"],  # site-local
    ["2001:0:4136:e378:8000:63bf:3fff:fdd2"],  # Teredo
]


@pytest.mark.parametrize(
    "addresses",
    [
        ["10.1.2.3"],
        ["172.16.0.1"],
        ["192.168.1.1"],
        ["169.254.169.254"],  # cloud metadata
        ["100.64.0.1"],  # shared (carrier-grade NAT)
        ["0.0.0.0"],
        ["224.0.0.1"],
        ["::1"],
        ["fd00:ec2::254"],  # metadata over IPv6 (unique local)
        ["fe80::1"],
        ["::ffff:127.0.0.1"],  # loopback behind an IPv4-mapped address
        ["93.184.216.34", "10.0.0.1"],  # one public answer does not launder a private one
        *EMBEDDED_IPV4,
    ],
)
@aio
async def test_a_name_resolving_to_a_non_public_address_is_refused_unconnected(addresses: list[str]) -> None:
    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        return addresses

    proxy = EgressProxy(resolve=resolve)
    async with gate_of(proxy, ["api.example.com:443"]) as gate:
        answer = await ask(gate, "CONNECT api.example.com:443 HTTP/1.1\r\n\r\n")
        log = gate.take()
    assert asked == ["api.example.com"]
    assert answer.startswith(b"HTTP/1.1 403") and b"not public" in answer
    assert "not public" in log[0]["status"]


@aio
async def test_dns_rebinding_changes_nothing_the_checked_address_is_the_one_connected() -> None:
    """A name whose answer flips (TTL 0) between the check and the connection: the proxy resolves
    once and connects to the address it checked. 127.0.0.2 stands in for a public address here."""
    answers = iter([["127.0.0.2"], ["127.0.0.1"]])
    asked: list[str] = []

    async def rebinding(host: str, port: int) -> list[str]:
        asked.append(host)
        return next(answers)

    def public(address: str) -> bool:
        return address == "127.0.0.2"

    async with Server("127.0.0.2") as outside, Server("127.0.0.1", outside.port) as inside:
        # the same port on both: a connection to the rebound answer would reach `inside`
        dest = f"rebind.example.com:{outside.port}"
        async with gate_of(EgressProxy(resolve=rebinding, public=public), [dest]) as gate:
            first = await ask(gate, f"CONNECT {dest} HTTP/1.1\r\n\r\n", b"GET / HTTP/1.0\r\n\r\n")
            second = await ask(gate, f"CONNECT {dest} HTTP/1.1\r\n\r\n", b"GET / HTTP/1.0\r\n\r\n")
        assert first.endswith(b"pong from 127.0.0.2")
        assert second.startswith(b"HTTP/1.1 403") and b"not public (127.0.0.1)" in second
        assert asked == ["rebind.example.com", "rebind.example.com"]  # once per connection, never twice
        assert (outside.accepted, inside.accepted) == (1, 0)


def test_what_counts_as_public() -> None:
    assert is_public("93.184.216.34") and is_public("2606:2800:220:1:248:1893:25c8:1946")
    for address in ("127.0.0.1", "10.0.0.1", "169.254.169.254", "::ffff:10.0.0.1", "fc00::1", "192.0.2.1"):
        assert not is_public(address), address


def test_ipv6_forms_embedding_an_ipv4_address_are_judged_by_it_or_refused() -> None:
    for (address,) in EMBEDDED_IPV4:
        assert not is_public(address), address
    # the same prefixes around a public IPv4 address stay usable (an IPv6-only network's NAT64, 6to4)
    assert is_public("64:ff9b::5db8:d822") and is_public("2002:5db8:d822::1")  # 93.184.216.34


# -- headers the proxy sets (the secret stays on the host) ---------------------------------------

SECRET = "sk-test-0123456789abcdef"  # what the workspace secret would hold: only the proxy has it


class TlsServer:
    """An HTTPS server for ``api.example.com`` on 127.0.0.1: records each request head, answers ``pong``
    saying keep-alive (the proxy's answer to the client must say close) and closes."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.context, self.heads, self.port = context, [], 0
        self.heads: list[str]
        self._server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> TlsServer:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                self.heads.append((await reader.readuntil(b"\r\n\r\n")).decode("latin-1"))
                writer.write(
                    b"HTTP/1.1 100 Continue\r\n\r\n"
                    b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: keep-alive\r\n\r\npong"
                )
                await writer.drain()  # then closes: the request said Connection: close
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


async def _through_tls(gate: EgressGate, dest: str, request: bytes, trust: ssl.SSLContext) -> bytes:
    """CONNECT, then TLS (trusting ``trust``) and ``request`` inside; everything answered."""
    reader, writer = await asyncio.open_unix_connection(str(gate.path))
    writer.write(f"CONNECT {dest} HTTP/1.1\r\nHost: {dest}\r\n\r\n".encode())
    status = await reader.readuntil(b"\r\n\r\n")
    if not status.startswith(b"HTTP/1.1 200"):
        writer.close()
        return status + await reader.read()
    await writer.start_tls(trust, server_hostname=dest.rpartition(":")[0])
    writer.write(request)
    answer = await reader.read()
    writer.close()
    return answer


@aio
async def test_the_proxy_sets_declared_headers_inside_tls_it_ends_and_the_client_never_sees_them(
    tmp_path: Path,
) -> None:
    server_tls, pem = certificate(tmp_path, "api.example.com")
    async with TlsServer(server_tls) as server:
        dest = f"api.example.com:{server.port}"
        proxy = EgressProxy({"api.example.com": "127.0.0.1"}, ca_bundle=tmp_path / "api.example.com.pem")
        headers: Headers = ((dest, (("Authorization", f"Bearer {SECRET}"), ("OpenAI-Project", "proj_1"))),)
        async with gate_of(proxy, [dest], headers=headers) as gate:
            trust = ssl.create_default_context(cafile=str(proxy.sandbox_bundle))  # what SSL_CERT_FILE names
            bundle = proxy.sandbox_bundle.read_text()
            request = (
                b"POST /v1/chat HTTP/1.1\r\nHost: other-site.example\r\nauthorization: Bearer mine\r\n"
                b"X-Mine: 1\r\nContent-Length: 2\r\nExpect: 100-continue\r\nProxy-Authorization: x\r\n\r\n{}"
            )
            answer = await _through_tls(gate, dest, request, trust)
            await closed(gate)
            log = gate.take()
    (head,) = server.heads
    lines = head.split("\r\n")
    assert f"Authorization: Bearer {SECRET}" in lines and "OpenAI-Project: proj_1" in lines
    assert f"Host: {dest}" in lines and "Connection: close" in lines and "X-Mine: 1" in lines
    assert "Bearer mine" not in head and "other-site" not in head and "Proxy-Authorization" not in head
    assert answer.startswith(b"HTTP/1.1 100 Continue") and answer.endswith(b"pong")
    assert b"Connection: close" in answer and b"keep-alive" not in answer
    assert SECRET.encode() not in answer and SECRET not in bundle and SECRET not in repr(log)
    assert [(e["host"], e["status"], e["injected"]) for e in log] == [(dest, "ok", ["Authorization", "OpenAI-Project"])]


@aio
async def test_a_destination_with_headers_is_never_reached_in_the_clear_or_unverified(tmp_path: Path) -> None:
    server_tls, _pem = certificate(tmp_path, "api.example.com")
    async with TlsServer(server_tls) as server:
        dest = f"api.example.com:{server.port}"
        headers: Headers = ((dest, (("Authorization", f"Bearer {SECRET}"),)),)
        # plain http:// to it: the header would cross the network in the clear
        trusting = EgressProxy({"api.example.com": "127.0.0.1"}, ca_bundle=tmp_path / "api.example.com.pem")
        async with gate_of(trusting, [dest], headers=headers) as gate:
            plain = await ask(gate, f"GET http://{dest}/ HTTP/1.1\r\nHost: {dest}\r\n\r\n")
            # a client that does not trust the proxy's CA: no request is read, nothing is sent
            distrust = ssl.create_default_context(cadata=_pem)
            with pytest.raises(ssl.SSLError):
                await _through_tls(gate, dest, b"GET / HTTP/1.1\r\n\r\n", distrust)
            await closed(gate)
            log = gate.take()
        # a destination whose certificate the ca_bundle does not vouch for: refused before the tunnel
        unverified = EgressProxy({"api.example.com": "127.0.0.1"}, ca_bundle=None)
        async with gate_of(unverified, [dest], headers=headers) as gate:
            untrusted = await ask(gate, f"CONNECT {dest} HTTP/1.1\r\n\r\n")
    assert plain.startswith(b"HTTP/1.1 403") and b"only https" in plain
    assert "only https" in log[0]["status"] and "no request over TLS" in log[1]["status"]
    assert untrusted.startswith(b"HTTP/1.1 403") and b"certificate is not trusted" in untrusted
    assert server.heads == []  # the header never left the proxy


class Echo:
    """An HTTP/1.0 server on loopback answering a request's body (``Content-Length`` bytes) back."""

    async def __aenter__(self) -> Echo:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            body = await reader.readexactly(length)
            writer.write(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
            writer.close()

        self._server = await asyncio.start_server(handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()


async def _send(gate: EgressGate, data: bytes) -> bytes:
    """``data`` in one write through the gate (a head and what follows it at once); everything answered."""
    reader, writer = await asyncio.open_unix_connection(str(gate.path))
    writer.write(data)
    answer = await reader.read()
    writer.close()
    return answer


async def _relay_large_bodies_both_ways() -> None:
    body = bytes(range(256)) * (3 * 4096)  # 3 MiB each way: more than the sockets hold, so reading pauses
    request = b"POST /echo HTTP/1.0\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    async with Echo() as server:
        dest = f"api.openai.com:{server.port}"
        async with gate_of(EgressProxy({"api.openai.com": "127.0.0.1"}), [dest]) as gate:
            # the tunnel's first bytes sent with the CONNECT head, before its answer: relayed all the same
            tunnel = await _send(gate, f"CONNECT {dest} HTTP/1.1\r\n\r\n".encode() + request)
            plain_head = f"POST http://{dest}/echo HTTP/1.1\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            plain = await _send(gate, plain_head + body)
            await closed(gate)
            log = gate.take()
    established = b"HTTP/1.1 200 Connection established\r\n\r\n"
    answer = b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    assert tunnel == established + answer and plain == answer
    assert [e["status"] for e in log] == ["ok", "ok"]
    assert log[0]["bytes_out"] == len(request) and log[0]["bytes_in"] == len(answer)
    assert log[1]["bytes_in"] == len(answer) and log[1]["bytes_out"] > len(body)  # the head as forwarded, the body


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])  # the service runs on uvloop; the tests' own loops on asyncio
def test_large_bodies_are_relayed_whole_both_ways_on_either_loop(loop: str) -> None:
    import uvloop

    run = uvloop.run if loop == "uvloop" else asyncio.run
    run(asyncio.wait_for(_relay_large_bodies_both_ways(), 20))


async def _a_connection_the_sandbox_closed_is_logged_ok_when_its_case_answers() -> None:
    """EgressGate.settle: the case's log is taken right after its answer. A connection the sandbox
    closed before answering is "ok" there, even when the destination takes a while to end its own side
    (here 50 ms after the sandbox's EOF); one the sandbox keeps open is "open", with its bytes so far."""
    body = b"pong"
    ended = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        await reader.read()  # the client's end of the connection (or the test's end)
        await asyncio.sleep(0.05)  # a destination slow to end its own side
        writer.close()
        ended.set()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    dest = f"api.openai.com:{port}"

    async def fetch(gate: EgressGate, close: bool) -> asyncio.StreamWriter:
        reader, writer = await asyncio.open_unix_connection(str(gate.path))
        writer.write(f"GET http://{dest}/ HTTP/1.1\r\nHost: {dest}\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and await reader.readexactly(len(body)) == body
        if close:
            writer.close()
            await writer.wait_closed()
        return writer

    try:
        async with gate_of(EgressProxy({"api.openai.com": "127.0.0.1"}), [dest]) as gate:
            await fetch(gate, close=True)
            await gate.settle()
            closed_one = gate.take()
            kept = await fetch(gate, close=False)
            await gate.settle()
            kept_one = gate.take()
            kept.close()
    finally:
        server.close()
    assert [(e["host"], e["status"]) for e in closed_one] == [(dest, "ok")]
    assert closed_one[0]["bytes_in"] > len(body) and "_ending" not in closed_one[0]
    assert [(e["host"], e["status"]) for e in kept_one] == [(dest, "open")]
    assert kept_one[0]["bytes_in"] > len(body)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_connection_closed_before_its_case_answered_is_logged_ok_on_either_loop(loop: str) -> None:
    import uvloop

    run = uvloop.run if loop == "uvloop" else asyncio.run
    run(asyncio.wait_for(_a_connection_the_sandbox_closed_is_logged_ok_when_its_case_answers(), 20))
