"""A loopback npm registry for build tests: packuments and tarballs of the packages a test makes, on
127.0.0.1, logging every path asked of it (and, with ``on_tarball``, calling back while it serves one:
npm is then waiting for the answer, so a test can look at npm's process)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["Registry", "loopback_registry", "tarball"]


def tarball(name: str, version: str, files: dict[str, str], dependencies: dict[str, str] | None = None) -> bytes:
    """An npm package tarball (``package/…``) with its package.json."""
    manifest = {"name": name, "version": version, "main": "index.js", "dependencies": dependencies or {}}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for path, text in {"package.json": json.dumps(manifest), **files}.items():
            data = text.encode()
            info = tarfile.TarInfo(f"package/{path}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


class Registry:
    """A running loopback registry: ``add`` packages, read ``asked``."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.asked: list[str] = []
        self.packuments: dict[str, dict[str, object]] = {}
        self.tarballs: dict[str, bytes] = {}
        self.on_tarball: Callable[[], None] | None = None

    @property
    def url(self) -> str:
        """The registry's URL (npm's ``registry`` setting)."""
        return f"http://127.0.0.1:{self.port}/"

    def add(self, name: str, version: str, files: dict[str, str], dependencies: dict[str, str] | None = None) -> None:
        """Publish ``name@version`` (its tarball served from this registry, with its integrity)."""
        data = tarball(name, version, files, dependencies)
        file = f"{name}-{version}.tgz"
        self.tarballs[file] = data
        integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
        entry = {
            "name": name,
            "version": version,
            "main": "index.js",
            "dependencies": dependencies or {},
            "dist": {"tarball": f"{self.url}tarballs/{file}", "integrity": integrity},
        }
        packument = self.packuments.setdefault(name, {"name": name, "versions": {}, "dist-tags": {}})
        packument["versions"][version] = entry  # type: ignore[index]
        packument["dist-tags"] = {"latest": version}


@contextmanager
def loopback_registry() -> Iterator[Registry]:
    """Serve a :class:`Registry` on a free loopback port for the block."""
    state: dict[str, Registry] = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            registry = state["registry"]
            path = self.path.split("?")[0]
            registry.asked.append(path)
            if path.startswith("/tarballs/") and path[len("/tarballs/") :] in registry.tarballs:
                if registry.on_tarball is not None:
                    registry.on_tarball()
                body, kind = registry.tarballs[path[len("/tarballs/") :]], "application/octet-stream"
            elif path.strip("/") in registry.packuments:
                body, kind = json.dumps(registry.packuments[path.strip("/")]).encode(), "application/json"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state["registry"] = Registry(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state["registry"]
    finally:
        server.shutdown()
        server.server_close()
