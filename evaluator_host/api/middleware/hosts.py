"""The names this service answers to: a request whose ``Host`` is not one of them is answered 421, and a
browser request from a page of another site (``Origin``) 403, before anything else looks at it.

Why: without keys the service is open to whoever reaches its port — by default only this machine. A
web page the developer visits cannot read the service's answers (another origin), unless its name is
made to resolve to 127.0.0.1 (DNS rebinding): the browser then treats the service as that page's own
origin and sends ``Host: attacker.example:8000``. Checking ``Host`` against the names the service is
meant to be reached by ends that. ``Origin`` adds the other half: a page of another site may still
*send* a request the browser does not preflight (a form post, ``multipart/form-data`` included), and
its ``Origin`` header names the site.

The names (:func:`allowed_names`): ``localhost``, ``127.0.0.1``, ``::1``, the address ``serve`` binds
(``--host`` / ``EVALUATOR_HOST_HOST``, unless it is a wildcard such as ``0.0.0.0``) and every entry of
``EVALUATOR_HOST_ALLOWED_HOSTS`` (comma-separated: a name, an IP address, ``*.example.com`` for its
subdomains, or ``*`` to turn the check off). The port is not part of the check. A request without
``Host`` (HTTP/1.0; browsers always send one) goes through. The check applies with keys configured
too: a keyed service reached by a name (behind a proxy, ``evals.example.com``) lists that name.

Every route answers through this layer: the fast path, ``/healthz``, ``/metrics``, the OpenAPI
documents and the web page included.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from evaluator_host.settings import Settings

__all__ = ["HostGate", "allowed_names", "host_of"]

_ALWAYS = ("localhost", "127.0.0.1", "::1")
_WILDCARD_ADDRESSES = ("", "0.0.0.0", "::", "[::]")  # noqa: S104 - names of a bind, never allowed as a Host


def _normal(name: str) -> str:
    return name.strip().lower().rstrip(".").removeprefix("[").removesuffix("]")


def host_of(value: str) -> str:
    """The name in a ``Host`` header value (``name``, ``name:port``, ``[v6]:port``), lower case, no port."""
    value = value.strip()
    if value.startswith("["):
        return _normal(value[1:].partition("]")[0])
    name, sep, port = value.rpartition(":")
    if sep and port.isdigit() and ":" not in name:
        return _normal(name)
    return _normal(value)


def allowed_names(settings: Settings) -> tuple[frozenset[str], tuple[str, ...], bool]:
    """(exact names, ``.suffix`` of ``*.suffix`` entries, whether ``*`` turns the check off)."""
    names = set(_ALWAYS)
    if settings.host.strip().lower() not in _WILDCARD_ADDRESSES:
        names.add(_normal(settings.host))
    suffixes: list[str] = []
    anything = False
    for entry in settings.allowed_hosts:
        if entry.strip() == "*":
            anything = True
        elif entry.strip().startswith("*."):
            suffixes.append(_normal(entry.strip()[1:]))
        elif entry.strip():
            names.add(_normal(entry))
    return frozenset(names), tuple(suffixes), anything


def _refusal(status: int, kind: str, message: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    body = json.dumps({"error": {"type": kind, "message": message, "line": None, "column": None}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    return status, headers, body


class HostGate:
    """ASGI layer: ``Host`` must name this service and ``Origin``, when sent, a site of one of its names."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self._names, self._suffixes, self._anything = allowed_names(settings)

    def allows(self, name: str) -> bool:
        """Whether ``name`` (a host name, no port) is one this service answers to."""
        return self._anything or name in self._names or any(name.endswith(s) for s in self._suffixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._anything:
            await self.app(scope, receive, send)
            return
        host: bytes | None = None
        origin: bytes | None = None
        for name, value in scope["headers"]:
            if name == b"host":
                host = value
            elif name == b"origin":
                origin = value
        refusal = None
        if host is not None and not self.allows(host_of(host.decode("latin-1"))):
            shown = json.dumps(host.decode("latin-1")[:100])
            refusal = _refusal(
                421,
                "HostNotAllowed",
                f"this service does not answer to Host {shown}: it answers to localhost, 127.0.0.1, ::1, the "
                "address it binds and the names in EVALUATOR_HOST_ALLOWED_HOSTS (comma-separated; add the name "
                "you reach it by there)",
            )
        elif origin is not None and not self._same_site(origin.decode("latin-1")):
            shown = json.dumps(origin.decode("latin-1")[:100])
            refusal = _refusal(
                403,
                "OriginNotAllowed",
                f"a request from a web page of origin {shown} is refused: pages may call this service only from "
                "its own names (localhost, 127.0.0.1, ::1, the address it binds, EVALUATOR_HOST_ALLOWED_HOSTS)",
            )
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, headers, body = refusal
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _same_site(self, origin: str) -> bool:
        """Whether an ``Origin`` names a page served from one of this service's names (``null`` does not)."""
        try:
            hostname = urlsplit(origin.strip()).hostname
        except ValueError:
            return False
        return hostname is not None and self.allows(_normal(hostname))
