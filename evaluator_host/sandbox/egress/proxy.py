"""The egress proxy: the only way out of a sandbox, for evaluators that declare ``network``.

A worker started for an egress runtime (``RuntimeKey.egress``) gets an :class:`EgressGate`: a unix socket of its own
on the host, which the backend binds into the sandbox at ``/sandbox/egress.sock`` (the sandbox has no other network: a
fresh network namespace, or docker's ``none``). In the sandbox the harness forwards ``127.0.0.1:3128`` to that socket
and the worker's environment names it (``HTTP(S)_PROXY``), so ordinary clients work unchanged. Everything that reaches
the gate is judged here, on the host, where user code cannot reach:

* requests are ``CONNECT host:port`` (any protocol in the tunnel, TLS included) or an absolute
  ``http://host:port/...`` request (forwarded with ``Connection: close``); nothing else;
* the host must be a DNS name (IP literals are refused) and ``host:port`` must be both declared
  by the evaluator (the gate's ``declared``, set when the worker is bound) and in its workspace's
  ``network_allow`` now (:attr:`EgressProxy.workspace_allow`, updated on every ``PATCH``);
* the name is resolved once, here; if any address is not globally routable
  (:func:`~evaluator_host.sandbox.egress.addresses.is_public`, IPv6 forms embedding an IPv4 address
  included) the request is refused before any connection is made, and the connection goes to the very
  address that was checked (a DNS answer that changes between check and use — rebinding — changes
  nothing). ``egress_hosts`` (settings) pins names to addresses the operator trusts;
* the request's head is read by :mod:`evaluator_host.sandbox.egress.head` (the build relay's parser too);
* a destination declared with ``headers`` (``NetworkEntry``) gets them from the proxy, secrets filled
  in on the host: over HTTPS the proxy ends the sandbox's TLS with a certificate of its own CA (which
  the sandbox trusts: :mod:`evaluator_host.sandbox.egress.tls`), reads the request, replaces the
  headers it sets (and ``Host``: the request goes to the declared name, never another site on the same
  address), sends it over its own verified TLS to the destination with ``Connection: close`` and relays
  the answer; one request per connection. Plain ``http://`` to such a destination is refused (the
  header would cross the network in the clear). The sandbox never holds the values;
* each connection is logged (destination, bytes each way, duration, or why it was refused, the
  names of the headers the proxy set, and ``http_status``, the answer's status code, where the proxy
  sees it: a plain ``http://`` request, or one it completed inside TLS it ended — never inside an
  opaque ``CONNECT`` tunnel) and the pool hands the entries to the result of the case they happened in
  (``details.egress``, and the host's own copy the evaluator cannot touch: ``EvaluationResult.proxy_log``,
  what a rule's ``model_calls_per_minute`` and its judge's 429s are counted from).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import shutil
import ssl
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaluator_host.sandbox.egress.addresses import is_public, system_resolve
from evaluator_host.sandbox.egress.handoff import HANDOFF_HEAD, take_listener
from evaluator_host.sandbox.egress.head import HEAD_LIMIT, ProxyHead, Refused, checked, parse_origin, parse_proxy_head
from evaluator_host.sandbox.egress.splice import pump, splice
from evaluator_host.shared import unix_sockets

if TYPE_CHECKING:  # the TLS module (cryptography) is imported with the first gate, not with the backend
    from evaluator_host.sandbox.egress.tls import Authority

__all__ = [
    "IN_SANDBOX_PORT",
    "SANDBOX_CA_BUNDLE",
    "SANDBOX_CA_DIR",
    "SANDBOX_SOCKET",
    "EgressGate",
    "EgressProxy",
    "Headers",
    "is_public",
    "proxy_env",
]

SANDBOX_SOCKET = "/sandbox/egress.sock"  # where a worker's gate appears in its sandbox
SANDBOX_CA_BUNDLE = "/sandbox/egress-ca.pem"  # the CAs it trusts: the system's and the proxy's own
SANDBOX_CA_DIR = "/sandbox/egress-ca.d"  # the same CAs, a file each under OpenSSL's hash names
IN_SANDBOX_PORT = 3128  # the harness's forwarder, on the sandbox's own loopback
_CONNECT_TIMEOUT_S = 10.0
_MAX_CONNECTIONS = 32  # open at once per worker (an async evaluator's: twice its in_flight if more: bind)
_LOG_LIMIT = 100  # entries kept per worker between two takes
_SETTLE_TURNS = 2  # event-loop turns a connection closed before its case answered needs to be logged "ok"
_SETTLE_S = 0.2  # how long a case's answer waits for a connection whose sandbox side has ended (settle)
_HALF_CLOSED_S = 5.0  # once one way has ended, the other may go on this long
_RESPONSE_HEAD_LIMIT = 64 * 1024
_ESTABLISHED = b"HTTP/1.1 200 Connection established\r\n\r\n"

Resolver = Callable[[str, int], Awaitable[list[str]]]
# (destination, ((header, value), ...)): what the proxy sets on requests to a destination
Headers = tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
# request headers the proxy never passes on as the client sent them (it sets its own, or none)


def proxy_env(ca_dir: bool = False) -> dict[str, str]:
    """The environment an egress worker starts with: every usual client finds the forwarder.

    Only what clients need: ``HTTP_PROXY`` and ``HTTPS_PROXY`` (both cases) reach every HTTP client
    (urllib, requests, httpx, aiohttp, Node's ``fetch``); no ``ALL_PROXY``, which no HTTP client needs
    besides those and for which httpx builds one more TLS context per client. ``ca_dir``: the CAs are
    also the hashed directory :data:`SANDBOX_CA_DIR` (``tls.hashed_directory``), named by ``SSL_CERT_DIR``
    and ``REQUESTS_CA_BUNDLE`` so a TLS context reads a certificate only when a handshake needs it."""
    url = f"http://127.0.0.1:{IN_SANDBOX_PORT}"
    env = {
        "HTTP_PROXY": url,
        "HTTPS_PROXY": url,
        "http_proxy": url,
        "https_proxy": url,
        "NO_PROXY": "",
        "NODE_USE_ENV_PROXY": "1",  # Node's http, https and fetch honour the variables above
        # the system's CAs and the proxy's own (it ends TLS for destinations it adds headers to)
        "CURL_CA_BUNDLE": SANDBOX_CA_BUNDLE,
        "NODE_EXTRA_CA_CERTS": SANDBOX_CA_BUNDLE,
    }
    if ca_dir:
        return {**env, "SSL_CERT_DIR": SANDBOX_CA_DIR, "REQUESTS_CA_BUNDLE": SANDBOX_CA_DIR}
    return {**env, "SSL_CERT_FILE": SANDBOX_CA_BUNDLE, "REQUESTS_CA_BUNDLE": SANDBOX_CA_BUNDLE}


class EgressGate:
    """One worker's unix socket into the proxy: what it may reach, and what it did."""

    def __init__(self, proxy: EgressProxy, path: Path) -> None:
        self.proxy = proxy
        self.path = path
        self.workspace: str | None = None
        self.declared: frozenset[str] = frozenset()
        self.headers: dict[str, tuple[tuple[str, str], ...]] = {}  # destination -> what the proxy sets there
        self._log: list[dict[str, Any]] = []
        self._server: asyncio.AbstractServer | None = None
        self.listener: asyncio.AbstractServer | None = None  # the sandbox's own proxy port, if handed over
        self.handoff_open = True  # no connection yet: the first may hand a listener over (egress_handoff.py)
        self.port = IN_SANDBOX_PORT  # the one port of the sandbox's loopback a handed-over listener may be on
        self._serve: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.max_connections = _MAX_CONNECTIONS

    def bind(self, workspace: str, declared: tuple[str, ...], headers: Headers = (), in_flight: int = 1) -> None:
        """The worker now runs an evaluator of ``workspace`` that declared ``declared`` (``headers`` for some of
        them: secrets stay here, on the host), ``in_flight`` rows at once (its cap: twice that, at least 32)."""
        self.workspace, self.declared = workspace, frozenset(declared)
        self.headers = {dest: pairs for dest, pairs in headers if dest in self.declared}
        self.max_connections = max(_MAX_CONNECTIONS, 2 * in_flight)

    def mark(self) -> int:
        """Where the log stands now: what a case's reply just read covers (:meth:`settle`, :meth:`take`).
        A connection the sandbox opens after that belongs to its next case, even when the proxy records
        it while the reply's connections settle."""
        return len(self._log)

    def take(self, upto: int | None = None) -> list[dict[str, Any]]:
        """The connections opened since the last call (up to the :meth:`mark` ``upto``: later ones stay for
        the next take), as they stand now (one still open: its bytes so far, ``status`` "open"; it is not
        reported again)."""
        cut = len(self._log) if upto is None else min(upto, len(self._log))
        taken, self._log = self._log[:cut], self._log[cut:]
        now = time.monotonic()
        return [
            {k: v for k, v in entry.items() if not k.startswith("_")}
            | {"duration_ms": entry.get("duration_ms", round((now - entry["_started"]) * 1000, 2))}
            for entry in taken
        ]

    async def settle(self, upto: int | None = None) -> None:
        """Let connections the sandbox has already closed finish being logged before a case's log is
        taken (none open: at once). A connection closed before its case answered ends beside that answer
        (its EOF is ready in the same turn of the loop as the answer, so one turn or two see it "ok");
        one whose sandbox side has ended while its destination has not yet answered that end (the
        relay's ``_ending``) is waited for, at most :data:`_SETTLE_S`. One the sandbox keeps open (a
        keep-alive pool) costs the turns only and is reported "open", as :meth:`take` says. ``upto``: only
        the connections before that :meth:`mark` (the case's) are waited for."""
        for _ in range(_SETTLE_TURNS):
            if not any(entry["status"] == "open" for entry in self._log[:upto]):
                return
            await asyncio.sleep(0)
        ending = [entry["_ending"] for entry in self._log[:upto] if entry["status"] == "open" and "_ending" in entry]
        if ending:
            await asyncio.wait(ending, timeout=_SETTLE_S)

    def record(self, entry: dict[str, Any]) -> None:
        """Log a connection (updated in place while it lasts)."""
        if len(self._log) < _LOG_LIMIT:
            self._log.append(entry)

    async def close(self) -> None:
        """Stop listening and cut every open connection."""
        for server in (self._server, self.listener):
            if server is not None:
                server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(OSError):
            self.path.unlink()


class EgressProxy:
    """The service's egress proxy: one :class:`EgressGate` per egress worker (see the module docstring)."""

    def __init__(
        self,
        hosts: dict[str, str] | None = None,
        *,
        resolve: Resolver | None = None,
        public: Callable[[str], bool] = is_public,
        ca_bundle: Path | None = None,
    ) -> None:
        self.hosts = {name.lower().rstrip("."): address for name, address in (hosts or {}).items()}
        self.ca_bundle = ca_bundle  # what destinations' certificates are verified against (headers only)
        self._authority: Authority | None = None  # made with the first gate
        self._upstream: ssl.SSLContext | None = None
        self.workspace_allow: dict[str, frozenset[str]] = {}
        self._resolve = resolve or system_resolve
        self._public = public
        self._dir: Path | None = None  # made with the first gate

    async def open(self) -> EgressGate:
        """A new gate listening on a socket of its own (mode 0666: the sandbox's uid connects; the
        directory is 0711 and the name random, so only whoever is given the path finds it)."""
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="evh-egress-"))  # short: unix socket paths have 107 bytes
            os.chmod(self._dir, 0o711)
            from evaluator_host.sandbox.egress.tls import Authority  # cryptography: with the first gate only

            self._authority = Authority(self._dir, self.ca_bundle)
        gate = EgressGate(self, self._dir / f"{uuid.uuid4().hex[:16]}.sock")

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            gate._tasks.add(task)  # noqa: SLF001 - the gate's own connections
            try:
                await self._serve(gate, reader, writer)
            except asyncio.CancelledError:
                pass  # the gate closed under it (its worker is gone): nothing to report to anyone
            finally:
                gate._tasks.discard(task)  # noqa: SLF001
                writer.close()

        gate._serve = serve  # noqa: SLF001 - also the handed-over listener's (egress_handoff.py)
        gate._server = await unix_sockets.serve(serve, gate.path, HEAD_LIMIT, mode=0o666)  # noqa: SLF001
        return gate

    @property
    def sandbox_bundle(self) -> Path:
        """The CA bundle egress workers trust (bound in at :data:`SANDBOX_CA_BUNDLE`; made by the first gate)."""
        assert self._authority is not None, "open a gate first"
        return self._authority.bundle

    @property
    def sandbox_ca_dir(self) -> Path | None:
        """The hashed CA directory egress workers trust (bound in at :data:`SANDBOX_CA_DIR`), None without one."""
        assert self._authority is not None, "open a gate first"
        return self._authority.hashed

    def close(self) -> None:
        """Remove the sockets' directory (gates close with their workers)."""
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
            self._authority = None

    async def _serve(self, gate: EgressGate, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        started = time.monotonic()
        # logged from the start (the case that opens it is answered while it may still be open)
        entry: dict[str, Any] = {"host": None, "status": "open", "bytes_out": 0, "bytes_in": 0, "_started": started}
        gate.record(entry)
        first, gate.handoff_open = gate.handoff_open, False  # the harness's, made before it loads any user code
        try:
            if len(gate._tasks) > gate.max_connections:  # noqa: SLF001
                raise Refused(f"more than {gate.max_connections} connections open at once")
            try:
                async with asyncio.timeout(_CONNECT_TIMEOUT_S):  # not wait_for: no task per connection
                    head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
                raise Refused("not an HTTP proxy request") from None
            if head == HANDOFF_HEAD:  # the harness's proxy port, before the evaluator loads (egress_handoff.py)
                assert gate._serve is not None  # noqa: SLF001
                why = await take_listener(gate, first, reader, writer, gate._serve)  # noqa: SLF001
                if first:
                    gate._log.remove(entry)  # noqa: SLF001 - the harness's, not a connection of any case
                else:
                    entry["status"] = f"refused: listener handoff: {why}"
                return
            request = checked(parse_proxy_head(head, "proxy"))
            host, port = request.host, request.port
            entry["host"] = f"{host}:{port}"
            address = await self._check(gate, host, port)
            added = gate.headers.get(f"{host}:{port}")
            if added is not None:
                entry["injected"] = [name for name, _value in added]
                if request.tunnel:
                    await self._complete(reader, writer, request, address, added, entry)
                    return
                raise Refused(f"{host}:{port} gets headers from the proxy: only https (CONNECT) reaches it")
            forward = b"" if request.tunnel else request.forward(())
            entry["bytes_out"] = len(forward)
            answer = _ESTABLISHED if request.tunnel else b""
            try:  # the bytes relayed at the transport level from here (no task or stream per way)
                await splice(reader, writer, address, port, forward, entry, connect_timeout_s=_CONNECT_TIMEOUT_S,
                             half_closed_s=_HALF_CLOSED_S, tunnel_answer=answer, status=not request.tunnel)  # fmt: skip
            except (OSError, TimeoutError) as exc:
                raise Refused(f"could not connect: {exc.__class__.__name__}") from None
            entry["status"] = "ok"
        except Refused as refused:
            entry["status"] = f"refused: {refused}"
            with contextlib.suppress(OSError, RuntimeError):
                writer.write(f"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
                             f"evaluator-host egress: {refused}\n".encode())  # fmt: skip
                await writer.drain()
        finally:
            entry["duration_ms"] = round((time.monotonic() - started) * 1000, 2)

    async def _complete(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        connect: ProxyHead,
        address: str,
        added: tuple[tuple[str, str], ...],
        entry: dict[str, Any],
    ) -> None:
        """A ``CONNECT`` to a destination with headers: the proxy's own verified TLS to it first (a
        failure is the usual 403), then the sandbox's TLS ended here, one request read, completed with
        ``added`` and sent on; the answer relayed with ``Connection: close``. Nothing said back to the
        sandbox ever holds a header value."""
        host, port = connect.host, connect.port
        if self._upstream is None:
            from evaluator_host.sandbox.egress.tls import upstream_context

            self._upstream = upstream_context(self.ca_bundle)
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(
                    address, port, ssl=self._upstream, server_hostname=host, limit=_RESPONSE_HEAD_LIMIT
                ),
                _CONNECT_TIMEOUT_S,
            )
        except ssl.SSLCertVerificationError as exc:
            raise Refused(
                f"{host}'s certificate is not trusted ({exc.verify_message}; the ca_bundle setting)"
            ) from None
        except (OSError, TimeoutError) as exc:
            raise Refused(f"could not connect over TLS: {exc.__class__.__name__}") from None
        try:
            assert self._authority is not None
            writer.write(_ESTABLISHED)
            await writer.drain()
            try:
                await writer.start_tls(self._authority.server_context(host), ssl_handshake_timeout=_CONNECT_TIMEOUT_S)
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
                entry["status"] = (
                    f"refused: no request over TLS from the sandbox ({exc.__class__.__name__}; its client must "
                    f"trust {SANDBOX_CA_BUNDLE}, named by SSL_CERT_FILE)"
                )
                return
            try:
                request = parse_origin(head, host, port)
            except Refused as refused:
                entry["status"] = f"refused: {refused}"
                await _answer(writer, "400 Bad Request", f"evaluator-host egress: {refused}\n")
                return
            forward = request.forward(added)
            up_writer.write(forward)
            entry["bytes_out"] = len(forward)
            await pump(reader, writer, up_reader, up_writer, entry, half_closed_s=_HALF_CLOSED_S, close_answer=True)
            entry["status"] = "ok"
        finally:
            up_writer.close()

    async def _check(self, gate: EgressGate, host: str, port: int) -> str:
        """The address to connect to for ``host:port``, or :class:`Refused` saying why not."""
        literal = host.strip("[]")  # only digits and dots (IPv4) or a colon (IPv6) may parse: a name costs no raise
        with contextlib.suppress(ValueError):
            if (":" in literal or not literal.strip("0123456789.")) and ipaddress.ip_address(literal):
                raise Refused("IP literals are refused: name the host")
        destination = f"{host}:{port}"
        if destination not in gate.declared:
            raise Refused(f"{destination} is not in the evaluator's network")
        if gate.workspace is None or destination not in self.workspace_allow.get(gate.workspace, frozenset()):
            raise Refused(f"{destination} is not in the workspace's network_allow")
        pinned = self.hosts.get(host)
        if pinned is not None:
            return pinned
        try:
            addresses = await asyncio.wait_for(self._resolve(host, port), _CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            raise Refused(f"{host} does not resolve ({exc.__class__.__name__})") from None
        blocked = [a for a in addresses if not self._public(a)]
        if blocked or not addresses:
            raise Refused(f"{host} resolves to an address that is not public ({', '.join(blocked) or 'none'})")
        return addresses[0]


async def _answer(writer: asyncio.StreamWriter, status: str, text: str) -> None:
    """A short plain-text answer, then the end of the connection."""
    body = text.encode()
    with contextlib.suppress(OSError, RuntimeError):
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
