"""Which addresses the egress proxy connects to: only globally routable ones, judged after one resolution.

:func:`is_public` is the SSRF guard (loopback, private, link-local — cloud metadata included —, shared,
multicast and reserved addresses refused, and IPv6 forms that carry an IPv4 address judged by it or
refused); :func:`system_resolve` is the resolver the proxy uses unless given another (tests, pins).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket

__all__ = ["is_public", "system_resolve"]


# IPv6 ranges that carry an IPv4 address inside them: judged by that address, or refused outright.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052: the well-known NAT64 prefix, IPv4 in the last 32 bits
_EMBEDDING_REFUSED = tuple(
    ipaddress.IPv6Network(net)
    for net in (
        "::/96",  # IPv4-compatible (deprecated, RFC 4291): ::169.254.169.254
        "::ffff:0:0:0/96",  # IPv4-translated (RFC 2765): ::ffff:0:a9fe:a9fe
        "64:ff9b:1::/48",  # local-use NAT64 (RFC 8215): where the IPv4 sits depends on the site's prefix length
        "2001::/32",  # Teredo: a tunnel to the IPv4 it embeds
        "fec0::/10",  # site-local (deprecated, RFC 3879): private, yet Python's is_global says True
    )
)


def is_public(address: str) -> bool:
    """Whether ``address`` is globally routable and reaches nothing else through an IPv4 address it embeds.

    IPv6 forms that carry an IPv4 address are judged by that address (IPv4-mapped ``::ffff:a.b.c.d``,
    NAT64 ``64:ff9b::a.b.c.d``, 6to4 ``2002:AABB:CCDD::``) or refused outright (IPv4-compatible
    ``::a.b.c.d``, IPv4-translated ``::ffff:0:a.b.c.d``, local-use NAT64 ``64:ff9b:1::/48``, Teredo
    ``2001::/32``, site-local ``fec0::/10``): a gateway on the way could otherwise carry a connection to
    ``169.254.169.254`` or a private range."""
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip in _NAT64:
            ip = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        elif ip.sixtofour is not None:
            if not _public_v4(ip.sixtofour):
                return False
        elif any(ip in net for net in _EMBEDDING_REFUSED):
            return False
    if isinstance(ip, ipaddress.IPv4Address):
        return _public_v4(ip)
    return bool(ip.is_global) and not ip.is_multicast


def _public_v4(ip: ipaddress.IPv4Address) -> bool:
    return bool(ip.is_global) and not ip.is_multicast


async def system_resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (the system resolver)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))
