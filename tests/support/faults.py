"""Fault-test helpers: a small disk to fill, a tiny local wheel to build, a service's sandboxed workers.
(The fixture that mounts a small disk is in ``tests/faults/conftest.py``.)"""

from __future__ import annotations

import base64
import errno
import hashlib
import os
import zipfile
from pathlib import Path


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


def _parents() -> dict[int, list[int]]:
    """Every process's children, from one pass over ``/proc`` (a process gone meanwhile is left out)."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            kids.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    return kids


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    return _parents().get(pid, [])


def worker_pids(service_pid: int) -> list[int]:
    """The sandboxed worker processes of a process-backend service (its descendants running the bootstrap)."""
    kids = _parents()  # one pass over /proc for the whole tree (not one per process of it)
    found, todo = [], [service_pid]
    while todo:
        for kid in kids.get(todo.pop(), []):
            todo.append(kid)
            try:
                if b"sandbox_init.py" in Path(f"/proc/{kid}/cmdline").read_bytes():
                    found.append(kid)
            except OSError:
                pass
    return found
