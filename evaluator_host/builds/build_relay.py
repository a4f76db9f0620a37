"""The build relay: a build sandbox's only way out, a forward proxy on a unix socket of the host.

It lets through ``CONNECT host:port`` and plain ``http://host:port/…`` requests (read by
:mod:`evaluator_host.sandbox.egress.head`, the egress proxy's parser too) to the configured index hosts
only (:func:`evaluator_host.builds.build_sandbox.allowed_hosts`), answering anything else 403. A pip
index whose URL carries credentials is reached through it as plain ``http://host:port/…``
(:func:`relay_credentials` rewrites the sandbox's settings): the relay, on the host, opens the real
connection (TLS when the index is ``https``, verified against the CA bundle) and adds the
``Authorization`` header, so the sandbox can use the index, never learn its credentials. At most
:data:`_MAX_CONNECTIONS` connections at once; one idle :data:`_IDLE_S` ends.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import select
import shutil
import socket
import socketserver
import ssl
import stat
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from evaluator_host.sandbox.egress.head import HEAD_LIMIT, Refused, parse_proxy_head
from evaluator_host.shared import unix_sockets

__all__ = ["BuildRelay", "Upstream", "relay_credentials", "sweep_stale"]

_MAX_CONNECTIONS = 64
_IDLE_S = 120.0
_PREFIX = "evh-relay-"  # a relay's folder in the temporary directory (a socket's path must stay short)
_STALE_AFTER_S = 60.0  # a folder younger than this may be a relay still starting: never swept
_POLL_S = 0.02  # how often the relay's loop looks for a shutdown (close waits at most this long)
# header lines a relayed plain request loses: the proxy's own, the connection's, and any credentials
_DROPPED = ("proxy-", "connection:", "keep-alive:", "authorization:")


@dataclass(frozen=True)
class Upstream:
    """Where the relay takes plain requests for one credentialed index: the real host and port, over
    TLS or not, with the ``Authorization`` header it adds."""

    host: str
    port: int
    tls: bool
    authorization: str


def relay_credentials(config: dict[str, str]) -> tuple[dict[str, str], dict[str, Upstream]]:
    """``config`` with every index URL that carries credentials rewritten to ``http://host:port/…``
    (no userinfo; ``trusted-host`` gains the host), and the relay's :class:`Upstream` per ``host:port``."""
    upstreams: dict[str, Upstream] = {}
    out = dict(config)
    trusted = config.get("trusted-host", "").split()
    for key in ("index-url", "extra-index-url", "find-links"):
        items = []
        for url in config.get(key, "").split():
            try:
                parts = urlsplit(url)
                port = parts.port or (443 if parts.scheme == "https" else 80)
            except ValueError:
                items.append(url)
                continue
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.password is None:
                items.append(url)
                continue
            user, password = unquote(parts.username or ""), unquote(parts.password)
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            host = parts.hostname.lower()
            upstreams[f"{host}:{port}"] = Upstream(host, port, parts.scheme == "https", f"Basic {token}")
            items.append(urlunsplit(("http", f"{host}:{port}", parts.path, parts.query, "")))
            if host not in trusted:
                trusted.append(host)
        if items:
            out[key] = " ".join(items)
    if trusted:
        out["trusted-host"] = " ".join(trusted)
    return out, upstreams


class BuildRelay:
    """The build sandbox's only way out: a forward proxy on a unix socket that reaches ``allowed``
    (``host:port``) and nothing else (see the module docstring). Threads of its own; ``close`` ends it."""

    def __init__(
        self, allowed: frozenset[str], upstreams: dict[str, Upstream] | None = None, ca_bundle: str | None = None
    ) -> None:
        self.allowed = allowed | frozenset(upstreams or {})
        self.upstreams = dict(upstreams or {})
        self._tls = (
            ssl.create_default_context(cafile=ca_bundle) if any(u.tls for u in self.upstreams.values()) else None
        )
        self.refused: list[str] = []  # what it turned down (newest last, bounded): for logs and tests
        self._dir = Path(tempfile.mkdtemp(prefix=_PREFIX))
        os.chmod(self._dir, 0o711)
        self.path = self._dir / "relay.sock"
        self._slots = threading.BoundedSemaphore(_MAX_CONNECTIONS)
        relay = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                relay._handle(self.request)

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

            def server_bind(self) -> None:  # at any path's length (a deep TMPDIR): shared/unix_sockets.py
                unix_sockets.bind(self.socket, relay.path)

        self._server = Server(str(self.path), Handler)
        os.chmod(self.path, 0o666)  # the sandbox's unprivileged uid connects
        # (serve_forever notices a shutdown at its next poll: its default 0.5 s was half of a warm build's
        # critical path, 0.26 s on average, waited in close() after every install)
        serve = functools.partial(self._server.serve_forever, poll_interval=_POLL_S)
        self._thread = threading.Thread(target=serve, name="evh-build-relay", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop listening (within :data:`_POLL_S`) and remove the socket."""
        self._server.shutdown()
        self._server.server_close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _handle(self, client: socket.socket) -> None:
        if not self._slots.acquire(blocking=False):
            _answer(client, f"more than {_MAX_CONNECTIONS} connections at once")
            return
        try:
            client.settimeout(_IDLE_S)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = client.recv(4096)
                if not chunk or len(head) > HEAD_LIMIT:
                    return
                head += chunk
            head, _, rest = head.partition(b"\r\n\r\n")
            try:
                tunnel, destination, forward = _parse(head, self.allowed)
            except Refused as refused:
                if len(self.refused) < 100:
                    self.refused.append(str(refused))
                _answer(client, str(refused))
                return
            host, _, port = destination.rpartition(":")
            target = None if tunnel else self.upstreams.get(destination)
            try:
                upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=30)
                if target is not None:
                    forward = _with_credentials(forward, target)
                    if target.tls and self._tls is not None:
                        upstream = self._tls.wrap_socket(upstream, server_hostname=target.host)
            except OSError as exc:
                _answer(client, f"could not connect to {destination}: {exc.__class__.__name__}", 502)
                return
            with upstream:
                upstream.settimeout(_IDLE_S)
                if tunnel:
                    client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                else:
                    upstream.sendall(forward)
                if rest:
                    upstream.sendall(rest)
                _pump(client, upstream)
        except OSError:
            pass
        finally:
            self._slots.release()
            with contextlib.suppress(OSError):
                client.close()


def _with_credentials(forward: bytes, target: Upstream) -> bytes:
    """A forwarded request head (and any body after it) for ``target``: its Host, the credentials."""
    head, _, body = forward.partition(b"\r\n\r\n")
    lines = [ln for ln in head.split(b"\r\n") if not ln.lower().startswith((b"host:", b"authorization:"))]
    default = 443 if target.tls else 80
    host = target.host if target.port == default else f"{target.host}:{target.port}"
    lines[1:1] = [f"Host: {host}".encode(), f"Authorization: {target.authorization}".encode()]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def _answer(client: socket.socket, why: str, status: int = 403) -> None:
    body = f"evaluator-host build relay: {why}\n".encode()
    reason = "Forbidden" if status == 403 else "Bad Gateway"
    with contextlib.suppress(OSError):
        client.sendall(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + body
        )


def _parse(head: bytes, allowed: frozenset[str]) -> tuple[bool, str, bytes]:
    """(tunnel?, ``host:port``, the request to forward when not a tunnel), or :class:`Refused`."""
    request = parse_proxy_head(head, "relay")
    forward = b""
    if not request.tunnel:
        keep = [line for line in request.lines if line and not line.lower().startswith(_DROPPED)]
        first = f"{request.method} {request.path} {request.version}"
        forward = "\r\n".join([first, *keep, "Connection: close", "", ""]).encode("latin-1")
    if request.destination not in allowed:
        raise Refused(f"{request.destination} is not a configured package index")
    return request.tunnel, request.destination, forward


def _pump(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways until both ends are done or nothing moves for :data:`_IDLE_S`."""
    peer = {a: b, b: a}
    open_ends = {a, b}
    while open_ends:
        buffered = [s for s in open_ends if isinstance(s, ssl.SSLSocket) and s.pending()]
        ready = buffered or select.select(list(open_ends), [], [], _IDLE_S)[0]
        if not ready:
            return
        for sock in ready:
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            if data:
                try:
                    peer[sock].sendall(data)
                except OSError:
                    return
                continue
            open_ends.discard(sock)
            with contextlib.suppress(OSError):
                peer[sock].shutdown(socket.SHUT_WR)


def sweep_stale(root: Path | None = None) -> int:
    """Remove the folders relays left when their service died without closing them (SIGKILL): this
    uid's ``evh-relay-*`` folders in ``root`` (default: the temporary directory) older than a minute
    whose socket nobody listens on (a connect is refused, or the socket is gone). A live relay — this
    service's, or another service's on the same machine — answers the connect and stays. How many went."""
    removed = 0
    for folder in Path(root or tempfile.gettempdir()).glob(_PREFIX + "*"):
        try:
            info = folder.lstat()
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            continue
        if time.time() - info.st_mtime < _STALE_AFTER_S:
            continue
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(1.0)
            try:
                unix_sockets.connect(probe, folder / "relay.sock")
            except (ConnectionRefusedError, FileNotFoundError):
                shutil.rmtree(folder, ignore_errors=True)
                removed += 1
            except OSError:
                continue
    return removed
