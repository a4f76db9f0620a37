"""Backend selection follows the setting; it never silently substitutes another backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluator_host.errors import BackendUnavailable
from evaluator_host.services import select_backend
from tests.support.backends import docker_only
from tests.support.service import make_settings

NO_ENGINE = "unix:///nonexistent/docker.sock"


def test_process_selects_the_process_backend(tmp_path: Path) -> None:
    assert select_backend(make_settings(tmp_path, backend="process")).name == "process"


def test_auto_without_an_engine_falls_back_to_process(tmp_path: Path) -> None:
    assert select_backend(make_settings(tmp_path, backend="auto", docker_host=NO_ENGINE)).name == "process"


def test_docker_without_an_engine_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable):
        select_backend(make_settings(tmp_path, backend="docker", docker_host=NO_ENGINE))


def test_docker_without_the_base_image_is_refused_and_auto_falls_back(tmp_path: Path) -> None:
    missing = "evaluator-host/no-such-base:never"
    if select_backend(make_settings(tmp_path, backend="auto")).name == "process":
        pytest.skip("no Docker engine here")
    with pytest.raises(BackendUnavailable, match="make images"):
        select_backend(make_settings(tmp_path, backend="docker", base_image=missing))
    assert select_backend(make_settings(tmp_path, backend="auto", base_image=missing)).name == "process"


@docker_only
def test_auto_selects_docker_when_an_engine_answers(tmp_path: Path) -> None:
    assert select_backend(make_settings(tmp_path, backend="auto")).name == "docker"
