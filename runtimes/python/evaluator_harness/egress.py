"""The in-sandbox end of a proxy: ``127.0.0.1:port`` forwarded, bytes only, to a host proxy's unix socket.

Two users, one forwarder:

* a worker of an egress runtime (config ``"egress": {"socket": ..., "port": ...}``): the harness starts
  :func:`forward_egress` before it binds; every decision is the host's egress proxy's
  (``evaluator_host/sandbox/egress.py``);
* a build in the build sandbox: ``evaluator_host/builds/build_sandbox.py`` ships this file's text as
  ``FORWARDER`` (the forwarder to the build relay, on ``127.0.0.1:3128``); pip's build script runs the
  text inline and calls :func:`forward`, npm's build starts it as ``python3 forward.py --daemon SOCKET``,
  which listens, forks into the background and returns once listening.

Standard library only, and no ``from __future__`` import, so that its text runs inside another script.
"""

import os
import selectors
import socket
import sys
import threading
from collections.abc import Callable


def forward(socket_path: str, port: int = 3128) -> Callable[[], None]:
    """Listen on ``127.0.0.1:port`` (the sandbox's own loopback, named by ``HTTP(S)_PROXY``) now, and
    answer the loop that forwards each connection to the unix socket ``socket_path``: one selector loop,
    no thread per connection (which the pids limit counts)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)

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
    """Forward ``127.0.0.1:port`` to the host's egress proxy at ``socket_path``, on a thread of its own."""
    threading.Thread(target=forward(socket_path, port), name="egress-forwarder", daemon=True).start()


if __name__ == "__main__" and sys.argv[1:2] == ["--daemon"]:
    _loop = forward(sys.argv[2])
    if os.fork() == 0:
        os.setsid()
        _loop()
    os._exit(0)
