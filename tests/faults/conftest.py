"""Fault-test fixtures: a small disk to fill (the helpers are in ``tests/support/faults.py``); every test
of the tier is marked ``slow`` (real services killed, paused, filled and restarted: seconds each)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.faults import SmallDisk

FAULTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here: dict[Path, bool] = {}  # each file resolved once (the whole suite's items pass through this hook)
    for item in items:
        path = Path(item.path)
        if path not in here:
            here[path] = FAULTS in path.resolve().parents
        if here[path]:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    """A 64 MiB tmpfs mounted for the test (root only: skipped with the reason otherwise)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m,mode=0755", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"a small disk needs mounting a tmpfs (root): {done.stderr.strip()}")
    try:
        yield SmallDisk(mount)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
