"""The unit tier's offline guard (``tests/unit/conftest.py``) holds: past loopback nothing connects or
resolves, loopback does, subprocesses get a closed proxy, and a test marked ``network`` is left alone.

No packet leaves if the guard were missing: the refused connect is on a closed socket (the OS answers
EBADF without sending anything), and a name is resolved only once the guard is seen in place.
"""

from __future__ import annotations

import os
import socket

import pytest

from tests.support.offline import CLOSED, NetworkUsed, check_address, check_name

REAL_GETADDRINFO = socket.getaddrinfo.__module__ == "socket" and socket.getaddrinfo  # at import: unpatched


def test_a_connection_past_loopback_is_refused_before_it_is_made() -> None:
    for family, address in ((socket.AF_INET, ("192.0.2.1", 443)), (socket.AF_INET6, ("2001:db8::1", 443, 0, 0))):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.close()  # closed: even without the guard, nothing could be sent
        with pytest.raises(NetworkUsed, match="mark it `network`"):
            sock.connect(address)
        with pytest.raises(NetworkUsed):
            sock.connect_ex(address)


def test_resolving_a_name_is_refused() -> None:
    assert socket.getaddrinfo is not REAL_GETADDRINFO and socket.getaddrinfo.__module__ != "socket"  # guarded
    with pytest.raises(NetworkUsed, match="registry.npmjs.org"):
        socket.getaddrinfo("registry.npmjs.org", 443)


def test_loopback_and_unix_sockets_pass() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname(), timeout=5):
            pass
        with socket.create_connection(("localhost", server.getsockname()[1]), timeout=5):
            pass
    check_address(socket.AF_INET6, ("::1", 80, 0, 0))
    check_address(socket.AF_UNIX, "/run/whatever.sock")
    check_name("localhost")
    check_name(None)


def test_subprocesses_are_pointed_at_a_closed_proxy() -> None:
    assert os.environ["HTTPS_PROXY"] == os.environ["https_proxy"] == os.environ["npm_config_https_proxy"] == CLOSED


@pytest.mark.network
def test_a_test_marked_network_is_left_alone() -> None:
    assert socket.getaddrinfo.__module__ == "socket"
    assert os.environ.get("HTTPS_PROXY") != CLOSED
