"""A command run in a docker container (a build box's set-up, install and hand-over): its exit code is the
command's only while the container still runs; a container taken away under it is said to be, never read as the
command's failure (a build box removed mid-install once answered as the packages' install failure)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from evaluator_host.errors import SandboxError
from evaluator_host.sandbox.docker.containers import _seen_here
from evaluator_host.sandbox.docker.engine import exec_exit_code, remove_container
from tests.support.backends import SESSION_ID, SESSION_LABEL, docker_only
from tests.support.service import make_settings

pytestmark = [pytest.mark.docker, docker_only]


@pytest.fixture
def box(tmp_path: Path) -> Iterator[tuple[docker.APIClient, str]]:
    settings = make_settings(tmp_path, backend="docker")
    client = docker.from_env(timeout=60)
    api = client.api
    created = api.create_container(
        settings.base_image,
        ["sleep", "infinity"],
        labels={SESSION_LABEL: SESSION_ID},
        host_config=api.create_host_config(init=True, network_mode="none"),
    )
    container_id = str(created["Id"])
    try:
        api.start(container_id)
        yield api, container_id
    finally:
        remove_container(api, container_id)
        client.close()


def _run(api: docker.APIClient, container_id: str, script: str) -> str:
    exec_id = str(api.exec_create(container_id, ["sh", "-c", script])["Id"])
    api.exec_start(exec_id)
    return exec_id


def test_a_commands_own_exit_code_is_returned_while_its_container_runs(box: tuple[docker.APIClient, str]) -> None:
    api, container_id = box
    assert exec_exit_code(api, _run(api, container_id, "exit 0"), container_id) == 0
    assert exec_exit_code(api, _run(api, container_id, "exit 3"), container_id) == 3
    assert exec_exit_code(api, _run(api, container_id, "kill -9 $$"), container_id) == 128 + 9


def test_a_container_removed_under_a_command_is_a_sandbox_error_not_the_commands_failure(
    box: tuple[docker.APIClient, str],
) -> None:
    api, container_id = box
    exec_id = str(api.exec_create(container_id, ["sh", "-c", "echo started; sleep 60"])["Id"])
    stream = api.exec_start(exec_id, stream=True)
    assert b"started" in next(iter(stream))  # the command runs
    remover = threading.Thread(target=remove_container, args=(api, container_id))
    started = time.monotonic()
    remover.start()
    try:
        for _ in stream:  # the stream ends with the command, killed with its container
            pass
        # read at once, as a build does: the engine may end the exec before it marks the container stopped
        with pytest.raises(SandboxError, match="stopped under a command run in it"):
            exec_exit_code(api, exec_id, container_id)
    finally:
        remover.join(timeout=60)
    assert time.monotonic() - started < 30  # not the command's 60 s


def test_a_stopped_container_under_a_command_is_a_sandbox_error(box: tuple[docker.APIClient, str]) -> None:
    api, container_id = box
    exec_id = str(api.exec_create(container_id, ["sh", "-c", "echo started; sleep 60"])["Id"])
    stream = api.exec_start(exec_id, stream=True)
    assert b"started" in next(iter(stream))
    api.kill(container_id)
    for _ in stream:
        pass
    with pytest.raises(SandboxError, match="stopped under a command run in it"):
        exec_exit_code(api, exec_id, container_id)


def test_a_containers_init_pid_is_used_only_when_this_hosts_process_of_it_is_the_containers(
    box: tuple[docker.APIClient, str],
) -> None:
    """The engine's pid for a container's init is taken only when this host's process of that pid belongs to the
    container (an engine on another host, or outside this pid namespace, names a pid that here is someone else's:
    the stray reaper would signal its children after every batch)."""
    api, container_id = box
    pid = api.inspect_container(container_id)["State"]["Pid"]
    assert _seen_here(pid, container_id) == pid
    assert _seen_here(os.getpid(), container_id) is None  # a local process of that pid, not the container's
    assert _seen_here(pid, "0" * 64) is None  # the pid another engine gave for another container
    assert _seen_here(None, container_id) is None
