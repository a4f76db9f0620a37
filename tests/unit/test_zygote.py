"""The suite's forked CLI commands (``tests/support/zygote.py``) answer as the real subprocess does: exit codes,
output, signals, descriptors, environment, working directory, sessions; anything else runs as a real
subprocess."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support import REPO, zygote
from tests.support.service import free_port
from tests.support.wait import wait_until
from tests.support.zygote import CLI, ZygoteProcess


def _both(argv: list[str], **kwargs: object) -> tuple[subprocess.CompletedProcess[str], ...]:
    """The same command forked and as a real subprocess."""
    forked = zygote.run(argv, capture_output=True, text=True, timeout=120, **kwargs)
    real = subprocess.run(argv, capture_output=True, text=True, timeout=120, **kwargs)  # type: ignore[call-overload]
    return forked, real


def test_a_forked_command_answers_as_the_real_one_exit_code_stdout_and_stderr(tmp_path: Path) -> None:
    forked, real = _both([*CLI, "--version"])
    assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)
    assert forked.stdout.startswith("evaluator-host ")
    forked, real = _both([*CLI, "run", str(tmp_path / "missing.py")])
    assert forked.returncode == real.returncode != 0
    assert forked.stderr == real.stderr and forked.stderr


def test_a_forked_serve_takes_its_environment_directory_session_and_descriptors(tmp_path: Path) -> None:
    """The service starts on the data dir and port its environment names, in the directory and new session asked
    for, holding the passed descriptor at its number and not the pipe's other end; SIGKILL by pid reads as -9."""
    port = free_port()
    env = {**os.environ, "EVALUATOR_HOST_DATA_DIR": str(tmp_path / "data"), "EVALUATOR_HOST_BACKEND": "process"}
    read, write = os.pipe()
    try:
        proc = zygote.popen(
            [*CLI, "serve", "--port", str(port), "--log-level", "warning"],
            env=env,
            cwd=tmp_path,
            start_new_session=True,
            pass_fds=(write,),
            stdout=subprocess.DEVNULL,
        )
        assert isinstance(proc, ZygoteProcess)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
            wait_until(lambda: client.get("/healthz").status_code == 200, 120, 0.1, ignoring=(httpx.TransportError,))
        assert (tmp_path / "data" / "service-id").is_file()  # the data dir of its environment
        assert Path(f"/proc/{proc.pid}/cwd").resolve() == tmp_path.resolve()
        assert os.getsid(proc.pid) == proc.pid != os.getsid(0)
        pipe = os.readlink(f"/proc/self/fd/{write}")
        held = [fd for fd in os.listdir(f"/proc/{proc.pid}/fd") if _link(proc.pid, fd) == pipe]
        assert held == [str(write)]  # the write end at its number; the read end never reached the child
        assert proc.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=0.1)
        proc.kill()
        assert proc.wait(timeout=60) == -signal.SIGKILL and proc.poll() == -signal.SIGKILL
    finally:
        os.close(read)
        os.close(write)


def _link(pid: int, fd: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return None


def test_what_cannot_be_forked_runs_as_a_real_subprocess(tmp_path: Path) -> None:
    assert isinstance(zygote.popen([sys.executable, "-c", "pass"]), subprocess.Popen)  # another program
    other = {**os.environ, "PYTHONHASHSEED": "123"}  # the interpreter would start otherwise
    proc = zygote.popen([*CLI, "--version"], env=other, stdout=subprocess.DEVNULL)
    assert isinstance(proc, subprocess.Popen) and proc.wait(timeout=60) == 0
    done = zygote.run([*CLI, "--version"], input="", capture_output=True, text=True, timeout=60)  # a stdin pipe
    assert done.returncode == 0 and done.stdout.startswith("evaluator-host ")


def test_the_cpu_of_forked_commands_is_counted_for_this_process() -> None:
    before = zygote.reaped_cpu
    assert zygote.run([*CLI, "--version"], capture_output=True, timeout=60).returncode == 0
    assert zygote.reaped_cpu > before


def _signal_masks(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, v in (line.split(":", 1) for line in lines) if k in ("SigBlk", "SigIgn", "SigCgt")}


def test_a_forked_serve_has_the_signal_dispositions_of_a_real_one(tmp_path: Path) -> None:
    """Blocked, ignored and caught signals, read from ``/proc`` once each service answers: the same sets."""
    masks = []
    for name, start in (("forked", zygote.popen), ("real", subprocess.Popen)):
        port = free_port()
        env = {**os.environ, "EVALUATOR_HOST_DATA_DIR": str(tmp_path / name), "EVALUATOR_HOST_BACKEND": "process"}
        proc = start([*CLI, "serve", "--port", str(port), "--log-level", "warning"], env=env)
        try:
            assert isinstance(proc, ZygoteProcess) == (name == "forked")
            with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
                wait_until(
                    lambda c=client: c.get("/healthz").status_code == 200, 120, 0.1, ignoring=(httpx.TransportError,)
                )
            masks.append(_signal_masks(proc.pid))
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    assert masks[0] == masks[1]


def test_a_status_that_came_with_the_pid_is_read_though_the_zygote_closed_the_connection() -> None:
    """A command that ended before its caller read the pid reply: the status is already buffered, the zygote's
    side closed; ``wait`` answers it rather than calling the zygote gone (found in review)."""
    mine, theirs = socket.socketpair()
    theirs.close()
    proc = ZygoteProcess([*CLI, "--version"], mine, 1, None, None)
    proc._buffer = b'{"status": 0, "cpu": 0.01}\n'
    assert proc.poll() == 0 and proc.wait(timeout=1) == 0


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_test_process_killed_mid_test_takes_the_services_it_forked_with_it(tmp_path: Path) -> None:
    """A test process that dies with a service running (an xdist worker killed by the OOM killer, say): its zygote
    exits, and the forked service is killed with it, instead of running (and holding memory) to the end of the
    run. Here a stand-in test process starts ``serve`` through its zygote, says the pids, and is SIGKILLed."""
    port = free_port()
    env = {**os.environ, "EVALUATOR_HOST_DATA_DIR": str(tmp_path / "data"), "EVALUATOR_HOST_BACKEND": "process"}
    script = (
        "import os, subprocess, sys, time\n"
        "from tests.support import zygote\n"
        f"proc = zygote.popen([*zygote.CLI, 'serve', '--port', '{port}', '--log-level', 'warning'], "
        "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "assert isinstance(proc, zygote.ZygoteProcess)\n"
        "print(proc.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    tester = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    served = 0
    try:
        assert tester.stdout is not None
        served = int(tester.stdout.readline())
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
            wait_until(lambda: client.get("/healthz").status_code == 200, 120, 0.1, ignoring=(httpx.TransportError,))
        assert _alive(served)
        tester.kill()
        tester.wait(timeout=30)
        wait_until(lambda: not _alive(served), 30, 0.1, what="the orphaned service to be gone")
    finally:
        tester.kill()
        if served and _alive(served):
            with contextlib.suppress(ProcessLookupError):
                os.kill(served, signal.SIGKILL)
