"""``evaluator-host serve`` keeps an idle connection open longer than its clients' own idle expiry
(``keep_alive_s``, 75 s by default), so a client drops an idle connection before the service does.

uvicorn's own default, 5 s, equals httpx's pool expiry (``keepalive_expiry``, 5 s): a request sent on a pooled
connection at the moment the service closed it failed with "Server disconnected without sending a response"
— a POST is not retried. It failed a browser test of a full run here, and 6 of 960 requests of httpx clients
resuming near 5 s idle (0 of 800 at 75 s: ``docs/benchmarks.md``, stop 80). Proven on the wire: one raw socket, two
requests 6 s apart."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from tests.support.service import serving

REQUEST = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
IDLE_S = 6.0  # past httpx's 5 s pool expiry and uvicorn's 5 s default


def _response(sock: socket.socket) -> bytes:
    """One HTTP/1.1 response read off ``sock`` (its head and a ``content-length`` body): its status line."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the connection was closed after {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "the connection was closed mid-body"
        body += chunk
    return head.split(b"\r\n", 1)[0]


def test_an_idle_connection_outlives_a_clients_own_pool_expiry(tmp_path: Path) -> None:
    with serving(tmp_path / "data", backend="process") as (client, _proc):
        with socket.create_connection(("127.0.0.1", client.base_url.port), timeout=30) as sock:
            sock.sendall(REQUEST)
            assert _response(sock) == b"HTTP/1.1 200 OK"
            time.sleep(IDLE_S)
            sock.sendall(REQUEST)  # the same connection, idle longer than httpx would keep it
            assert _response(sock) == b"HTTP/1.1 200 OK"


def test_an_idle_connection_is_closed_after_keep_alive_s_and_the_service_stays_healthy(tmp_path: Path) -> None:
    with serving(tmp_path / "data", backend="process", env={"EVALUATOR_HOST_KEEP_ALIVE_S": "1"}) as (client, _proc):
        with socket.create_connection(("127.0.0.1", client.base_url.port), timeout=30) as sock:
            sock.sendall(REQUEST)
            assert _response(sock) == b"HTTP/1.1 200 OK"
            sock.settimeout(20)  # the bound is 1 s; a loaded machine may take longer to act on it
            assert sock.recv(1) == b"", "the service kept an idle connection past keep_alive_s"
        assert client.get("/healthz").status_code == 200
