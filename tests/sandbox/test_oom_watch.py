"""The OOM watch: a v1 memory cgroup's OOM notices, told after the cgroup is gone (a docker container that exited
on its own: its engine removes the cgroup, and the kernel's count in it, often before the service reads it; the
engine's own OOMKilled flag can lag the exit or never come — a memory bomb then answered "error", exit 137)."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.sandbox.cgroups import Counter, OomWatch
from evaluator_host.sandbox.docker import backend as docker_backend
from evaluator_host.sandbox.docker import worker as docker_worker
from evaluator_host.sandbox.docker.engine import container_state, exit_state
from tests.support.backends import docker_only
from tests.support.service import assert_healthy, evaluate, make_settings

_V1 = Path("/sys/fs/cgroup/memory")
_BOMB = "b = []\nwhile True:\n    b.append(bytearray(4 << 20))\n"


@pytest.fixture
def cgroup() -> Iterator[Path]:
    """A fresh v1 memory cgroup of 48 MiB, swap included (skipped where there is none to make, or swap without
    swap accounting: a bomb would swap, not be killed)."""
    path = _V1 / f"evaluator-host-test-oomwatch-{uuid.uuid4().hex[:8]}"
    try:
        path.mkdir()
    except OSError:
        pytest.skip("no writable cgroup v1 memory hierarchy here (the watch is v1's)")
    try:
        swap = len(Path("/proc/swaps").read_text().splitlines()) > 1
        memsw = (path / "memory.memsw.limit_in_bytes").exists()
        if swap and not memsw:
            pytest.skip("swap without swap accounting in this v1 hierarchy: a memory bomb would swap")
        (path / "memory.limit_in_bytes").write_text(str(48 << 20))
        if memsw:
            (path / "memory.memsw.limit_in_bytes").write_text(str(48 << 20))
        yield path
    finally:
        for _ in range(100):  # (a test that failed early may leave a process in it: killed, then the cgroup goes)
            with contextlib.suppress(OSError, ValueError):
                for pid in (path / "cgroup.procs").read_text().split():
                    os.kill(int(pid), signal.SIGKILL)
            try:
                path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)


def _run_in(cgroup: Path, code: str) -> int:
    """Run ``code`` in a Python process inside ``cgroup``; its exit code (negative: the signal)."""
    procs = str(cgroup / "cgroup.procs")

    def enter() -> None:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))

    return subprocess.run([sys.executable, "-c", code], preexec_fn=enter, capture_output=True, timeout=60).returncode


def _told_after_removal(watch: OomWatch, cgroup: Path) -> bool | None:
    cgroup.rmdir()  # what the engine does when a container exits
    deadline = time.monotonic() + 10  # the removal's signal comes from a kernel work queue: moments later
    while (told := watch.verdict()) is None and time.monotonic() < deadline:
        time.sleep(0.005)
    return told


@pytest.fixture
def watch(cgroup: Path) -> Iterator[OomWatch]:
    """A watch of ``cgroup``, registered before anything runs in it (closed after the test)."""
    made = OomWatch.register(cgroup)
    assert made is not None
    yield made
    made.close()


def test_a_memory_bomb_is_told_after_its_cgroup_is_gone(cgroup: Path, watch: OomWatch) -> None:
    assert _run_in(cgroup, _BOMB) == -9
    assert _told_after_removal(watch, cgroup) is True


def test_a_clean_exit_is_told_no_oom_after_its_cgroup_is_gone_and_nothing_while_it_exists(
    cgroup: Path, watch: OomWatch
) -> None:
    assert _run_in(cgroup, "x = bytearray(8 << 20)") == 0
    assert watch.verdict() is None  # the cgroup exists: its removal is still to come, nothing is certain
    assert _told_after_removal(watch, cgroup) is False


def test_a_process_killed_by_a_signal_not_memory_is_no_oom(cgroup: Path, watch: OomWatch) -> None:
    assert _run_in(cgroup, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)") == -9
    assert _told_after_removal(watch, cgroup) is False


def test_an_oom_before_the_watch_began_is_told_too(cgroup: Path) -> None:
    assert _run_in(cgroup, _BOMB) == -9  # (the kernel's count in the cgroup is 1 when the watch begins)
    watch = OomWatch.register(cgroup)
    assert watch is not None
    try:
        assert watch.verdict() is True
        assert _told_after_removal(watch, cgroup) is True
    finally:
        watch.close()


def test_a_watch_dropped_unclosed_closes_its_eventfds(cgroup: Path) -> None:
    """A worker start cancelled after its watch was made never closes it: collected, it closes itself."""
    watch = OomWatch.register(cgroup)
    assert watch is not None
    fds = [watch._removal, watch._notices]
    assert all(os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[eventfd]" for fd in fds)
    closer = watch._closer
    del watch
    gc.collect()
    assert not closer.alive  # its finalizer ran: it closed both (whatever opens their numbers next)


def test_there_is_no_watch_without_a_v1_cgroup(tmp_path: Path) -> None:
    assert OomWatch.register(None) is None
    assert OomWatch.register(tmp_path) is None  # no cgroup.event_control: not a v1 memory cgroup


@pytest.mark.docker
@docker_only
def test_a_docker_memory_bomb_whose_engine_never_flags_it_is_still_a_memory_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine's OOMKilled flag hidden (as when it dropped the event: the cgroup went first) and the kernel's
    count unread (as when the cgroup is gone before it is read): the watch tells, and a worker that killed
    itself with the same exit code (137) stays an error."""
    if not (_V1 / "cgroup.event_control").exists():
        pytest.skip("no cgroup v1 memory hierarchy here: the engine's flag is the evidence")

    def unflagged(api: Any, container_id: str) -> tuple[int, bool]:
        code, _oom = real_exit_state(api, container_id)
        return code, False

    verdicts: list[bool | None] = []

    def verdict(self: OomWatch) -> bool | None:
        told = real_verdict(self)
        verdicts.append(told)
        return told

    real_exit_state, real_state, real_verdict = exit_state, container_state, OomWatch.verdict
    monkeypatch.setattr(docker_backend, "exit_state", unflagged)
    monkeypatch.setattr(docker_backend, "container_state", lambda api, cid: (real_state(api, cid)[0], False))
    monkeypatch.setattr(docker_worker, "oom_counter", lambda cgroup: Counter(None))
    monkeypatch.setattr(OomWatch, "verdict", verdict)
    settings = make_settings(tmp_path, backend="docker")
    with TestClient(create_app(settings)) as service:
        bomb = "def evaluate(inputs, outputs, trace):\n    x = bytearray(90 * 1024 * 1024)\n    return 1\n"
        result = evaluate(service, bomb, settings={"memory_mb": 64, "timeout_s": 20})
        assert result["status"] == "memory_limit", result
        assert verdicts and verdicts[-1] is True  # the watch told it, nothing else could
        verdicts.clear()
        suicide = (
            "import os, signal\n\ndef evaluate(inputs, outputs, trace):\n    os.kill(os.getpid(), signal.SIGKILL)\n"
        )
        result = evaluate(service, suicide, settings={"timeout_s": 20})
        assert result["status"] == "error" and "code 137" in result["error"]["message"], result
        assert verdicts and verdicts[-1] is False
        assert_healthy(service)
