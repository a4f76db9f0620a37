"""Strays are killed through pidfds: a pid the walk found that is reused meanwhile is never signalled."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from evaluator_host.sandbox import strays
from tests.support import REPO

# Runs as pid 1 of a fresh pid namespace (its own /proc), where ns_last_pid can make the kernel hand
# a pid that just became free to the next process: real pid reuse, no waiting for pid_max to wrap.
_REUSE = textwrap.dedent(
    """
    import os, subprocess, sys
    from evaluator_host.sandbox import strays

    first = subprocess.Popen(["sleep", "60"])
    found = strays.member(first.pid, {os.getpid()})  # the walk finds a stray of the tree: its pidfd
    assert found is not None
    pid = first.pid
    first.kill()
    first.wait()  # gone; its pid is free
    with open("/proc/sys/kernel/ns_last_pid", "w") as fh:
        fh.write(str(pid - 1))
    bystander = subprocess.Popen(["sleep", "60"])  # an unrelated process, given the same pid
    assert bystander.pid == pid, (bystander.pid, pid)
    signalled = strays.kill(found)
    os.close(found)
    alive = bystander.poll() is None and open(f"/proc/{pid}/stat").read().split()[2] != "Z"
    bystander.kill()
    bystander.wait()
    print("signalled" if signalled else "not signalled", "alive" if alive else "killed")
    """
)


@pytest.mark.skipif(os.geteuid() != 0, reason="a pid namespace of its own needs root")
def test_a_stray_whose_pid_was_reused_is_never_signalled() -> None:
    argv = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", _REUSE]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["not", "signalled", "alive"]


def test_a_pidfd_is_taken_only_for_a_member_of_the_tree_and_reaches_nothing_once_it_exits() -> None:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        assert strays.member(proc.pid, {os.getpid() + 100_000}) is None  # not a child of the tree
        fd = strays.member(proc.pid, {os.getpid()})
        assert fd is not None
        try:
            assert strays.kill(fd) is True
            assert proc.wait(timeout=10) == -9
            assert strays.kill(fd) is False  # exited and reaped: the pidfd reaches nothing
        finally:
            os.close(fd)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
