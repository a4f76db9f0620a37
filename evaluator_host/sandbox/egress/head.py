"""Reading a forward proxy's request head: the one parser of the egress proxy and the build relay.

Both take what a sandbox sends to its one way out — ``CONNECT host:port`` (a tunnel) or an absolute
``http://host[:port]/path`` request — and judge it on the host. :func:`parse_proxy_head` reads the
request line (nothing else is accepted: :class:`Refused` says why, and the proxy answers 403), the
host lowercased without a trailing dot; the header lines are left as sent for each proxy's own rule
(:func:`header_lines`: the egress proxy's, which refuses folded or malformed lines; the build relay
drops its credentials and proxy lines). :func:`parse_origin` reads a request sent inside a tunnel the
egress proxy ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

__all__ = ["HEAD_LIMIT", "HOP", "ProxyHead", "Refused", "checked", "header_lines", "parse_origin", "parse_proxy_head"]

HEAD_LIMIT = 16 * 1024  # the largest request head either proxy reads
# header lines never passed on: hop-by-hop, the proxy's own, and Host (set from the destination)
HOP = ("proxy-", "connection:", "keep-alive:", "host:", "upgrade:", "te:", "trailer:")


class Refused(Exception):
    """A request a proxy turns down (403 to the client, with this reason)."""


@dataclass(frozen=True)
class ProxyHead:
    """A request's head as a proxy read it: ``CONNECT host:port`` (``tunnel``), or an HTTP request
    (``method``, ``path`` with its query, ``version`` and its header ``lines``) to send on to ``host:port``."""

    tunnel: bool
    host: str
    port: int
    method: str = ""
    path: str = ""
    version: str = ""
    lines: list[str] = field(default_factory=list)

    @property
    def destination(self) -> str:
        """``host:port`` as a configured index is written: a tunnel's as the client named it, an IPv6
        host of a URL in brackets."""
        if not self.tunnel and ":" in self.host:
            return f"[{self.host}]:{self.port}"
        return f"{self.host}:{self.port}"

    def forward(self, added: tuple[tuple[str, str], ...]) -> bytes:
        """The head sent to the destination: ``Host`` the destination's own name, the headers of ``added``
        in place of the client's of the same names, ``Connection: close``."""
        replaced = {name.lower() for name, _value in added}
        keep = [line for line in self.lines if line.partition(":")[0].strip().lower() not in replaced]
        default = 443 if added else 80
        host = self.host if self.port == default else f"{self.host}:{self.port}"
        lines = [f"{self.method} {self.path} {self.version}", f"Host: {host}", *keep]
        lines += [f"{name}: {value}" for name, value in added]
        return "\r\n".join([*lines, "Connection: close", "", ""]).encode("latin-1")


def parse_proxy_head(head: bytes, via: str) -> ProxyHead:
    """A proxy request's head: ``CONNECT host:port``, or an absolute ``http://`` request (its header lines
    as sent); :class:`Refused` for anything else (``via`` names the proxy in the reason)."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise Refused("not an HTTP proxy request")
    method, target, version = parts
    if method == "CONNECT":
        host, sep, port = target.rpartition(":")
        if not sep or not port.isdigit():
            raise Refused("CONNECT needs host:port")
        return ProxyHead(True, host.lower().rstrip("."), int(port))
    try:
        url = urlsplit(target)
    except ValueError:  # e.g. an unclosed IPv6 bracket
        url = urlsplit("")
    if url.scheme != "http" or not url.hostname:
        raise Refused(f"only CONNECT, or a plain http:// URL, goes through this {via}")
    try:
        url_port = url.port or 80
    except ValueError:
        raise Refused("bad port") from None
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    return ProxyHead(False, url.hostname.lower().rstrip("."), url_port, method, path, version, lines[1:])


def header_lines(lines: list[str]) -> list[str]:
    """The header lines to pass on (no hop-by-hop, proxy or ``Host`` line: :data:`HOP`); :class:`Refused`
    for a folded or malformed one (they are how requests are smuggled)."""
    kept = []
    for line in lines:
        if not line:
            continue
        if line[0] in " \t" or ":" not in line or not line.partition(":")[0].strip():
            raise Refused("a malformed header line")
        if not line.lower().startswith(HOP):
            kept.append(line)
    return kept


def checked(request: ProxyHead) -> ProxyHead:
    """``request`` with only the header lines :func:`header_lines` passes on."""
    return request if request.tunnel else replace(request, lines=header_lines(request.lines))


def parse_origin(head: bytes, host: str, port: int) -> ProxyHead:
    """A request read inside a tunnel the proxy ended (``GET /path HTTP/1.1`` and its headers, checked)."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
        raise Refused("not an HTTP/1.x request for a path")
    method, path, version = parts
    return ProxyHead(False, host, port, method, path, version, header_lines(lines[1:]))
