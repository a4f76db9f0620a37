"""``make test``'s scratch folder (``tests/support/scratch.py``): where the tiers' ``TMPDIR`` goes, and that it is
removed after the run."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.scratch import SHM, memory_tmpfs, run_scratch


def test_disk_keeps_the_environments_tmpdir() -> None:
    with run_scratch({"TEST_TMPDIR": "disk"}) as scratch:
        assert scratch is None


def test_a_named_folder_gets_a_fresh_folder_of_the_run_removed_at_the_end(tmp_path: Path) -> None:
    parent = tmp_path / "scratch-parent"
    with run_scratch({"TEST_TMPDIR": str(parent)}) as scratch:
        assert scratch is not None and scratch.parent == parent and scratch.is_dir()
        assert scratch.stat().st_mode & 0o1777 == 0o1777  # as /tmp: sticky, anyone's folders in it
        (scratch / "a" / "b").mkdir(parents=True)
        (scratch / "a" / "b" / "file").write_text("x")
    assert not scratch.exists() and parent.is_dir()


def test_the_folder_goes_even_when_the_run_raises(tmp_path: Path) -> None:
    seen: list[Path] = []
    try:
        with run_scratch({"TEST_TMPDIR": str(tmp_path)}) as scratch:
            assert scratch is not None
            seen.append(scratch)
            raise RuntimeError("a tier crashed")
    except RuntimeError:
        pass
    assert seen and not seen[0].exists()


def test_only_a_tmpfs_mount_point_with_room_is_taken_for_memory(tmp_path: Path) -> None:
    assert memory_tmpfs(tmp_path) is None  # not a mount point
    assert memory_tmpfs(Path("/proc")) is None  # a mount point, not a tmpfs
    if memory_tmpfs(SHM, needed=0) is None:  # (a machine without a usable /dev/shm: nothing more to check)
        return
    assert memory_tmpfs(SHM, needed=shutil.disk_usage(SHM).total + 1) is None  # never room for more than it holds
