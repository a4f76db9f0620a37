"""Offline tests: the checks the unit tier's guard (``tests/unit/conftest.py``) applies to every socket.

Only loopback (127.0.0.0/8, ::1, ``localhost``) and unix sockets pass; any other address, or resolving
any other name (a DNS query leaves the machine), raises :class:`NetworkUsed` before a packet is sent.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

#: A loopback port nothing listens on: where a subprocess's proxied traffic goes to fail.
CLOSED = "http://127.0.0.1:9"


class NetworkUsed(AssertionError):
    """A unit test reached for the network (mark it ``network``, or give it a loopback server)."""


def _loopback(host: object) -> bool:
    if not isinstance(host, str):
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def check_address(family: int, address: Any) -> None:
    """Refuse (:class:`NetworkUsed`) an ``address`` of ``family`` that is not loopback or a unix socket."""
    if family == getattr(socket, "AF_UNIX", None) or family not in (socket.AF_INET, socket.AF_INET6):
        return
    host = address[0] if isinstance(address, tuple) and address else address
    if not _loopback(host):
        raise NetworkUsed(f"a unit test connected to {address!r}: mark it `network` or serve it on loopback")


def check_name(host: object) -> None:
    """Refuse (:class:`NetworkUsed`) resolving a name other than loopback's (a DNS query leaves the machine)."""
    if host is None or isinstance(host, bytes) and _loopback(host.decode()) or _loopback(host):
        return
    raise NetworkUsed(f"a unit test resolved {host!r}: mark it `network` or serve it on loopback")
