"""Unix sockets at any path: a socket's address holds 107 bytes (``sun_path``), a folder's path is unbounded.

The service makes its sockets (the build relay's, each egress gate's) in a fresh folder of the temporary
directory, and a deep ``TMPDIR`` — an operator's, a test's ``tmp_path`` under a long user name — pushes a
socket's path past that limit: ``bind`` then fails with "AF_UNIX path too long", and with it every build or
egress worker. :func:`bind` and :func:`connect` take a path of any length: one that fits is used as it is;
a longer one is reached through the folder's descriptor, ``/proc/self/fd/<n>/<name>`` (the kernel resolves
the descriptor's link to the folder itself, so the socket is made, or found, at the real path). Linux only,
as the sandboxes are.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

__all__ = ["MAX_PATH_BYTES", "bind", "connect", "serve"]

MAX_PATH_BYTES = 107  # sun_path's 108 bytes, its terminating NUL included


def _through_folder(sock: socket.socket, path: str | Path, call: Callable[[str], None]) -> None:
    text = os.fspath(path)
    if len(os.fsencode(text)) <= MAX_PATH_BYTES:
        call(text)
        return
    folder, name = os.path.split(text)
    fd = os.open(folder or ".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        call(f"/proc/self/fd/{fd}/{name}")
    finally:
        os.close(fd)


def bind(sock: socket.socket, path: str | Path) -> None:
    """Bind the unix socket ``sock`` at ``path``, whatever its length (see the module docstring)."""
    _through_folder(sock, path, sock.bind)


async def serve(
    handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]], path: str | Path, limit: int,
    mode: int,
) -> asyncio.Server:  # fmt: skip
    """``asyncio.start_unix_server`` at ``path`` of any length (streams of ``limit`` bytes), the socket's
    permissions then ``mode``."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        bind(sock, path)
        server = await asyncio.start_unix_server(handler, sock=sock, limit=limit)
    except BaseException:
        sock.close()
        raise
    os.chmod(path, mode)
    return server


def connect(sock: socket.socket, path: str | Path) -> None:
    """Connect the unix socket ``sock`` to ``path``, whatever its length (see the module docstring)."""
    _through_folder(sock, path, sock.connect)
