"""Fault-test helpers: a small disk to fill, a tiny local wheel to build, a job to follow."""

from __future__ import annotations

import base64
import errno
import hashlib
import os
import subprocess
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


class SmallDisk:
    """A tmpfs of its own (the data dir lives on it) that a test can fill to the last byte and free again."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.filler = root / "filler"

    def fill(self) -> None:
        """Write until the disk refuses (ENOSPC): no byte of room left."""
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for size in (1 << 20, 1 << 12, 1):
                block = b"\0" * size
                while True:
                    try:
                        os.write(fd, block)
                    except OSError as exc:
                        assert exc.errno == errno.ENOSPC, exc
                        break
        finally:
            os.close(fd)

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)


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


def tiny_wheel(folder: Path, name: str = "evhtiny", version: str = "1.0", pad_kib: int = 256) -> Path:
    """A pure-Python wheel (``import evhtiny; evhtiny.VALUE == 42``), ``pad_kib`` KiB of comments big."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": "VALUE = 42\n" + ("# padding to make the install write something\n" * (pad_kib * 22)),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 120, every_s: float = 0.05) -> Any:
    """Poll ``check`` until it returns something truthy (returned), failing after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every_s)
