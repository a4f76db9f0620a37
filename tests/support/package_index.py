"""A loopback package index for build tests: a PEP 503 simple index on 127.0.0.1 serving the wheels
and sdists a test makes (with ``#sha256=`` hashes), and logging every path asked of it."""

from __future__ import annotations

import base64
import hashlib
import io
import re
import tarfile
import threading
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

__all__ = ["Index", "loopback_index", "sdist_with_backend", "wheel"]


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class Index:
    """The files of a running loopback index (``folder``) and the paths clients asked for (``asked``)."""

    def __init__(self, folder: Path, port: int) -> None:
        self.folder = folder
        self.port = port
        self.asked: list[str] = []
        self.trickle: set[str] = set()  # file names served one byte at a time (a trickling index)

    @property
    def url(self) -> str:
        """The simple index's URL (``index-url``)."""
        return f"http://127.0.0.1:{self.port}/simple"

    def file_url(self, name: str) -> str:
        """The URL of one of its files."""
        return f"http://127.0.0.1:{self.port}/files/{name}"


@contextmanager
def loopback_index(folder: Path, credentials: str | None = None) -> Iterator[Index]:
    """Serve ``folder``'s ``*.whl`` and ``*.tar.gz`` as a simple index on a free loopback port (with
    ``credentials``, ``user:password``: only to requests that carry them, as HTTP basic auth)."""
    wanted = None if credentials is None else "Basic " + base64.b64encode(credentials.encode()).decode()
    state: dict[str, Index] = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        head = False  # answering a HEAD request: the same status and headers, no body

        def do_HEAD(self) -> None:  # noqa: N802 - uv asks a wheel's size (and range support) first
            self.head = True
            self.do_GET()

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            index = state["index"]
            index.asked.append(self.path)
            if wanted is not None and self.headers.get("Authorization") != wanted:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="test"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            parts = [p for p in self.path.split("?")[0].split("/") if p]
            body, kind = b"", "text/html"
            if parts[:1] == ["simple"] and len(parts) == 2:
                links = []
                for path in sorted(folder.iterdir()):
                    project = path.name.split("-")[0]
                    if _normalize(project) == _normalize(parts[1]):
                        digest = hashlib.sha256(path.read_bytes()).hexdigest()
                        links.append(f'<a href="/files/{path.name}#sha256={digest}">{path.name}</a><br>')
                if not links:
                    self.send_error(404)
                    return
                body = ("<!DOCTYPE html><html><body>" + "".join(links) + "</body></html>").encode()
            elif parts[:1] == ["files"] and len(parts) == 2 and parts[1] in index.trickle:
                data = (folder / parts[1]).read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                for byte in [] if self.head else data[:600]:  # bounded: a byte every 0.2 s for at most two minutes
                    try:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                    except OSError:
                        return
                    time.sleep(0.2)
                return
            elif parts[:1] == ["files"] and len(parts) == 2 and (folder / parts[1]).is_file():
                body, kind = (folder / parts[1]).read_bytes(), "application/octet-stream"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not self.head:
                self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state["index"] = Index(folder, int(server.server_address[1]))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state["index"]
    finally:
        server.shutdown()
        server.server_close()


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def wheel(folder: Path, name: str, version: str, files: dict[str, str], requires: tuple[str, ...] = ()) -> Path:
    """A pure-Python wheel of ``files`` whose metadata says ``Requires-Dist: <each of requires>``."""
    dist = f"{name.replace('-', '_')}-{version}.dist-info"
    contents = dict(files)
    header = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    contents[f"{dist}/METADATA"] = header + "".join(f"Requires-Dist: {r}\n" for r in requires)
    contents[f"{dist}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = [_record_line(path, text.encode()) for path, text in contents.items()] + [f"{dist}/RECORD,,"]
    contents[f"{dist}/RECORD"] = "\n".join(record) + "\n"
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in contents.items():
            archive.writestr(member, text)
    return path


# An in-tree PEP 517 backend: ``PROBE`` (code defining ``probe() -> str``, the module text) runs when
# pip builds the sdist, and what it returns becomes the built wheel's ``<name>/__init__.py``.
_BACKEND = """
import base64, hashlib, os, zipfile
{probe}

def _wheel(directory):
    module = probe()
    dist = "{dist_name}-{version}.dist-info"
    files = {{
        "{module}/__init__.py": module,
        dist + "/METADATA": "Metadata-Version: 2.1\\nName: {name}\\nVersion: {version}\\n",
        dist + "/WHEEL": "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
    }}
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{{path}},sha256={{digest}},{{len(text.encode())}}")
    files[dist + "/RECORD"] = "\\n".join(record + [dist + "/RECORD,,"]) + "\\n"
    name = "{dist_name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, name), "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return name

def get_requires_for_build_wheel(config_settings=None):
    return []

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory)
"""


def sdist_with_backend(folder: Path, name: str, version: str, probe: str) -> Path:
    """``<name>-<version>.tar.gz``: an sdist whose in-tree build backend runs ``probe`` (see :data:`_BACKEND`)."""
    root = f"{name}-{version}"
    module = name.replace("-", "_")
    files = {
        f"{root}/pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\n',
        f"{root}/backend.py": _BACKEND.format(probe=probe, dist_name=module, name=name, version=version, module=module),
        f"{root}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
    }
    path = folder / f"{root}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for member, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(member)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return path
