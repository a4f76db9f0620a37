"""A sandbox's proxy port handed to its gate: the egress proxy accepts the sandbox's connections itself.

Without this, a worker's connections to ``127.0.0.1:3128`` (its ``HTTP(S)_PROXY``) are accepted in the
sandbox by the harness's forwarder and copied, byte by byte, to the worker's gate (a unix socket) —
one more hop each way, in a process that shares its interpreter lock with the evaluator. With it, the
Python harness binds ``127.0.0.1:3128`` in the sandbox's own network namespace and, before any user code
is loaded, hands the *listening socket* to its gate over the gate's unix socket (``SCM_RIGHTS``); the
service accepts the sandbox's connections on it directly and serves each exactly as one that came
through the unix socket (the same ``serve``: every check, log entry and limit of the proxy unchanged).

The exchange, on a connection to the gate (:data:`HANDOFF_HEAD` first, as a request head would be):

1. the harness sends :data:`HANDOFF_HEAD`; the gate answers ``GO`` only on the very first connection
   it ever accepted (:attr:`EgressGate.handoff_open`), else ``NO why``. The harness makes that
   connection before it reads its ``load`` frame, so it comes before any user code runs in the sandbox;
   user code's offers come later and are refused (logged in ``details.egress`` like any refusal);
2. the harness sends one byte with the listening socket's descriptor;
3. the gate takes it only if it is exactly one descriptor, a listening TCP/IPv4 stream socket bound to
   ``127.0.0.1:3128`` (:data:`~evaluator_host.sandbox.egress.proxy.IN_SANDBOX_PORT`) in a network namespace
   that is *not* the service's own (``SO_NETNS_COOKIE``; a socket of the host's network would let the
   host's local users borrow this worker's allowlist), and answers ``OK``; anything else is closed
   and answered ``NO why``, and the harness forwards as before (so a refusal costs speed, never egress).

The listener is served until the gate closes (with its worker). See docs/security.md, "Egress".
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Protocol, cast

from evaluator_host.sandbox.egress.head import HEAD_LIMIT


class EgressGate(Protocol):
    """What the exchange needs of the gate (:class:`evaluator_host.sandbox.egress.proxy.EgressGate`): the one
    in-sandbox port a listener may be bound to, and where the taken listener is kept (closed with the gate).
    A protocol, so that this module does not import the gate that imports it."""

    port: int
    listener: asyncio.AbstractServer | None


__all__ = ["HANDOFF_HEAD", "take_listener"]

HANDOFF_HEAD = b"EVH-HANDOFF listener\r\n\r\n"  # not an HTTP request line: a proxy request never matches it
_SO_NETNS_COOKIE = 71  # linux/socket.h (5.14+): the network namespace a socket belongs to
_WAIT_S = 5.0  # for the descriptor after GO
_BACKLOG = 1024  # connections the kernel completes before the service accepts them (64 rows in flight arrive at once)
_MAX_FDS = 4  # room for a few, so that more than one is seen (and refused), not silently cut

Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class _Refused(Exception):
    """A listener the gate does not take (the reason goes back to the harness)."""


def _own_netns() -> bytes:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        return probe.getsockopt(socket.SOL_SOCKET, _SO_NETNS_COOKIE, 8)


def _receive(fd: int) -> list[int]:
    """The descriptors sent with one byte on the connection ``fd`` (a duplicate: closed here, by the one
    thread that uses it), waiting at most :data:`_WAIT_S`."""
    with socket.socket(fileno=fd) as conn:
        conn.settimeout(_WAIT_S)
        fds = array.array("i")
        # close-on-exec from the start: no worker the service starts later inherits a sandbox's socket
        data, ancillary, flags, _ = conn.recvmsg(1, socket.CMSG_SPACE(_MAX_FDS * fds.itemsize), socket.MSG_CMSG_CLOEXEC)
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    received = list(fds)
    if not data or flags & socket.MSG_CTRUNC:
        for fd in received:
            os.close(fd)
        raise _Refused("no descriptor" if not data else "too many descriptors")
    return received


def checked(fds: list[int], port: int) -> socket.socket:
    """The listener of ``fds`` if it is the one :func:`take_listener` takes (module docstring, 3.), else
    :class:`_Refused`; every descriptor not returned is closed."""
    if len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise _Refused(f"{len(fds)} descriptors, not one")
    try:
        sock = socket.socket(fileno=fds[0])  # family, type and protocol read from the descriptor
    except OSError:
        os.close(fds[0])
        raise _Refused("not a socket") from None
    try:
        if sock.family != socket.AF_INET or sock.type != socket.SOCK_STREAM or sock.proto != socket.IPPROTO_TCP:
            raise _Refused("not a TCP/IPv4 socket")
        if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            raise _Refused("not listening")
        if sock.getsockname() != ("127.0.0.1", port):
            raise _Refused(f"not bound to 127.0.0.1:{port}")
        try:
            theirs = sock.getsockopt(socket.SOL_SOCKET, _SO_NETNS_COOKIE, 8)
        except OSError:
            raise _Refused("its network namespace cannot be told") from None
        if theirs == _own_netns():
            raise _Refused("a socket of the service's own network")
    except BaseException:
        sock.close()
        raise
    return sock


async def take_listener(
    gate: EgressGate, first: bool, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, serve: Serve
) -> str | None:
    """The exchange of the module docstring on a gate connection whose head was :data:`HANDOFF_HEAD`
    (``first``: the gate's first connection ever): ``None`` when the listener is taken (and served with
    ``serve``), else why not."""
    if not first:
        why = "a listener is taken only on the gate's first connection, before the evaluator is loaded"
        with contextlib.suppress(OSError, RuntimeError):
            writer.write(f"NO {why}\n".encode())
        return why
    try:
        return await _take(gate, reader, writer, serve, gate.port)
    except (OSError, RuntimeError) as exc:  # the other end went away
        return f"the exchange broke off ({exc.__class__.__name__})"


async def _take(
    gate: EgressGate, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, serve: Serve, port: int
) -> str | None:
    if reader._buffer:  # type: ignore[attr-defined]  # noqa: SLF001 - bytes past the head: not the harness
        writer.write(b"NO bytes after the head\n")
        return "bytes after the head"
    transport = cast(asyncio.Transport, writer.transport)
    transport.pause_reading()  # the descriptor rides on the next byte: read here, not by the transport
    writer.write(b"GO\n")
    await writer.drain()
    try:
        listener = checked(await asyncio.to_thread(_receive, os.dup(writer.get_extra_info("socket").fileno())), port)
    except (_Refused, OSError) as refused:
        why = str(refused) if isinstance(refused, _Refused) else f"no descriptor ({refused.__class__.__name__})"
        writer.write(f"NO {why}\n".encode())
        return why
    listener.setblocking(False)
    gate.listener = await asyncio.start_server(serve, sock=listener, limit=HEAD_LIMIT, backlog=_BACKLOG)
    writer.write(b"OK\n")
    await writer.drain()
    return None
