"""The in-sandbox end of egress: ``127.0.0.1:port`` forwarded to the host's egress proxy.

Started (config ``"egress": {"socket": ..., "port": ...}``) before the harness binds, for workers of
egress runtimes only. It carries bytes only: every decision is the host proxy's
(``evaluator_host/sandbox/egress.py``).
"""

from __future__ import annotations


def forward_egress(socket_path: str, port: int) -> None:
    """Forward ``127.0.0.1:port`` (the sandbox's own loopback, named by ``HTTP(S)_PROXY``) to the host's
    egress proxy at ``socket_path``, on a thread of its own (one selector loop: no thread per connection,
    which the pids limit counts)."""
    import selectors
    import socket
    import threading

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

    threading.Thread(target=loop, name="egress-forwarder", daemon=True).start()
