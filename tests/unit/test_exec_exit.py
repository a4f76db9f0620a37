"""A command's exit read from the engine (``sandbox/docker/engine.py``, ``exec_exit_code``), driven by scripted
engine answers: the moments a real engine shows only under load (an exec still "running" after its stream ended;
a removed container's exec ended before the container is marked stopped) are scripted here, in order."""

from __future__ import annotations

from typing import Any

import pytest

from evaluator_host.errors import SandboxError
from evaluator_host.sandbox.docker.engine import NotFound, exec_exit_code


class Scripted:
    """An engine answering ``exec_inspect`` and ``inspect_container`` from lists (the last answer repeats)."""

    def __init__(self, execs: list[dict[str, Any]], running: list[bool | type[Exception]]) -> None:
        self.execs, self.running = execs, running
        self.exec_reads = self.container_reads = 0

    def exec_inspect(self, exec_id: str) -> dict[str, Any]:
        self.exec_reads += 1
        return self.execs[min(self.exec_reads, len(self.execs)) - 1]

    def inspect_container(self, container_id: str) -> dict[str, Any]:
        self.container_reads += 1
        answer = self.running[min(self.container_reads, len(self.running)) - 1]
        if isinstance(answer, type):
            raise answer("gone")
        return {"State": {"Running": answer}}


DONE = {"Running": False, "ExitCode": 0}
STILL = {"Running": True, "ExitCode": None}


def test_an_exec_still_running_after_its_stream_is_read_again_until_it_ends() -> None:
    engine = Scripted([STILL, STILL, DONE], [True])
    assert exec_exit_code(engine, "e", "c") == 0
    assert engine.exec_reads == 3


def test_a_failed_command_in_a_container_that_runs_on_is_the_commands_failure() -> None:
    engine = Scripted([{"Running": False, "ExitCode": 3}], [True])
    assert exec_exit_code(engine, "e", "c") == 3
    assert engine.container_reads >= 3  # watched a while for a stop under way (20, 40, 80 … ms apart), then believed


@pytest.mark.parametrize("later", [False, NotFound])
def test_a_container_marked_stopped_or_gone_just_after_its_exec_ended_is_a_sandbox_error(
    later: bool | type[Exception],
) -> None:
    """The engine ends a removed container's execs (137) before it marks the container stopped."""
    engine = Scripted([{"Running": False, "ExitCode": 137}], [True, True, later])
    with pytest.raises(SandboxError, match="stopped under a command run in it"):
        exec_exit_code(engine, "e", "c")


def test_an_exec_that_never_ends_in_a_stopped_container_ends_the_wait_early() -> None:
    engine = Scripted([STILL], [False])
    with pytest.raises(SandboxError):
        exec_exit_code(engine, "e", "c", wait_s=5)
    assert engine.exec_reads == 1  # not read again for the 5 s an exec reading "running" may be given


def test_an_exec_the_engine_no_longer_knows_in_a_running_container_is_a_failure() -> None:
    class Forgotten(Scripted):
        def exec_inspect(self, exec_id: str) -> dict[str, Any]:
            raise NotFound("no such exec")

    assert exec_exit_code(Forgotten([], [True]), "e", "c") == 1
