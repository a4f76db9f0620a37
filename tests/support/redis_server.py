"""A throwaway ``redis-server`` (Debian's package) for tests and benchmarks: a unix socket in a
temporary directory (no TCP port), append-only persistence so a restart keeps the queue, stopped
and removed at the end. The system's own Redis is never used.

``EVALUATOR_HOST_TEST_REDIS=required`` (set by ``.ci/run``) turns "no redis-server" into a failure.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import redis

from tests.support.processes import stop_process
from tests.support.wait import wait_until

__all__ = ["REDIS_MISSING", "REDIS_REQUIRED", "RedisServer"]

REDIS_REQUIRED = os.environ.get("EVALUATOR_HOST_TEST_REDIS") == "required"
REDIS_MISSING = (
    None if shutil.which("redis-server") else "redis-server is not installed (Debian: apt-get install redis-server)"
)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class RedisServer:
    """One running ``redis-server``; :attr:`url` is the broker URL (``redis+socket://``)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="evh-redis-"))
        self.socket = self.root / "redis.sock"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis+socket://{self.socket}"

    def client(self) -> redis.Redis:
        return redis.Redis(unix_socket_path=str(self.socket))

    def start(self) -> None:
        """Start the server (again, on the same socket and data: what it had is loaded back)."""
        argv = [
            "redis-server", "--port", "0", "--unixsocket", str(self.socket), "--unixsocketperm", "700",
            "--dir", str(self.root), "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
            "--logfile", str(self.root / "redis.log"), "--daemonize", "no",
        ]  # fmt: skip
        self.proc = subprocess.Popen(argv, preexec_fn=_die_with_parent, start_new_session=True)

        def answers() -> bool:
            assert self.proc is not None and self.proc.poll() is None, (self.root / "redis.log").read_text()[-2000:]
            with self.client() as probe:
                return bool(probe.ping())

        wait_until(answers, 30, what="redis-server to start", ignoring=(redis.ConnectionError, FileNotFoundError))

    def stop(self) -> None:
        """Stop the server (SIGTERM: it writes its append-only file and exits)."""
        stop_process(self.proc)

    def close(self) -> None:
        """Stop it and remove its directory."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
