"""The build sandbox's outside: what an install may reach and read, on both backends.

Anything that can run package code (pip resolving and building an sdist) runs in a build sandbox:
the process backend's namespaces (a private root, an unprivileged uid, a network namespace of its
own) or a build box (docker: an unprivileged uid, ``network_mode=none``). Neither has a network
interface; its one way out is a :class:`BuildRelay`: a unix socket on the host, bound into the
sandbox, which an in-sandbox forwarder (:data:`FORWARDER`, on ``127.0.0.1:3128``, named by
``HTTP(S)_PROXY``) carries bytes to. The relay lets through ``CONNECT host:port`` and plain
``http://host:port/…`` requests to the **configured index hosts** only (pip's index-url,
extra-index-url and find-links URLs, npm's registry, and ``build_allow_hosts``), and nothing else.

What an install reads of the host's package-manager settings reaches it as a generated
``pip.conf`` / ``npmrc`` (:func:`pip_conf`, :func:`npmrc`): credentials (``user:token@`` in a URL,
npm auth tokens) are never written into it — the sandbox runs package code, which could read and
send them. A pip index whose URL carries credentials is reached through the relay instead
(:func:`relay_credentials`): the sandbox's ``pip.conf`` names it as plain ``http://host:port/…``
(a trusted host), and the relay — on the host — opens the real connection (TLS when the index is
``https``, verified against the CA bundle) and adds the ``Authorization`` header to each request.
The sandbox can use the index, never learn its credentials. (Absolute ``https://`` file links an
index page gives for its own host go through ``CONNECT``, without them: use relative links.)
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import select
import shutil
import socket
import socketserver
import ssl
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

__all__ = [
    "FORWARDER",
    "IN_SANDBOX_PROXY",
    "PIP_KEYS",
    "BuildRelay",
    "Upstream",
    "allowed_hosts",
    "build_uid",
    "direct_hosts",
    "host_pip_config",
    "local_index_paths",
    "npmrc",
    "pip_conf",
    "proxy_environment",
    "registry_hosts",
    "relay_credentials",
    "scrub_url",
]

IN_SANDBOX_PORT = 3128
IN_SANDBOX_PROXY = f"http://127.0.0.1:{IN_SANDBOX_PORT}"
# what of pip's settings an install gets ("proxy": the sandbox's way out is the relay instead)
PIP_KEYS = ("index-url", "extra-index-url", "find-links", "trusted-host", "timeout", "retries", "no-index")
_HEAD_LIMIT = 16 * 1024
_MAX_CONNECTIONS = 64
_IDLE_S = 120.0

# The in-sandbox forwarder: 127.0.0.1:3128 -> the relay's unix socket (bytes only; every decision is
# the relay's, on the host). ``forward(path)`` starts it on a thread; run as a script
# (``python3 forward.py --daemon SOCKET``) it listens, forks into the background and returns once listening.
FORWARDER = """
import os, selectors, socket, sys, threading

def forward(path, port=3128):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)

    def loop():
        selector = selectors.DefaultSelector()
        selector.register(listener, selectors.EVENT_READ, None)
        peers = {}

        def drop(sock):
            for end in (sock, peers.get(sock)):
                if end is not None and end in peers:
                    selector.unregister(end)
                    peers.pop(end)
                    end.close()

        while True:
            for key, _ in selector.select():
                sock = key.fileobj
                if key.data is None:
                    try:
                        client, _ = sock.accept()
                        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                        upstream.connect(path)
                    except OSError:
                        continue
                    peers[client], peers[upstream] = upstream, client
                    selector.register(client, selectors.EVENT_READ, 1)
                    selector.register(upstream, selectors.EVENT_READ, 1)
                    continue
                try:
                    data = sock.recv(65536)
                    if data:
                        peers[sock].sendall(data)
                except (OSError, KeyError):
                    data = b""
                if not data:
                    drop(sock)

    return loop

if __name__ == "__main__" and sys.argv[1:2] == ["--daemon"]:
    loop = forward(sys.argv[2])
    if os.fork() == 0:
        os.setsid()
        loop()
    os._exit(0)
"""


def proxy_environment() -> dict[str, str]:
    """The environment that sends an install's every request to the in-sandbox forwarder."""
    return {
        "HTTP_PROXY": IN_SANDBOX_PROXY,
        "HTTPS_PROXY": IN_SANDBOX_PROXY,
        "http_proxy": IN_SANDBOX_PROXY,
        "https_proxy": IN_SANDBOX_PROXY,
        "NO_PROXY": "",
        "no_proxy": "",
    }


def scrub_url(url: str) -> str:
    """``url`` without its userinfo (``https://user:token@host/`` → ``https://host/``)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def _scrub_value(value: str) -> str:
    return " ".join(scrub_url(item) for item in value.split())


def host_pip_config(python: str = sys.executable) -> dict[str, str]:
    """The host's effective pip settings builds get (``pip config list``), of :data:`PIP_KEYS` and
    ``constraint``; environment (``PIP_*``) values win over files, as in pip itself. ``cert`` is left
    out: builds get the CA bundle setting instead."""
    try:
        out = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    files: dict[str, str] = {}
    env: dict[str, str] = {}
    for line in out.splitlines():
        match = re.match(r"^([^.=]*)\.([a-z-]+)='(.*)'$", line.strip())
        if not match or match.group(2) not in (*PIP_KEYS, "proxy", "constraint"):
            continue
        (env if match.group(1) == ":env:" else files)[match.group(2)] = match.group(3)
    return {**files, **env}


def local_index_paths(config: dict[str, str]) -> list[str]:
    """Host folders named by the pip settings (file:// indexes, find-links dirs)."""
    paths = []
    for key in ("index-url", "extra-index-url", "find-links"):
        for item in config.get(key, "").split():
            path = item[len("file://") :] if item.startswith("file://") else item
            if path.startswith("/") and os.path.isdir(path):
                path = os.path.realpath(path)
                # a PEP 503 tree ("<root>/simple") links its files relative to <root>
                paths.append(os.path.dirname(path) if os.path.basename(path) == "simple" else path)
    return sorted(set(paths))


def pip_conf(config: dict[str, str], *, cert: str | None, constraint: str | None) -> str:
    """A ``pip.conf`` for a build sandbox: the host's index settings without credentials or proxy
    (``cert``: the CA bundle's in-sandbox path; ``constraint``: the constraints file's)."""
    lines = ["[global]", "no-input = true", "disable-pip-version-check = true"]
    lines += [f"{key} = {_scrub_value(value)}" for key, value in config.items() if key in PIP_KEYS]
    if cert:
        lines.append(f"cert = {cert}")
    if constraint:
        lines.append(f"constraint = {constraint}")
    return "\n".join(lines) + "\n"


def npmrc(config: dict[str, str], *, cafile: str | None) -> str:
    """An ``npmrc`` for a build sandbox: the host's registries without credentials or proxies."""
    lines = [
        f"{key}={scrub_url(value)}"
        for key, value in config.items()
        if key not in ("proxy", "https-proxy", "noproxy") and not key.startswith("//")
    ]
    if cafile:
        lines.append(f"cafile={cafile}")
    return "\n".join(lines) + "\n"


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


def _host_port(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return None
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    host = parts.hostname.lower().rstrip(".")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def allowed_hosts(pip_config: dict[str, str], npm_config: dict[str, str], extra: Iterable[str] = ()) -> frozenset[str]:
    """``host:port`` of every configured index: pip's index-url (default PyPI, whose files live on
    files.pythonhosted.org), extra-index-url and find-links URLs; npm's registries (default
    registry.npmjs.org); and ``extra`` (the ``build_allow_hosts`` setting: ``host`` or ``host:port``)."""
    urls = [pip_config.get("index-url") or "https://pypi.org/simple"]
    urls += pip_config.get("extra-index-url", "").split() + pip_config.get("find-links", "").split()
    urls += [value for key, value in npm_config.items() if key == "registry" or key.endswith(":registry")]
    if "registry" not in npm_config:
        urls.append("https://registry.npmjs.org/")
    found = {hp for hp in (_host_port(url) for url in urls) if hp}
    if "pypi.org:443" in found:
        found.add("files.pythonhosted.org:443")
    for item in extra:
        item = item.strip().lower()
        if item:
            found |= {item} if re.search(r":\d+$", item) else {f"{item}:443", f"{item}:80"}
    return frozenset(found)


def registry_hosts(npm_config: dict[str, str], extra: Iterable[str] = ()) -> frozenset[str]:
    """``host:port`` of npm's configured registries (default registry.npmjs.org) and ``extra``: what an
    npm install's relay reaches (no Python index)."""
    urls = [value for key, value in npm_config.items() if key == "registry" or key.endswith(":registry")]
    if "registry" not in npm_config:
        urls.append("https://registry.npmjs.org/")
    found = {hp for hp in (_host_port(url) for url in urls) if hp}
    for item in extra:
        item = item.strip().lower()
        if item:
            found |= {item} if re.search(r":\d+$", item) else {f"{item}:443", f"{item}:80"}
    return frozenset(found)


class _Refused(Exception):
    pass


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
        self._dir = Path(tempfile.mkdtemp(prefix="evh-relay-"))
        os.chmod(self._dir, 0o711)
        self.path = self._dir / "relay.sock"
        self._slots = threading.BoundedSemaphore(_MAX_CONNECTIONS)
        relay = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                relay._handle(self.request)

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        self._server = Server(str(self.path), Handler)
        os.chmod(self.path, 0o666)  # the sandbox's unprivileged uid connects
        self._thread = threading.Thread(target=self._server.serve_forever, name="evh-build-relay", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop listening and remove the socket."""
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
                if not chunk or len(head) > _HEAD_LIMIT:
                    return
                head += chunk
            head, _, rest = head.partition(b"\r\n\r\n")
            try:
                tunnel, destination, forward = _parse(head, self.allowed)
            except _Refused as refused:
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
    """(tunnel?, ``host:port``, the request to forward when not a tunnel), or :class:`_Refused`."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _Refused("not an HTTP proxy request")
    method, target, version = parts
    if method == "CONNECT":
        host, sep, port = target.rpartition(":")
        if not sep or not port.isdigit():
            raise _Refused("CONNECT needs host:port")
        destination, forward, tunnel = f"{host.lower().rstrip('.')}:{int(port)}", b"", True
    else:
        found = _host_port(target)
        url = urlsplit(target)
        if url.scheme != "http" or found is None:
            raise _Refused("only CONNECT, or a plain http:// URL, goes through this relay")
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        keep = [
            line
            for line in lines[1:]
            if line and not line.lower().startswith(("proxy-", "connection:", "keep-alive:", "authorization:"))
        ]
        forward = "\r\n".join([f"{method} {path} {version}", *keep, "Connection: close", "", ""]).encode("latin-1")
        destination, tunnel = found, False
    if destination not in allowed:
        raise _Refused(f"{destination} is not a configured package index")
    return tunnel, destination, forward


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


BUILD_UID_OFFSET = 1024  # workers take sandbox_uid_base .. +1023: a build never shares a worker's uid


def build_uid(sandbox_uid_base: int) -> int:
    """The unprivileged uid package installs run as, on both backends."""
    return sandbox_uid_base + BUILD_UID_OFFSET


def direct_hosts(allow: Iterable[str]) -> tuple[str, ...]:
    """The host names of ``build_allow_hosts`` entries (``host`` or ``host:port``)."""
    return tuple(
        h.strip().lower().rsplit(":", 1)[0] if re.search(r":\d+$", h.strip()) else h.strip().lower() for h in allow
    )
