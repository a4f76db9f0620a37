"""The sandbox's proxy port handed to its gate (``sandbox/egress/handoff.py``), over real sockets.

The accepted case runs the harness's own :func:`hand_over` in a child process in a network namespace of
its own (``unshare --net``, as a sandbox has): the gate then accepts that namespace's connections to
``127.0.0.1:3128`` itself, and judges them exactly as those through its unix socket (an allowed name
reached, an undeclared one refused before any connection). Every other offer — the wrong kind of
descriptor, the wrong address, the service's own network, more than one descriptor, an offer that is not
the gate's first connection (user code's) — is refused, nothing is taken, and the gate goes on serving.
"""

from __future__ import annotations

import array
import asyncio
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from evaluator_host.sandbox.egress.proxy import IN_SANDBOX_PORT, EgressGate, EgressProxy
from tests.support.aio import aio
from tests.support.egress import WS, Server, ask

FORWARDER = Path(__file__).parents[2] / "runtimes" / "python" / "evaluator_harness" / "egress.py"


def harness_egress() -> ModuleType:
    """The harness's forwarder module (standard library only), loaded from its file as the sandbox does."""
    spec = importlib.util.spec_from_file_location("harness_egress", FORWARDER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# the child: a network namespace of its own (lo up), the harness's listener offered to the gate, then
# one proxy request per line of stdin sent to 127.0.0.1:3128 there, each answer's first line printed
CHILD = f"""
import socket, subprocess, sys, importlib.util
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
spec = importlib.util.spec_from_file_location("e", {str(FORWARDER)!r})
e = importlib.util.module_from_spec(spec); spec.loader.exec_module(e)
listener = e.listen({IN_SANDBOX_PORT}, 1024)
taken = e.hand_over(listener, sys.argv[1])
listener.close()
print("taken" if taken else "refused", flush=True)
for line in sys.stdin:
    with socket.create_connection(("127.0.0.1", {IN_SANDBOX_PORT}), timeout=10) as s:
        s.sendall(line.strip().encode().decode("unicode_escape").encode())
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    print(repr(answer), flush=True)
"""

needs_netns = pytest.mark.skipif(
    shutil.which("unshare") is None
    or subprocess.run(["unshare", "-rn", "true"], capture_output=True, check=False).returncode != 0,
    reason="no unprivileged network namespaces here",
)


async def _offer(gate: EgressGate, send: Callable[[socket.socket], None]) -> bytes:
    """Offer something to ``gate`` as the harness does (``send`` it after GO): the gate's last answer."""

    def run() -> bytes:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(10)
            conn.connect(str(gate.path))
            conn.sendall(harness_egress().HANDOFF_HEAD)
            answer = conn.recv(512)
            if answer.startswith(b"GO"):
                send(conn)
                answer = conn.recv(512)
            return answer

    return await asyncio.to_thread(run)


def _fds(*fds: int) -> Callable[[socket.socket], None]:
    return lambda conn: conn.sendmsg([b"\0"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())])


@needs_netns
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])  # the service runs on uvloop; the tests' own loops on asyncio
def test_a_sandboxs_listener_is_taken_and_its_connections_are_judged_as_any_other(loop: str) -> None:
    import uvloop

    run = uvloop.run if loop == "uvloop" else asyncio.run
    run(asyncio.wait_for(_taken_and_judged(), 20))


async def _taken_and_judged() -> None:
    async with Server() as server:
        dest = f"api.openai.com:{server.port}"
        proxy = EgressProxy({"api.openai.com": "127.0.0.1"})
        proxy.workspace_allow[WS] = frozenset([dest])
        gate = await proxy.open()
        child = await asyncio.create_subprocess_exec(
            "unshare", "-rn", sys.executable, "-c", CHILD, str(gate.path),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert child.stdin is not None and child.stdout is not None
        try:
            assert await child.stdout.readline() == b"taken\n"
            assert gate.listener is not None
            gate.bind(WS, (dest,))  # the evaluator is loaded only now
            child.stdin.write(f"GET http://{dest}/x HTTP/1.1\\r\\nHost: {dest}\\r\\n\\r\\n\n".encode())
            child.stdin.write(b"CONNECT other.example.com:443 HTTP/1.1\\r\\n\\r\\n\n")
            child.stdin.write(b"CONNECT 127.0.0.1:22 HTTP/1.1\\r\\n\\r\\n\n")
            await child.stdin.drain()
            answers = [await child.stdout.readline() for _ in range(3)]
            log = gate.take()
        finally:
            child.stdin.close()
            await child.wait()
            await gate.close()
            proxy.close()
    assert b"pong from 127.0.0.1" in answers[0]
    assert b"403" in answers[1] and b"not in the evaluator's network" in answers[1]
    assert b"403" in answers[2] and b"IP literals" in answers[2]
    assert server.accepted == 1  # the refusals connected nowhere
    assert [(e["host"], e["status"].split(":")[0]) for e in log] == [
        (dest, "ok"),
        ("other.example.com:443", "refused"),
        ("127.0.0.1:22", "refused"),
    ]  # the handoff itself is not a connection of any case


def _listening(address: tuple[str, int], kind: int = socket.SOCK_STREAM) -> socket.socket:
    sock = socket.socket(socket.AF_INET, kind)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    if kind == socket.SOCK_STREAM:
        sock.listen(4)
    return sock


OFFERS: dict[str, tuple[Callable[[int], list[socket.socket]], str]] = {
    # name: (the sockets offered, given the gate's port), the reason the gate gives
    "udp": (lambda port: [_listening(("127.0.0.1", port), socket.SOCK_DGRAM)], "not a TCP/IPv4 socket"),
    "unix": (lambda port: [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)], "not a TCP/IPv4 socket"),
    "not listening": (lambda port: [socket.create_connection(("127.0.0.1", port))], "not listening"),
    "another port": (lambda port: [_listening(("127.0.0.1", 0))], "not bound to 127.0.0.1"),
    "the service's own network": (lambda port: [_listening(("127.0.0.1", port))], "the service's own network"),
    "two descriptors": (lambda port: [_listening(("127.0.0.1", 0)), _listening(("127.0.0.1", 0))], "2 descriptors"),
}


@pytest.mark.parametrize("offer", list(OFFERS))
@aio
async def test_anything_but_a_sandboxs_own_proxy_port_is_refused_and_the_gate_goes_on(offer: str) -> None:
    async with Server() as server:
        dest = f"api.openai.com:{server.port}"
        proxy = EgressProxy({"api.openai.com": "127.0.0.1"})
        proxy.workspace_allow[WS] = frozenset([dest])
        gate = await proxy.open()
        try:
            # the port the gate expects: one free on this host's loopback (the sandbox's is always 3128)
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            gate.port = port
            make, reason = OFFERS[offer]
            with _listening(("127.0.0.1", 0)) as target:  # "not listening" connects to something real
                gate_port = target.getsockname()[1] if offer == "not listening" else port
                sockets = make(gate_port)
            try:
                answer = await _offer(gate, _fds(*(s.fileno() for s in sockets)))
            finally:
                for sock in sockets:
                    sock.close()
            assert answer.startswith(b"NO") and reason.encode() in answer, answer
            assert gate.listener is None
            assert gate.handoff_open is False  # one offer per gate, whatever came of it
            with _listening(("127.0.0.1", 0)) as sock:
                again = await _offer(gate, _fds(sock.fileno()))
            assert again.startswith(b"NO") and b"only on the gate's first connection" in again
            gate.bind(WS, (dest,))
            plain = await ask(gate, f"GET http://{dest}/x HTTP/1.1\r\nHost: {dest}\r\n\r\n")  # still serving
            assert plain.endswith(b"pong from 127.0.0.1")
        finally:
            await gate.close()
            proxy.close()


@aio
async def test_a_pipe_or_nothing_is_refused_and_no_offer_is_taken_but_on_the_first_connection() -> None:
    proxy = EgressProxy()
    gates: list[EgressGate] = []
    try:
        gate = await proxy.open()
        gates.append(gate)
        read, write = os.pipe()
        try:
            answer = await _offer(gate, _fds(read))
        finally:
            os.close(read)
            os.close(write)
        assert answer.startswith(b"NO not a socket"), answer
        gate = await proxy.open()
        gates.append(gate)
        assert (await _offer(gate, lambda conn: conn.sendall(b"x"))).startswith(b"NO 0 descriptors")
        gate = await proxy.open()
        gates.append(gate)
        gate.bind(WS, ())
        assert (await ask(gate, "CONNECT other.example.com:443 HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 403")
        with _listening(("127.0.0.1", 0)) as sock:  # user code's offer, after its first request: never even GO
            answer = await _offer(gate, _fds(sock.fileno()))
        assert answer.startswith(b"NO a listener is taken only on the gate's first connection")
        assert gate.listener is None
        assert [e["status"].split(":")[0:2] for e in gate.take()] == [
            ["refused", " other.example.com"],
            ["refused", " listener handoff"],
        ]
    finally:
        for each in gates:
            await each.close()
        proxy.close()


@aio
async def test_a_refused_offer_leaves_the_harness_forwarding_on_the_same_port() -> None:
    """The harness's fallback (``forward_egress``): the gate said no (here: a socket of the service's own
    network), so the harness's forwarder serves the listener it offered, to the same gate, judged the same."""
    egress = harness_egress()
    async with Server() as server:
        dest = f"api.openai.com:{server.port}"
        proxy = EgressProxy({"api.openai.com": "127.0.0.1"})
        proxy.workspace_allow[WS] = frozenset([dest])
        gate = await proxy.open()
        try:
            listener = egress.listen(0, 1024)
            gate.port = listener.getsockname()[1]
            assert not await asyncio.to_thread(egress.hand_over, listener, str(gate.path))
            assert gate.listener is None
            threading.Thread(target=egress.forward(str(gate.path), listener=listener), daemon=True).start()
            gate.bind(WS, (dest,))

            def request() -> bytes:
                with socket.create_connection(("127.0.0.1", gate.port), timeout=10) as conn:
                    conn.sendall(f"GET http://{dest}/x HTTP/1.1\r\nHost: {dest}\r\n\r\n".encode())
                    answer = b""
                    while chunk := conn.recv(65536):
                        answer += chunk
                    return answer

            assert (await asyncio.to_thread(request)).endswith(b"pong from 127.0.0.1")
        finally:
            await gate.close()
            proxy.close()
    assert server.accepted == 1


def test_a_received_descriptor_is_close_on_exec() -> None:
    """No worker the service starts later inherits a sandbox's socket (the fd-leak regressions of
    tests/compliance/test_escapes.py)."""
    from evaluator_host.sandbox.egress.handoff import _receive

    left, right = socket.socketpair()
    with left, right, _listening(("127.0.0.1", 0)) as sock:
        _fds(sock.fileno())(left)
        (fd,) = _receive(os.dup(right.fileno()))
        try:
            assert not os.get_inheritable(fd)
        finally:
            os.close(fd)
