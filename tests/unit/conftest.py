"""The unit tier runs offline: a test here that is not marked ``network`` cannot reach past loopback.

For each such test, a socket's ``connect``/``connect_ex``/``sendto`` to an address that is not loopback
(127.0.0.0/8, ::1) or a unix socket raises ``NetworkUsed``, and so does resolving a name other than
``localhost`` (``getaddrinfo``): nothing leaves the machine, not even a DNS query (the checks:
``tests/support/offline.py``). Subprocesses (pip, npm) are pointed at a closed loopback port through
the proxy variables, so their attempt fails as well. ``make unit`` deselects the tests marked
``network``; this guard proves the rest need none (``tests/unit/test_offline.py`` proves the guard).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.offline import CLOSED, check_address, check_name
from tests.support.source import forget


@pytest.fixture(autouse=True)
def offline(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No network for this test unless it is marked ``network``."""
    if request.node.get_closest_marker("network") is not None:
        yield
        return
    real_connect, real_connect_ex, real_sendto = socket.socket.connect, socket.socket.connect_ex, socket.socket.sendto
    real_getaddrinfo = socket.getaddrinfo

    def connect(self: socket.socket, address: Any) -> None:
        check_address(self.family, address)
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        check_address(self.family, address)
        return real_connect_ex(self, address)

    def sendto(self: socket.socket, data: Any, *args: Any) -> int:
        check_address(self.family, args[-1])
        return real_sendto(self, data, *args)  # type: ignore[arg-type]

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        check_name(host)
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket.socket, "sendto", sendto)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, CLOSED)
    for name in ("npm_config_proxy", "npm_config_https_proxy"):
        monkeypatch.setenv(name, CLOSED)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "localhost,127.0.0.1,::1")
    yield


@pytest.fixture(autouse=True, scope="module")
def _parsed_trees_let_go() -> Iterator[None]:
    """The package's trees a file parsed (``tests/support/source.py``) let go when the file ends."""
    yield
    forget()
