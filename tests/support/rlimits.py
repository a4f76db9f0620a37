"""The process backend's rlimits-only mode in tests: as root, workers run as an unprivileged sandbox uid,
which must reach an interpreter and a build cache (``tests/sandbox/test_process_root.py``)."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from evaluator_host.sandbox.process.uid_claims import claimed_uid

UID = 200_000  # the default sandbox_uid_base


def reachable_python() -> str:
    """An interpreter of this version the sandbox uid can run (the service's own may sit under a private
    home, e.g. pyenv in /root: the backend would refuse it, see the last test)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (os.path.realpath(sys.executable), f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        try:
            with claimed_uid(UID) as uid:  # as the service's probes: no other service's worker has it meanwhile
                subprocess.run([candidate, "-c", "pass"], user=uid, group=uid, extra_groups=[], check=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        return candidate
    pytest.skip(f"no {version} the sandbox uid can run")


_SHARED_CACHE: list[Path] = []


def rlimits_overrides() -> dict[str, object]:
    """Settings for a service forced to the rlimits-only mode; as root, with an interpreter and a build
    cache its sandbox uid can reach (a shared world-readable cache dir, removed at exit)."""
    overrides: dict[str, object] = {"process_isolation": "rlimits"}
    if os.geteuid() == 0:
        if not _SHARED_CACHE:
            _SHARED_CACHE.append(Path(tempfile.mkdtemp(prefix="eh-cache-")))
            _SHARED_CACHE[0].chmod(0o755)
            atexit.register(shutil.rmtree, _SHARED_CACHE[0], True)
        overrides.update(python_executable=reachable_python(), cache_dir=_SHARED_CACHE[0])
    return overrides
