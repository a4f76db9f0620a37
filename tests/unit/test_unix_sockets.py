"""Unix sockets at paths past ``sun_path``'s 107 bytes (``evaluator_host/shared/unix_sockets.py``): the build
relay and the egress gates make theirs in the temporary directory, and a deep ``TMPDIR`` (an operator's, a
test's ``tmp_path`` under a long user name) failed every build with "AF_UNIX path too long"."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import tempfile
import time
from pathlib import Path

import pytest

from evaluator_host.builds import build_relay
from evaluator_host.shared import unix_sockets


def _deep(tmp_path: Path) -> Path:
    """A folder whose sockets' paths are past the limit."""
    folder = tmp_path / ("d" * 60) / ("e" * 60)
    folder.mkdir(parents=True)
    return folder


def test_a_socket_past_the_limit_is_bound_and_reached_at_its_real_path(tmp_path: Path) -> None:
    path = _deep(tmp_path) / "s.sock"
    assert len(os.fsencode(path)) > unix_sockets.MAX_PATH_BYTES
    with socket.socket(socket.AF_UNIX) as direct, pytest.raises(OSError):
        direct.bind(str(path))  # what the service did before
    with socket.socket(socket.AF_UNIX) as server, socket.socket(socket.AF_UNIX) as client:
        unix_sockets.bind(server, path)
        server.listen()
        assert stat.S_ISSOCK(path.lstat().st_mode)  # made in the folder itself, not under /proc
        unix_sockets.connect(client, path)
        accepted, _ = server.accept()
        with accepted:
            client.sendall(b"ping")
            assert accepted.recv(4) == b"ping"
    assert not any(name.startswith("fd") for name in os.listdir(path.parent))


def test_a_socket_within_the_limit_is_bound_at_its_path_as_given(tmp_path: Path) -> None:
    path = Path(tempfile.mkdtemp(prefix="evh-us-", dir="/tmp")) / "s.sock"  # short, whatever TMPDIR is
    try:
        with socket.socket(socket.AF_UNIX) as server:
            unix_sockets.bind(server, path)
            assert server.getsockname() == str(path)
    finally:
        path.unlink(missing_ok=True)
        path.parent.rmdir()


def test_a_missing_folder_is_the_usual_error(tmp_path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as server, pytest.raises(FileNotFoundError):
        unix_sockets.bind(server, _deep(tmp_path) / "gone" / "s.sock")


def test_an_asyncio_server_past_the_limit_answers_with_the_mode_asked(tmp_path: Path) -> None:
    path = _deep(tmp_path) / "gate.sock"

    async def scenario() -> bytes:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(await reader.readexactly(5))
            await writer.drain()
            writer.close()

        server = await unix_sockets.serve(echo, path, 1024, mode=0o666)
        async with server:
            assert stat.S_IMODE(path.stat().st_mode) == 0o666
            client = socket.socket(socket.AF_UNIX)
            unix_sockets.connect(client, path)
            reader, writer = await asyncio.open_unix_connection(sock=client)
            writer.write(b"hello")
            answer = await reader.read()
            writer.close()
            return answer

    assert asyncio.run(scenario()) == b"hello"


def test_the_build_relay_works_and_is_swept_in_a_deep_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The relay under a ``TMPDIR`` past the limit: it listens, answers (a refusal here: no host is allowed), stays
    while it lives, and once dead and a minute old its folder is swept."""
    deep = _deep(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    relay = build_relay.BuildRelay(frozenset())
    assert len(os.fsencode(relay.path)) > unix_sockets.MAX_PATH_BYTES
    try:
        with socket.socket(socket.AF_UNIX) as conn:
            conn.settimeout(10)
            unix_sockets.connect(conn, relay.path)
            conn.sendall(b"CONNECT example.invalid:443 HTTP/1.1\r\n\r\n")
            assert conn.recv(4096).startswith(b"HTTP/1.1 403")
        old = time.time() - 120
        os.utime(relay.path.parent, (old, old))
        assert build_relay.sweep_stale(deep) == 0  # alive: it answers the sweep's connect
    finally:
        relay._server.shutdown()  # noqa: SLF001 - killed: the folder and its socket stay behind, nobody listening
        relay._server.server_close()  # noqa: SLF001
    assert relay.path.parent.exists()
    assert build_relay.sweep_stale(deep) == 1
    assert not relay.path.parent.exists()
