"""The in-sandbox end of a proxy: ``127.0.0.1:port`` forwarded, bytes only, to a host proxy's unix socket.

Two users, one forwarder:

* a worker of an egress runtime (config ``"egress": {"socket": ..., "port": ...}``): the harness calls
  :func:`forward_egress` before it reads its ``load`` frame (before any user code): it listens on the
  port and first offers the listening socket itself to the host's gate (:func:`hand_over`; the gate
  then accepts the sandbox's connections directly: no forwarder, no hop, no thread here — see
  ``evaluator_host/sandbox/egress/handoff.py``); only if the gate does not take it does it forward.
  Every decision is the host's egress proxy's (``evaluator_host/sandbox/egress/proxy.py``);
* a build in the build sandbox: ``evaluator_host/builds/build_sandbox.py`` ships this file's text as
  ``FORWARDER`` (the forwarder to the build relay, on ``127.0.0.1:3128``); pip's build script runs the
  text inline and calls :func:`forward`, npm's build starts it as ``python3 forward.py --daemon SOCKET``,
  which listens, forks into the background and returns once listening.

Standard library only, and no ``from __future__`` import, so that its text runs inside another script.
"""

import array
import os
import selectors
import socket
import sys
import threading
from collections.abc import Callable

HANDOFF_HEAD = b"EVH-HANDOFF listener\r\n\r\n"  # the gate's side: evaluator_host/sandbox/egress/handoff.py


def listen(port: int, backlog: int = 64) -> socket.socket:
    """A listening socket on ``127.0.0.1:port`` (the sandbox's own loopback, named by ``HTTP(S)_PROXY``)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(backlog)
    return listener


def hand_over(listener: socket.socket, socket_path: str) -> bool:
    """Offer ``listener`` to the gate at ``socket_path`` (``SCM_RIGHTS``); True if the gate took it (the
    caller then closes its own copy), False if it said no or anything failed (the caller forwards)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as gate:
            gate.settimeout(10)
            gate.connect(socket_path)
            gate.sendall(HANDOFF_HEAD)
            if _line(gate) != b"GO":
                return False
            fds = array.array("i", [listener.fileno()])
            gate.sendmsg([b"\0"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds.tobytes())])
            return _line(gate) == b"OK"
    except OSError:
        return False


def _line(sock: socket.socket) -> bytes:
    """One short answer line from the gate (without its newline)."""
    data = b""
    while not data.endswith(b"\n") and len(data) < 512:
        chunk = sock.recv(512 - len(data))
        if not chunk:
            break
        data += chunk
    return data.split(b" ", 1)[0].strip()


def forward(socket_path: str, port: int = 3128, listener: "socket.socket | None" = None) -> Callable[[], None]:
    """Listen on ``127.0.0.1:port`` now (or use ``listener``), and answer the loop that forwards each
    connection to the unix socket ``socket_path``: one selector loop, no thread per connection (which the
    pids limit counts)."""
    if listener is None:
        listener = listen(port)

    def loop() -> None:
        selector = selectors.DefaultSelector()
        selector.register(listener, selectors.EVENT_READ, None)
        peers: dict[socket.socket, socket.socket] = {}

        def drop(sock: socket.socket) -> None:
            for end in (sock, peers.get(sock)):
                if end is not None and end in peers:
                    selector.unregister(end)
                    peers.pop(end)
                    end.close()

        while True:
            for key, _ in selector.select():
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if key.data is None:
                    try:
                        client, _ = sock.accept()
                        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                        upstream.connect(socket_path)
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


def forward_egress(socket_path: str, port: int) -> None:
    """``127.0.0.1:port`` to the host's egress proxy at ``socket_path``: the listening socket handed to it
    (then closed here: nothing of it is left for user code), or else forwarded on a thread of its own."""
    listener = listen(port, 1024)
    if hand_over(listener, socket_path):
        listener.close()
        return
    threading.Thread(target=forward(socket_path, port, listener), name="egress-forwarder", daemon=True).start()


if __name__ == "__main__" and sys.argv[1:2] == ["--daemon"]:
    _loop = forward(sys.argv[2])
    if os.fork() == 0:
        os.setsid()
        _loop()
    os._exit(0)
