"""A throwaway PostgreSQL server for the test session: Debian's ``postgresql`` binaries, a fresh
cluster in a temporary directory, a unix socket only (no TCP port), no fsync.

As root the server runs as the ``postgres`` user (``initdb`` refuses root); otherwise as the
caller. It dies with the test process even if that is killed (``PR_SET_PDEATHSIG``), and the
directory is removed at the end. The system's own cluster is never used.

``EVALUATOR_HOST_TEST_POSTGRES=required`` (set by ``.ci/run``) turns "no PostgreSQL here" into
a failure instead of a skip.
"""

from __future__ import annotations

import ctypes
import glob
import itertools
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import psycopg

from tests.support.wait import wait_until

__all__ = ["POSTGRES_MISSING", "POSTGRES_REQUIRED", "Cluster"]

POSTGRES_REQUIRED = os.environ.get("EVALUATOR_HOST_TEST_POSTGRES") == "required"


def _bindir() -> Path | None:
    """The newest installed server's binaries (``/usr/lib/postgresql/<version>/bin``), else ``PATH``'s."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("postgres")
    return Path(on_path).parent if on_path and shutil.which("initdb") else None


def _server_user() -> str | None:
    """Who runs the server: ``postgres`` when we are root, else nobody other than us."""
    if os.geteuid() != 0:
        return None
    return "postgres"


def _missing() -> str | None:
    if _bindir() is None:
        return "PostgreSQL's server binaries are not installed (Debian: apt-get install postgresql)"
    user = _server_user()
    if user is not None:
        try:
            pwd.getpwnam(user)
        except KeyError:
            return f"running as root and there is no {user!r} user to run the server as"
    return None


POSTGRES_MISSING = _missing()


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGQUIT)  # PR_SET_PDEATHSIG: SIGQUIT is an immediate shutdown


class Cluster:
    """One running server; :meth:`database` makes an empty database and answers its URL."""

    def __init__(self) -> None:
        bindir = _bindir()
        assert bindir is not None, POSTGRES_MISSING
        self.user = _server_user()
        self.root = Path(tempfile.mkdtemp(prefix="evh-pg-"))  # short: a socket path has ~100 bytes
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        data = self.root / "data"
        self._names = itertools.count(1)
        self._run([str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8"])
        options = {
            "listen_addresses": "",
            "unix_socket_directories": str(self.root),
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "300",
            "shared_buffers": "32MB",
        }
        argv = [str(bindir / "postgres"), "-D", str(data)]
        for name, value in options.items():
            argv += ["-c", f"{name}={value}"]
        self._log = open(self.root / "server.log", "ab")  # noqa: SIM115 - closed in stop()
        self._argv = argv
        self._start()
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE tests")

    def _start(self) -> None:
        self.proc = subprocess.Popen(
            self._argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            user=self.user,
            preexec_fn=_die_with_parent,
            start_new_session=True,
        )
        self._wait_ready()

    def halt(self) -> None:
        """Stop the server but keep its data (fast shutdown: connections are cut): the database is away."""
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=30)

    def resume(self) -> None:
        """Start the server again on its data after :meth:`halt`."""
        self._start()

    def _run(self, argv: list[str]) -> None:
        done = subprocess.run(argv, user=self.user, capture_output=True, text=True, timeout=120, cwd=self.root)
        assert done.returncode == 0, f"{argv[0]} failed: {done.stdout}\n{done.stderr}"

    def _wait_ready(self) -> None:
        def accepts() -> bool:
            assert self.proc.poll() is None, f"postgres exited: {(self.root / 'server.log').read_text()[-2000:]}"
            with psycopg.connect(self.dsn("postgres"), connect_timeout=2):
                return True

        wait_until(accepts, 60, 0.1, what="postgres to start", ignoring=(psycopg.OperationalError,))

    def dsn(self, database: str) -> str:
        """A libpq connection string for ``database``."""
        return f"host={self.root} user=postgres dbname={database}"

    def url(self, database: str, driver: str = "postgresql+psycopg") -> str:
        """A SQLAlchemy URL for ``database`` (``driver`` ``postgresql``: the plain form users write)."""
        return f"{driver}://postgres@/{database}?host={self.root}"

    def database(self, driver: str = "postgresql+psycopg") -> str:
        """A new, empty database of its own; its URL. (A schema of the ``tests`` database, chosen by the
        URL's ``search_path``, which costs milliseconds where ``CREATE DATABASE`` costs half a second.)"""
        name = f"t{next(self._names)}"
        with psycopg.connect(self.dsn("tests"), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        return f"{self.url('tests', driver)}&options=-csearch_path%3D{name}"

    def stop(self) -> None:
        """Stop the server now and remove its directory."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        shutil.rmtree(self.root, ignore_errors=True)
