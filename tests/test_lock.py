"""requirements.lock: every dependency of pyproject.toml pinned exactly, within its range, with hashes."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support import REPO


def _lock() -> dict[str, tuple[str, list[str]]]:
    text = (REPO / "requirements.lock").read_text()
    pins: dict[str, tuple[str, list[str]]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        head = re.match(r"([A-Za-z0-9._-]+)==([^\s;\\]+)", block)
        if head:
            pins[canonicalize_name(head.group(1))] = (head.group(2), re.findall(r"--hash=sha256:([0-9a-f]{64})", block))
    return pins


def test_every_dependency_is_locked_within_its_range_and_hashed() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    pins = _lock()
    for spec in wanted:
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in requirements.lock: run `make lock LOCK_UPGRADE=`"
        version, hashes = pins[name]
        assert requirement.specifier.contains(version, prereleases=True), f"{name}=={version} is outside {spec}"
    assert all(hashes for _, hashes in pins.values()), "every pin carries its hashes (pip --require-hashes)"


def test_make_install_installs_from_the_lock() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert "--require-hashes --no-deps -r requirements.lock" in makefile
    assert "-e '.[dev]'" not in makefile  # pyproject's ranges are never resolved at install time
