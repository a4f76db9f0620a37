"""Debian's ``haproxy`` started by a test on a loopback port in front of replicas (issue 54): round robin,
health checks on ``/healthz``, every answer naming the replica that served it (``X-Replica``), and the
per-server counters read from its stats socket (``show stat``).

The configuration is the one docs/deploy.md and deploy/haproxy.cfg describe, with the servers' addresses
given here instead of by DNS.
"""

from __future__ import annotations

import csv
import io
import shutil
import socket
import subprocess
import uuid
from pathlib import Path

import httpx

from tests.support.processes import stop_process
from tests.support.service import free_port
from tests.support.wait import wait_until

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"

CONFIG = """\
global
    stats socket abns@{socket} level admin
    maxconn 512

defaults
    mode http
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    # as deploy/haproxy.cfg: a check may take 5 s (a busy replica on this loaded machine is slow, not dead)
    timeout check 5s
    # a connection a dead replica refused is tried again on another one (never a request it received)
    option redispatch
    retries 2

frontend evaluator_host
    bind 127.0.0.1:{port}
    default_backend replicas

backend replicas
    balance roundrobin
    option httpchk GET /healthz
    http-check expect status 200
    default-server inter 300ms fall 2 rise 2
    http-response set-header X-Replica %[srv_name]
{servers}
"""


class HAProxy:
    """One ``haproxy -db`` process under ``root`` balancing ``servers`` (name -> loopback port)."""

    def __init__(self, root: Path, servers: dict[str, int]) -> None:
        self.port = free_port()
        # its stats socket in the abstract namespace: no path, so no tmp_path is too deep for a socket's 107 bytes
        self.socket = f"evh-haproxy-{uuid.uuid4().hex}"
        self.config = root / "haproxy.cfg"
        lines = "\n".join(f"    server {name} 127.0.0.1:{port} check" for name, port in servers.items())
        self.config.write_text(CONFIG.format(socket=self.socket, port=self.port, servers=lines))
        check = subprocess.run([HAPROXY, "-c", "-f", str(self.config)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        self.log = root / "haproxy.log"
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([HAPROXY, "-db", "-f", str(self.config)], stdout=out, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        wait_until(
            lambda: set(self.up()) == set(servers),
            60,
            0.05,
            what="haproxy to see every replica up",
            ignoring=(FileNotFoundError, ConnectionRefusedError),  # its stats socket is not there yet
        )

    def command(self, line: str) -> str:
        """One command on the stats socket; its answer."""
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(b"\0" + self.socket.encode().ljust(107, b"\0"))  # haproxy's abns@ names fill sun_path
            s.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def stats(self) -> dict[str, dict[str, str]]:
        """The backend's servers' rows of ``show stat`` (by server name)."""
        assert self.proc.poll() is None, self.log.read_text()
        rows = csv.DictReader(io.StringIO(self.command("show stat").lstrip("# ")))
        return {r["svname"]: r for r in rows if r["pxname"] == "replicas" and r["svname"] not in ("BACKEND",)}

    def up(self) -> list[str]:
        """The servers haproxy's health checks hold up now."""
        return [name for name, row in self.stats().items() if row["status"] == "UP"]

    def served(self) -> dict[str, int]:
        """Requests each server was sent (``stot``: health checks are not counted)."""
        return {name: int(row["stot"] or 0) for name, row in self.stats().items()}

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=120)

    def close(self) -> None:
        stop_process(self.proc)
